/* Large-message copies and reductions, split across the communicator's pool (if any).
 * Each block of elements goes to one thread, which reduces it over all ranks in rank
 * order, exactly as the serial path does: the split changes who computes an element,
 * never how, so results are bit-identical with or without a pool. Below LS_PAR_MIN bytes
 * (or without a pool, or if the pool is busy) the work runs on the calling thread. */
#include <string.h>

#include "comm_impl.h"

struct par_copy {
    char *dst;
    const char *src;
    size_t n;
};

static void copy_range(void *p, int64_t begin, int64_t end, int ith)
{
    (void)ith;
    struct par_copy *a = p;
    size_t lo = (size_t)begin * LS_PAR_BLOCK, hi = (size_t)end * LS_PAR_BLOCK;
    if (hi > a->n)
        hi = a->n;
    memcpy(a->dst + lo, a->src + lo, hi - lo);
}

void ls_comm_copy(lockstep_comm_t *c, void *dst, const void *src, size_t n)
{
    if (c->pool && n >= LS_PAR_MIN) {
        struct par_copy a = {dst, src, n};
        int64_t blocks = (int64_t)((n + LS_PAR_BLOCK - 1) / LS_PAR_BLOCK);
        if (lockstep_pool_parallel_for(c->pool, blocks, 0, LOCKSTEP_SCHEDULE_STATIC, copy_range, &a) == 0)
            return;
    }
    memcpy(dst, src, n);
}

struct par_reduce {
    lockstep_dtype_t dt;
    lockstep_op_t op;
    char *out;
    void *const *also;
    const void *const *in;
    int nalso, nin;
    size_t count, es, per_block;
};

static void reduce_range(void *p, int64_t begin, int64_t end, int ith)
{
    (void)ith;
    struct par_reduce *a = p;
    size_t lo = (size_t)begin * a->per_block, hi = (size_t)end * a->per_block;
    if (hi > a->count)
        hi = a->count;
    const void *in[LOCKSTEP_COMM_MAX_RANKS];
    void *also[LOCKSTEP_COMM_MAX_RANKS];
    for (int k = 0; k < a->nin; k++)
        in[k] = (const char *)a->in[k] + lo * a->es;
    for (int k = 0; k < a->nalso; k++)
        also[k] = (char *)a->also[k] + lo * a->es;
    ls_reduce(a->dt, a->op, a->out + lo * a->es, also, a->nalso, in, a->nin, hi - lo);
}

void ls_comm_reduce(lockstep_comm_t *c, lockstep_dtype_t dt, lockstep_op_t op, void *out, void *const *also,
                    int nalso, const void *const *in, int nin, size_t count)
{
    size_t es = lockstep_dtype_size(dt);
    if (c->pool && count * es >= LS_PAR_MIN) {
        struct par_reduce a = {dt, op, out, also, in, nalso, nin, count, es, LS_PAR_BLOCK / es};
        int64_t blocks = (int64_t)((count + a.per_block - 1) / a.per_block);
        if (lockstep_pool_parallel_for(c->pool, blocks, 0, LOCKSTEP_SCHEDULE_STATIC, reduce_range, &a) == 0)
            return;
    }
    ls_reduce(dt, op, out, also, nalso, in, nin, count);
}
