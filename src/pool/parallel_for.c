/* parallel_for: a region whose share walks part of [0, n).
 * STATIC gives participant i the i-th of nth near-equal contiguous blocks.
 * DYNAMIC hands out chunk indices from one counter; counting chunks rather than
 * elements keeps the counter far from overflow whatever n and chunk are. */
#include <errno.h>

#include "pool_impl.h"

struct pfor {
    lockstep_pool_t *pool;
    lockstep_for_fn fn;
    void *arg;
    int64_t n, chunk, nchunks;
    lockstep_schedule_t schedule;
};

static void pfor_share(void *p, int ith, int nth)
{
    struct pfor *f = p;
    if (f->schedule == LOCKSTEP_SCHEDULE_STATIC) {
        int64_t per = f->n / nth, rem = f->n % nth;
        int64_t begin = ith * per + (ith < rem ? ith : rem);
        int64_t end = begin + per + (ith < rem ? 1 : 0);
        if (begin < end)
            f->fn(f->arg, begin, end, ith);
        return;
    }
    for (;;) {
        int64_t c = __atomic_fetch_add(&f->pool->next_chunk, 1, __ATOMIC_RELAXED);
        if (c >= f->nchunks)
            return;
        int64_t begin = c * f->chunk;
        int64_t end = f->n - begin > f->chunk ? begin + f->chunk : f->n;
        f->fn(f->arg, begin, end, ith);
    }
}

int lockstep_pool_parallel_for(lockstep_pool_t *pool, int64_t n, int64_t chunk,
                               lockstep_schedule_t schedule, lockstep_for_fn fn, void *arg)
{
    if (!pool || !fn || n < 0 || chunk < 0 ||
        (schedule != LOCKSTEP_SCHEDULE_STATIC && schedule != LOCKSTEP_SCHEDULE_DYNAMIC))
        return -EINVAL;
    if (n == 0)
        return 0;
    int rc = ls_pool_claim(pool);
    if (rc)
        return rc;
    struct pfor f = {pool, fn, arg, n, chunk, 0, schedule};
    if (f.chunk == 0) { /* about eight chunks per participant: balance without contention */
        f.chunk = n / ((int64_t)pool->n * 8);
        if (f.chunk < 1)
            f.chunk = 1;
    }
    if (f.chunk > n)
        f.chunk = n;
    f.nchunks = n / f.chunk + (n % f.chunk != 0);
    pool->next_chunk = 0; /* published to the workers by the fork */
    ls_pool_region(pool, pfor_share, &f);
    ls_pool_unclaim(pool);
    return 0;
}
