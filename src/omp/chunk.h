/* A thread's next chunk of its loop construct: [lo, hi) of the normalised iterations,
 * false when none is left. The common loops are inline, as GOMP_loop_*_next runs them
 * per chunk: dynamic, one RMW per chunk (a team of one needs no locked instruction),
 * and static with a chunk size, none. Every other schedule is ls_omp_loop_next_rest
 * (work.c). */
#ifndef LOCKSTEP_OMP_CHUNK_H
#define LOCKSTEP_OMP_CHUNK_H

#include "omp_impl.h"

static inline bool ls_omp_loop_next(struct ls_omp_thread *t, uint64_t *lo, uint64_t *hi)
{
    struct ls_omp_ws *ws = t->c.ws;
    if (LS_LIKELY(ws && !ws->ordered)) { /* ordered chunks also pass the turn: work.c */
        uint64_t count = ws->count, chunk = ws->chunk, i;
        if (ws->sched == LS_SCHED_DYNAMIC && count <= (UINT64_MAX >> 1)) {
            /* next may pass count by at most n * chunk, which cannot wrap below 2^63 */
            if (t->c.n == 1) {
                i = ws->next;
                ws->next = i + chunk;
            } else {
                i = ls_fetch_add(&ws->next, chunk, __ATOMIC_RELAXED);
            }
            if (i >= count)
                return false;
        } else if (ws->sched == LS_SCHED_STATIC && chunk != 0 && t->c.n > 1) {
            /* this thread's k-th chunk is the team's tid + k * n */
            uint64_t k = (uint64_t)t->c.tid + t->c.static_k++ * (uint64_t)t->c.n;
            if (k >= ws->n_chunks)
                return false;
            i = k * chunk;
        } else {
            return ls_omp_loop_next_rest(t, lo, hi);
        }
        *lo = i;
        *hi = chunk > count - i ? count : i + chunk;
        return true;
    }
    return ls_omp_loop_next_rest(t, lo, hi);
}

#endif
