/* Fork/join regions: every participant runs each region exactly once with the right
 * (ith, nth); writes before run are seen inside, writes inside are seen after; nested
 * and concurrent calls and bad parameters fail with their codes.
 * usage: test_pool_run [central|flat|tree|auto] */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <string.h>

#include "lockstep/lockstep.h"
#include "../common/check.h"

#define MAXN 17

struct ctx {
    lockstep_pool_t *pool;
    uint64_t input;            /* written by the caller before run (plain) */
    uint64_t out[MAXN];        /* one plain write per participant per region */
    uint32_t calls[MAXN];
    int bad;
    int nested_rc;
};

static void region(void *p, int ith, int nth)
{
    struct ctx *c = p;
    if (ith < 0 || ith >= nth || nth != lockstep_pool_size(c->pool))
        __atomic_store_n(&c->bad, 1, __ATOMIC_RELAXED);
    c->out[ith] = c->input * 31 + (uint64_t)ith;
    __atomic_fetch_add(&c->calls[ith], 1u, __ATOMIC_RELAXED);
}

static void nested(void *p, int ith, int nth)
{
    (void)nth;
    struct ctx *c = p;
    int rc = lockstep_pool_run(c->pool, region, c);
    if (ith == 0)
        c->nested_rc = rc;
    else if (rc != -EDEADLK)
        __atomic_store_n(&c->bad, 1, __ATOMIC_RELAXED);
}

struct other { lockstep_pool_t *pool; int rc; uint32_t go, done; };
static void *other_thread(void *p)
{
    struct other *o = p;
    while (!__atomic_load_n(&o->go, __ATOMIC_ACQUIRE))
        sched_yield();
    o->rc = lockstep_pool_run(o->pool, region, NULL);
    __atomic_store_n(&o->done, 1u, __ATOMIC_RELEASE);
    return NULL;
}
static void hold(void *p, int ith, int nth)
{
    (void)nth;
    struct other *o = p;
    if (ith != 0)
        return;
    __atomic_store_n(&o->go, 1u, __ATOMIC_RELEASE);
    while (!__atomic_load_n(&o->done, __ATOMIC_ACQUIRE))
        sched_yield();
}

static void check_bad_params(void)
{
    lockstep_pool_params_t p = lockstep_pool_params_default();
    CHECK(p.n_threads >= 1);
    CHECK(lockstep_pool_create(NULL) == NULL && errno == EINVAL);
    p.n_threads = 0;
    CHECK(lockstep_pool_create(&p) == NULL && errno == EINVAL);
    p.n_threads = -3;
    CHECK(lockstep_pool_create(&p) == NULL && errno == EINVAL);
    p.n_threads = 2;
    p.barrier = LOCKSTEP_BARRIER_DISSEM;
    CHECK(lockstep_pool_create(&p) == NULL && errno == EINVAL);
    p.barrier = (lockstep_barrier_kind_t)77;
    CHECK(lockstep_pool_create(&p) == NULL && errno == EINVAL);
    p.barrier = LOCKSTEP_BARRIER_AUTO;
    p.placement = LOCKSTEP_PLACE_LIST;
    p.cpus = NULL;
    CHECK(lockstep_pool_create(&p) == NULL && errno == EINVAL);
    int not_allowed[1] = {CPU_SETSIZE - 1};
    p.cpus = not_allowed;
    p.n_cpus = 1;
    CHECK(lockstep_pool_create(&p) == NULL && errno == EINVAL);
    int negative[1] = {-1};
    p.cpus = negative;
    CHECK(lockstep_pool_create(&p) == NULL && errno == EINVAL);
    p.placement = (lockstep_placement_t)9;
    CHECK(lockstep_pool_create(&p) == NULL && errno == EINVAL);
    p = lockstep_pool_params_default();
    p.wait_policy = (lockstep_wait_policy_t)12;
    CHECK(lockstep_pool_create(&p) == NULL && errno == EINVAL);

    CHECK_EQ(lockstep_pool_run(NULL, region, NULL), -EINVAL);
    CHECK_EQ(lockstep_pool_size(NULL), -EINVAL);
    CHECK_EQ(lockstep_pool_abort(NULL), -EINVAL);
    lockstep_pool_free(NULL);
}

