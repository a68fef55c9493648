/* parallel_for covers every index exactly once, under both schedules, for sizes from
 * 0 to a few hundred thousand and several chunk sizes; bad arguments fail. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>

#include "lockstep/lockstep.h"
#include "../common/check.h"

struct cover {
    uint8_t *hits;
    int64_t n;
    int nth;
    int bad;
};

static void body(void *p, int64_t begin, int64_t end, int ith)
{
    struct cover *c = p;
    if (begin < 0 || end > c->n || begin >= end || ith < 0 || ith >= c->nth)
        __atomic_store_n(&c->bad, 1, __ATOMIC_RELAXED);
    for (int64_t i = begin; i < end && i < c->n && i >= 0; i++)
        __atomic_fetch_add(&c->hits[i], 1, __ATOMIC_RELAXED);
}

int main(void)
{
    watchdog(240);
    static const int threads[] = {1, 2, 3, 5, 8, 16, 17};
    static const int64_t sizes[] = {0, 1, 2, 7, 16, 1000, 4099, 262147};
    static const int64_t chunks[] = {0, 1, 3, 64, 1000000};
    uint8_t *hits = malloc(262147);
    CHECK(hits != NULL);
    for (unsigned ti = 0; ti < sizeof threads / sizeof threads[0]; ti++) {
        lockstep_pool_params_t p = lockstep_pool_params_default();
        p.n_threads = threads[ti];
        lockstep_pool_t *pool = lockstep_pool_create(&p);
        CHECK(pool != NULL);
        for (unsigned si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
            for (int sched = 0; sched < 2; sched++)
                for (unsigned ci = 0; ci < sizeof chunks / sizeof chunks[0]; ci++) {
                    int64_t n = sizes[si];
                    memset(hits, 0, 262147);
                    struct cover c = {hits, n, threads[ti], 0};
                    CHECK_EQ(lockstep_pool_parallel_for(pool, n, chunks[ci],
                                                        (lockstep_schedule_t)sched, body, &c), 0);
                    CHECK_EQ(c.bad, 0);
                    for (int64_t i = 0; i < n; i++)
                        if (hits[i] != 1) {
                            fprintf(stderr, "threads=%d n=%lld sched=%d chunk=%lld: index %lld hit %d times\n",
                                    threads[ti], (long long)n, sched, (long long)chunks[ci],
                                    (long long)i, hits[i]);
                            return 1;
                        }
                }
        struct cover c = {hits, 1, 1, 0};
        CHECK_EQ(lockstep_pool_parallel_for(pool, -1, 0, LOCKSTEP_SCHEDULE_STATIC, body, &c), -EINVAL);
        CHECK_EQ(lockstep_pool_parallel_for(pool, 5, -1, LOCKSTEP_SCHEDULE_STATIC, body, &c), -EINVAL);
        CHECK_EQ(lockstep_pool_parallel_for(pool, 5, 0, (lockstep_schedule_t)4, body, &c), -EINVAL);
        CHECK_EQ(lockstep_pool_parallel_for(pool, 5, 0, LOCKSTEP_SCHEDULE_STATIC, NULL, &c), -EINVAL);
        CHECK_EQ(lockstep_pool_parallel_for(NULL, 5, 0, LOCKSTEP_SCHEDULE_STATIC, body, &c), -EINVAL);
        lockstep_pool_free(pool);
    }
    free(hits);
    return 0;
}
