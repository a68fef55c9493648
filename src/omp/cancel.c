/* Cancellation: cancel and cancellation point for parallel, for, sections and taskgroup
 * (OMP_CANCELLATION=true sets cancel-var; without it both are no-ops, as the spec says).
 *
 *   - parallel: team->cancelled. Threads leave the region at their next cancellation
 *     point or cancellable barrier; a thread waiting in a cancellable barrier is
 *     released. Queued tasks of the team are discarded (they complete unrun).
 *   - for, sections: the construct's descriptor is marked; threads leave it at their
 *     next cancellation point and meet at its end barrier as usual.
 *   - taskgroup: the group (and the groups inside it) discards its tasks that have not
 *     started; running ones end at their next cancellation point.
 *
 * A cancelled region's threads may have arrived at different numbers of barrier
 * episodes, so its join cannot be counted as usual: each worker records the count that
 * completes its join (its slot's join_target, then joined = the region's number), the
 * master waits until every worker has, and raises count to the highest of those
 * targets less one; its next fork's arrival then releases them all and starts the next
 * region's episodes from there (team.c). */

#include "omp_impl.h"
#include "bell.h"

/* gcc's GOMP_CANCEL_* (the ABI) */
enum { CANCEL_PARALLEL = 1, CANCEL_LOOP = 2, CANCEL_FOR = CANCEL_LOOP, CANCEL_SECTIONS = 4,
       CANCEL_TASKGROUP = 8 };

LS_OMP_EXPORT int omp_get_cancellation(void)
{
    return ls_omp_g.cancellation;
}

/* The taskgroup a cancel taskgroup in the current task binds to: the innermost one the
 * program wrote (a work-sharing construct's taskgroup for task reductions is not one). */
static struct ls_omp_taskgroup *binding_group(struct ls_omp_thread *t)
{
    struct ls_omp_task *task = t->c.task;
    struct ls_omp_taskgroup *g = task->is_explicit ? task->group : task->inner;
    while (g && g->workshare && g->prev)
        g = g->prev;
    return g;
}

LS_OMP_EXPORT bool GOMP_cancellation_point(int which)
{
    if (!ls_omp_g.cancellation)
        return false;
    struct ls_omp_thread *t = ls_omp_thr();
    struct ls_omp_team *team = t->c.team;
    if (which & (CANCEL_LOOP | CANCEL_SECTIONS)) {
        struct ls_omp_ws *ws = t->c.ws;
        if (ws && ls_load_acquire(&ws->cancelled))
            return true;
    } else if (which & CANCEL_TASKGROUP) {
        for (struct ls_omp_taskgroup *g = binding_group(t); g; g = g->prev)
            if (ls_load_acquire(&g->cancelled))
                return true;
    }
    return ls_omp_team_cancelled(team);
}

LS_OMP_EXPORT bool GOMP_cancel(int which, bool do_cancel)
{
    if (!ls_omp_g.cancellation)
        return false;
    if (!do_cancel) /* if(false): a cancellation point */
        return GOMP_cancellation_point(which);
    struct ls_omp_thread *t = ls_omp_thr();
    struct ls_omp_team *team = t->c.team;
    if (which & (CANCEL_LOOP | CANCEL_SECTIONS)) {
        if (t->c.ws)
            ls_store_release(&t->c.ws->cancelled, 1u);
    } else if (which & CANCEL_TASKGROUP) {
        struct ls_omp_taskgroup *g = binding_group(t);
        if (g)
            ls_store_release(&g->cancelled, 1u);
    } else if (team) {
        /* seq_cst: waiters in cancellable barriers see it, or the ring wakes them */
        __atomic_store_n(&team->cancelled, 1u, __ATOMIC_SEQ_CST);
        ls_omp_ring(team);
    }
    return true;
}

/* A barrier that a cancelled region's threads leave: true when the region is cancelled
 * (then the thread goes to the region's end). */
LS_OMP_EXPORT bool GOMP_barrier_cancel(void)
{
    struct ls_omp_thread *t = ls_omp_thr();
    struct ls_omp_team *team = t->c.team;
    if (!team || team->n == 1) {
        ls_omp_barrier();
        return ls_omp_team_cancelled(team);
    }
    if (ls_omp_team_cancelled(team))
        return true; /* no arrival: the join sorts the counts out */
    LS_OMP_COUNT(barriers, 1);
    ls_omp_wait(t, team, ls_omp_arrive(t, team),
                ls_omp_g.cancellation ? LS_WAIT_CANCELLABLE : LS_WAIT_BARRIER);
    return ls_omp_team_cancelled(team);
}

LS_OMP_EXPORT bool GOMP_loop_end_cancel(void)
{
    GOMP_loop_end_nowait();
    return GOMP_barrier_cancel();
}

LS_OMP_EXPORT bool GOMP_sections_end_cancel(void)
{
    GOMP_sections_end_nowait();
    return GOMP_barrier_cancel();
}
