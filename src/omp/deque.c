/* A member's deque of deferred tasks.
 *
 * Indices only grow (modulo 2^32): the owner pushes at bottom and pops below it; a
 * thief takes the task at top and moves top up. The owner's pop and a thief's take
 * contend only for the last task: each first moves its own index, then reads the
 * other's (both seq_cst), so at least one of the two sees the other and steps back;
 * the owner then settles it under the thieves' lock.
 *
 * A thief reserves the top task (top + 1) before it reads it, so it can look at the
 * task and put it back (a thread in a taskwait takes only its own task's
 * descendants). While tasks are reserved the owner sees as many more free places
 * than there are, so a push leaves a batch's places empty (LS_OMP_DEQUE_ROOM): the
 * reserved ones are never overwritten.
 *
 * A thief with no filter takes half of the tasks at once (up to its max): it reserves
 * them as one, and hands back those the owner popped meanwhile. The
 * owner's line and the ring's then move once per batch, not once per task. */
#include "omp_impl.h"
#include "bell.h"

#define MASK (LS_OMP_DEQUE_CAP - 1u)

static inline int32_t diff(uint32_t a, uint32_t b)
{
    return (int32_t)(a - b);
}

bool ls_omp_deque_push(struct ls_omp_deque *d, struct ls_omp_task *task, bool *was_empty)
{
    uint32_t b = ls_load_relaxed(&d->bottom), t = ls_load_acquire(&d->top);
    if (diff(b, t) >= LS_OMP_DEQUE_ROOM)
        return false;
    d->ring[b & MASK] = task;
    *was_empty = diff(b, t) <= 0;
    /* publishes the slot and the task; seq_cst when the deque was empty, ahead of
     * ls_omp_ring's read of the sleepers (a parker reads the deques after registering) */
    if (*was_empty)
        ls_store_seqcst(&d->bottom, b + 1u);
    else
        ls_store_release(&d->bottom, b + 1u);
    return true;
}

struct ls_omp_task *ls_omp_deque_pop(struct ls_omp_deque *d, uint32_t mark)
{
    uint32_t b = ls_load_relaxed(&d->bottom) - 1u;
    /* nothing since mark, or empty (top only grows: empty stays empty for the owner) */
    if (diff(b, mark) < 0 || diff(b, ls_load_relaxed(&d->top)) < 0)
        return NULL;
    ls_store_seqcst(&d->bottom, b);
    if (diff(b, ls_load_seqcst(&d->top)) > 0)
        return d->ring[b & MASK]; /* a task above it remains: no thief reaches b */
    /* the last task, or a thief holds it: settle it with the thieves shut out */
    ls_store_relaxed(&d->bottom, b + 1u);
    ls_omp_spin_lock(&d->lock);
    struct ls_omp_task *task = NULL;
    if (diff(b, ls_load_relaxed(&d->top)) >= 0) {
        task = d->ring[b & MASK];
        ls_store_relaxed(&d->bottom, b);
    }
    ls_omp_spin_unlock(&d->lock);
    return task;
}

uint32_t ls_omp_deque_steal(struct ls_omp_deque *d, struct ls_omp_task **out, uint32_t max,
                            bool (*want)(const struct ls_omp_task *, const void *),
                            const void *arg)
{
    if (!ls_omp_deque_busy(d) || !ls_omp_spin_trylock(&d->lock))
        return 0; /* empty, or another thief is at it: try elsewhere */
    uint32_t t = ls_load_relaxed(&d->top);
    int32_t avail = diff(ls_load_acquire(&d->bottom), t);
    uint32_t k = avail > 0 ? ((uint32_t)avail + 1u) / 2u : 0u;
    if (k > max)
        k = max;
    if (k) {
        ls_store_seqcst(&d->top, t + k);
        /* the owner may have popped some since: keep only those still below bottom */
        int32_t left = diff(ls_load_seqcst(&d->bottom), t);
        if (left < (int32_t)k)
            k = left > 0 ? (uint32_t)left : 0u;
        for (uint32_t i = 0; i < k; i++)
            out[i] = d->ring[(t + i) & MASK];
        if (k && want && !want(out[0], arg))
            k = 0; /* the caller takes one: it does not want this one */
        ls_store_relaxed(&d->top, t + k); /* put back what it does not take */
    }
    ls_omp_spin_unlock(&d->lock);
    return k;
}
