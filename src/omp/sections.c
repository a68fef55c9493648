/* The work-sharing constructs that are not loops: sections (a dynamic loop over the
 * section numbers, chunk 1) and single (the first thread to claim the construct runs
 * it; with copyprivate its data reaches the others through the descriptor). */
#define _GNU_SOURCE
#include <sched.h>

#include "omp_impl.h"
#include "chunk.h"

/* ---- sections ---------------------------------------------------------------------------- */

static unsigned sections_next(struct ls_omp_thread *t)
{
    uint64_t lo, hi;
    if (!t->c.team) /* orphaned: this thread runs every section, in order */
        return t->orphan_section < t->orphan_sections ? ++t->orphan_section : 0u;
    return ls_omp_loop_next(t, &lo, &hi) ? (unsigned)lo + 1u : 0u;
}

static unsigned sections_start(unsigned count, void **mem)
{
    struct ls_omp_thread *t = ls_omp_thr();
    if (!t->c.team) { /* orphaned: this thread runs them all, one by one */
        t->orphan_section = 0;
        t->orphan_sections = count;
        return sections_next(t);
    }
    ls_omp_loop_enter(t, LS_SCHED_DYNAMIC, 1, count, 1, 1, mem);
    return sections_next(t);
}

LS_OMP_EXPORT unsigned GOMP_sections_start(unsigned count)
{
    return sections_start(count, NULL);
}

LS_OMP_EXPORT unsigned GOMP_sections2_start(unsigned count, uintptr_t *reductions, void **mem)
{
    unsigned first = sections_start(count, mem);
    if (reductions)
        ls_omp_ws_reductions(ls_omp_thr(), reductions);
    return first;
}

LS_OMP_EXPORT unsigned GOMP_sections_next(void)
{
    return sections_next(ls_omp_thr());
}

LS_OMP_EXPORT void GOMP_sections_end_nowait(void)
{
    struct ls_omp_thread *t = ls_omp_thr();
    if (t->c.team)
        ls_omp_ws_leave(t);
}

LS_OMP_EXPORT void GOMP_sections_end(void)
{
    GOMP_sections_end_nowait();
    ls_omp_barrier();
}

LS_OMP_EXPORT void GOMP_parallel_sections(void (*fn)(void *), void *data, unsigned nt,
                                          unsigned count, unsigned flags)
{
    ls_omp_fork(fn, data, nt, flags, LS_SCHED_DYNAMIC, 1, count, 1, 1);
    fn(data);
    ls_omp_join();
}

LS_OMP_EXPORT void GOMP_parallel_sections_start(void (*fn)(void *), void *data, unsigned nt,
                                                unsigned count)
{
    ls_omp_fork(fn, data, nt, 0, LS_SCHED_DYNAMIC, 1, count, 1, 1);
}

/* ---- single ------------------------------------------------------------------------------ */

LS_OMP_EXPORT bool GOMP_single_start(void)
{
    struct ls_omp_thread *t = ls_omp_thr();
    return !t->c.team || ls_omp_ws_enter(t, NULL, NULL) == 1;
}

static void copy_init(struct ls_omp_ws *ws, void *arg, int n)
{
    (void)arg;
    ls_omp_ws_init(ws, LS_SCHED_STATIC, 0, 0, 0, 0, n);
}

LS_OMP_EXPORT void *GOMP_single_copy_start(void)
{
    struct ls_omp_thread *t = ls_omp_thr();
    if (!t->c.team)
        return NULL;
    if (ls_omp_ws_enter(t, copy_init, NULL))
        return NULL;
    struct ls_omp_ws *ws = t->c.ws;
    LS_OMP_SPIN_UNTIL(ls_load_acquire(&ws->copy_ready) != 0);
    void *data = ws->copy;
    ls_omp_ws_leave(t);
    return data;
}

LS_OMP_EXPORT void GOMP_single_copy_end(void *data)
{
    struct ls_omp_thread *t = ls_omp_thr();
    struct ls_omp_ws *ws = t->c.ws;
    if (!ws)
        return;
    ws->copy = data;
    ls_store_release(&ws->copy_ready, 1u); /* publishes data to the waiting threads */
    ls_omp_ws_leave(t);
}
