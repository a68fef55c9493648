/* Barrier bad input and the primary's gather: every misuse gives its error code. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdint.h>

#include "lockstep/lockstep.h"
#include "../common/check.h"

static _Alignas(128) char mem[1 << 16];

static void *arrive_one(void *p)
{
    lockstep_barrier_t *b = p;
    CHECK_EQ(lockstep_barrier_arrive_and_wait(b, 1), 0);
    return NULL;
}

int main(void)
{
    watchdog(60);
    lockstep_barrier_t *b = (lockstep_barrier_t *)mem;
    lockstep_barrier_params_t p = lockstep_barrier_params_default();

    /* sizes */
    CHECK_EQ(lockstep_barrier_size(LOCKSTEP_BARRIER_CENTRAL, 0, 0), 0);
    CHECK_EQ(lockstep_barrier_size(LOCKSTEP_BARRIER_CENTRAL, LOCKSTEP_BARRIER_MAX_PARTICIPANTS + 1, 0), 0);
    CHECK_EQ(lockstep_barrier_size(LOCKSTEP_BARRIER_TREE, 8, 1), 0);
    CHECK_EQ(lockstep_barrier_size(LOCKSTEP_BARRIER_TREE, 8, 65), 0);
    CHECK_EQ(lockstep_barrier_size((lockstep_barrier_kind_t)99, 8, 0), 0);
    CHECK(lockstep_barrier_size(LOCKSTEP_BARRIER_DISSEM, 17, 0) >
          lockstep_barrier_size(LOCKSTEP_BARRIER_CENTRAL, 17, 0));

    /* init */
    CHECK_EQ(lockstep_barrier_init(NULL, sizeof mem, 2, &p), -EINVAL);
    CHECK_EQ(lockstep_barrier_init((lockstep_barrier_t *)(mem + 4), sizeof mem - 4, 2, &p), -EINVAL);
    CHECK_EQ(lockstep_barrier_init(b, sizeof mem, 0, &p), -EINVAL);
    CHECK_EQ(lockstep_barrier_init(b, 64, 2, &p), -ENOSPC);
    p.kind = (lockstep_barrier_kind_t)42;
    CHECK_EQ(lockstep_barrier_init(b, sizeof mem, 2, &p), -EINVAL);
    p = lockstep_barrier_params_default();
    p.wait_policy = (lockstep_wait_policy_t)17;
    CHECK_EQ(lockstep_barrier_init(b, sizeof mem, 2, &p), -EINVAL);
    p = lockstep_barrier_params_default();

    /* calls on an initialised barrier with bad participants */
    CHECK_EQ(lockstep_barrier_init(b, sizeof mem, 2, NULL), 0);
    CHECK_EQ(lockstep_barrier_arrive(b, 2), -EINVAL);
    CHECK_EQ(lockstep_barrier_wait(b, 7), -EINVAL);
    CHECK_EQ(lockstep_barrier_arrive(NULL, 0), -EINVAL);
    CHECK_EQ(lockstep_barrier_arrive_and_wait(NULL, 0), -EINVAL);
    CHECK_EQ(lockstep_barrier_gather(NULL, 0), -EINVAL);

    /* gather: times out while participant 1 is absent, then succeeds once it arrives;
     * participant 0's arrival then releases it at once */
    static const lockstep_barrier_kind_t with_primary[] = {LOCKSTEP_BARRIER_CENTRAL, LOCKSTEP_BARRIER_FLAT,
                                                          LOCKSTEP_BARRIER_TREE, LOCKSTEP_BARRIER_COUNTER};
    for (unsigned ki = 0; ki < 4; ki++) {
        p.kind = with_primary[ki];
        CHECK_EQ(lockstep_barrier_init(b, sizeof mem, 2, &p), 0);
        CHECK_EQ(lockstep_barrier_gather(b, lockstep_now_ns() + 20 * 1000 * 1000), -ETIMEDOUT);
        pthread_t t;
        CHECK_EQ(pthread_create(&t, NULL, arrive_one, b), 0);
        CHECK_EQ(lockstep_barrier_gather(b, 0), 0);
        CHECK_EQ(lockstep_barrier_arrive_and_wait(b, 0), 0);
        pthread_join(t, NULL);
    }
    p.kind = LOCKSTEP_BARRIER_DISSEM;
    CHECK_EQ(lockstep_barrier_init(b, sizeof mem, 2, &p), 0);
    CHECK_EQ(lockstep_barrier_gather(b, 0), -ENOTSUP);

    /* AUTO never resolves to a kind without a primary when asked for gather */
    for (unsigned n = 1; n <= 40; n++) {
        p = lockstep_barrier_params_default();
        p.need_gather = 1;
        CHECK(lockstep_barrier_size(LOCKSTEP_BARRIER_AUTO, n, 0) <= sizeof mem);
        CHECK_EQ(lockstep_barrier_init(b, sizeof mem, n, &p), 0);
        CHECK(lockstep_barrier_kind(b) != LOCKSTEP_BARRIER_DISSEM);
        p.need_gather = 0;
        CHECK_EQ(lockstep_barrier_init(b, lockstep_barrier_size(LOCKSTEP_BARRIER_AUTO, n, 0), n, &p), 0);
        CHECK(lockstep_barrier_kind(b) > LOCKSTEP_BARRIER_AUTO);
    }
    p = lockstep_barrier_params_default();

    /* wait_until: times out while participant 1 is absent, and resumes once it comes */
    for (int k = LOCKSTEP_BARRIER_CENTRAL; k <= LOCKSTEP_BARRIER_COUNTER; k++) {
        p = lockstep_barrier_params_default();
        p.kind = (lockstep_barrier_kind_t)k;
        CHECK_EQ(lockstep_barrier_init(b, sizeof mem, 2, &p), 0);
        CHECK_EQ(lockstep_barrier_arrive(b, 0), 0);
        CHECK_EQ(lockstep_barrier_wait_until(b, 0, lockstep_now_ns() + 10 * 1000 * 1000), -ETIMEDOUT);
        CHECK_EQ(lockstep_barrier_wait_until(b, 0, lockstep_now_ns() + 1000 * 1000), -ETIMEDOUT);
        pthread_t t;
        CHECK_EQ(pthread_create(&t, NULL, arrive_one, b), 0);
        CHECK_EQ(lockstep_barrier_wait_until(b, 0, 0), 0);
        pthread_join(t, NULL);
        CHECK_EQ(lockstep_barrier_wait_until(b, 5, 0), -EINVAL);
    }

    /* destroyed barrier */
    lockstep_barrier_destroy(b);
    CHECK_EQ(lockstep_barrier_arrive(b, 0), -EINVAL);
    CHECK_EQ(lockstep_barrier_kind(b), -EINVAL);

    /* names */
    CHECK_EQ(lockstep_barrier_kind_parse("tree"), LOCKSTEP_BARRIER_TREE);
    CHECK_EQ(lockstep_barrier_kind_parse("nonsense"), -EINVAL);
    CHECK_EQ(lockstep_barrier_kind_parse(NULL), -EINVAL);
    CHECK(strcmp(lockstep_barrier_kind_name(LOCKSTEP_BARRIER_DISSEM), "dissem") == 0);
    CHECK(lockstep_barrier_kind_name((lockstep_barrier_kind_t)9) == NULL);
    CHECK_EQ(lockstep_barrier_kind_parse("counter"), LOCKSTEP_BARRIER_COUNTER);
    return 0;
}