static void check_placements(void)
{
    cpu_set_t set;
    CHECK_EQ(sched_getaffinity(0, sizeof set, &set), 0);
    int first = -1;
    for (int c = 0; c < CPU_SETSIZE && first < 0; c++)
        if (CPU_ISSET(c, &set))
            first = c;
    lockstep_placement_t pl[] = {LOCKSTEP_PLACE_CLOSE, LOCKSTEP_PLACE_SPREAD, LOCKSTEP_PLACE_LIST};
    for (unsigned i = 0; i < 3; i++) {
        lockstep_pool_params_t p = lockstep_pool_params_default();
        p.n_threads = 3;
        p.placement = pl[i];
        p.cpus = &first;
        p.n_cpus = 1;
        lockstep_pool_t *pool = lockstep_pool_create(&p);
        CHECK(pool != NULL);
        struct ctx c = {.pool = pool, .input = 1};
        CHECK_EQ(lockstep_pool_run(pool, region, &c), 0);
        for (int t = 0; t < 3; t++)
            CHECK_EQ(c.calls[t], 1);
        lockstep_pool_free(pool);
    }
    /* restore the caller's affinity, which placement pinned */
    sched_setaffinity(0, sizeof set, &set);
}

/* Unplaced workers start each on a CPU of its own and then take back the caller's CPU
 * set (pool.c: start_cpus): inside a region every participant may run on exactly the
 * CPUs the caller may, none is left bound to one. */
static cpu_set_t unplaced_sets[MAXN];

static void record_set(void *p, int ith, int nth)
{
    (void)p;
    (void)nth;
    CHECK_EQ(sched_getaffinity(0, sizeof unplaced_sets[ith], &unplaced_sets[ith]), 0);
}

static void check_unplaced(void)
{
    cpu_set_t set;
    CHECK_EQ(sched_getaffinity(0, sizeof set, &set), 0);
    for (int n = 2; n <= 9; n += 7) { /* fewer threads than CPUs here, and more */
        lockstep_pool_params_t p = lockstep_pool_params_default();
        p.n_threads = n;
        lockstep_pool_t *pool = lockstep_pool_create(&p);
        CHECK(pool != NULL);
        for (int round = 0; round < 2; round++) {
            memset(unplaced_sets, 0, sizeof unplaced_sets);
            CHECK_EQ(lockstep_pool_run(pool, record_set, NULL), 0);
            for (int t = 0; t < n; t++)
                CHECK(CPU_EQUAL(&unplaced_sets[t], &set));
        }
        lockstep_pool_free(pool);
    }
}

int main(int argc, char **argv)
{
    watchdog(240);
    lockstep_barrier_kind_t kind = LOCKSTEP_BARRIER_AUTO;
    if (argc > 1) {
        int k = lockstep_barrier_kind_parse(argv[1]);
        CHECK(k >= 0);
        kind = (lockstep_barrier_kind_t)k;
    }
    check_bad_params();
    check_placements();
    check_unplaced();

    static const int counts[] = {1, 2, 3, 4, 5, 7, 8, 9, 16, 17};
    for (unsigned i = 0; i < sizeof counts / sizeof counts[0]; i++) {
        int n = counts[i];
        lockstep_pool_params_t p = lockstep_pool_params_default();
        p.n_threads = n;
        p.barrier = kind;
        lockstep_pool_t *pool = lockstep_pool_create(&p);
        CHECK(pool != NULL);
        CHECK_EQ(lockstep_pool_size(pool), n);
        if (kind != LOCKSTEP_BARRIER_AUTO)
            CHECK_EQ(lockstep_pool_barrier_kind(pool), kind);
        CHECK_EQ(lockstep_pool_run(pool, NULL, NULL), -EINVAL);

        struct ctx c = {.pool = pool};
        unsigned regions = n > 4 ? 300 : 2000;
        for (unsigned r = 1; r <= regions; r++) {
            c.input = r;
            CHECK_EQ(lockstep_pool_run(pool, region, &c), 0);
            for (int t = 0; t < n; t++) {
                CHECK_EQ(c.out[t], (uint64_t)r * 31 + (uint64_t)t);
                CHECK_EQ(c.calls[t], r);
            }
        }
        CHECK_EQ(c.bad, 0);

        /* nested: the inner call fails on every participant, the outer region completes */
        c.nested_rc = 0;
        CHECK_EQ(lockstep_pool_run(pool, nested, &c), 0);
        CHECK_EQ(c.nested_rc, -EDEADLK);
        CHECK_EQ(c.bad, 0);

        /* concurrent: another thread's call while our region is in flight */
        struct other o = {pool, 0, 0, 0};
        pthread_t t;
        CHECK_EQ(pthread_create(&t, NULL, other_thread, &o), 0);
        CHECK_EQ(lockstep_pool_run(pool, hold, &o), 0);
        pthread_join(t, NULL);
        CHECK_EQ(o.rc, -EBUSY);

        lockstep_pool_free(pool);
    }
    return 0;
}
