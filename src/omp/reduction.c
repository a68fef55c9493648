/* Task reductions: taskgroup task_reduction, in_reduction, reduction(task, ...) on
 * parallel, loops, sections and scope, and taskloop reduction.
 *
 * gcc describes a construct's task reductions in an array it owns (the ABI):
 *   d[0] count of items   d[1] bytes of one thread's copies   d[2] their alignment
 *   d[3] allocator        d[4] next array of the same construct (0: the last)
 *   d[5], d[6] the runtime's   then per item: [address, offset, the runtime's]
 * Registering replaces d[2] with the base of n threads' zeroed copies (thread i's at
 * d[2] + i * d[1]) and d[6] with their end, links the last array of the chain to
 * the reductions already visible (an enclosing taskgroup's), and marks the chain's
 * first array (d[5] = 1) so unregistering frees this construct's copies only. The
 * compiler's code initialises and combines the copies; the runtime only finds, for
 * the thread running a task, its copy of an item (GOMP_task_reduction_remap).
 *
 * Which reductions a task sees: those of its innermost taskgroup (a taskgroup starts
 * with its parent's). The implicit tasks of a parallel region with task reductions
 * start inside a taskgroup that holds them. A work-sharing construct with task
 * reductions opens a taskgroup in every implicit task; the first thread to register
 * allocates the copies, the others share them (the descriptor's task_red). */
#include <stdlib.h>
#include <string.h>

#include "omp_impl.h"

#define RED_BUSY ((uintptr_t *)1) /* task_red while the first thread registers */

/* Register the chain at data for n threads: fresh copies, or orig's (the first
 * thread's chain of the same work-sharing construct). */
static void red_register(uintptr_t *data, uintptr_t *old, const uintptr_t *orig, int n)
{
    for (uintptr_t *d = data;; d = (uintptr_t *)d[4]) {
        if (orig) {
            d[2] = orig[2];
            d[6] = orig[6];
            orig = (const uintptr_t *)orig[4];
        } else {
            size_t bytes = d[1] * (size_t)n, align = d[2] < sizeof(void *) ? sizeof(void *) : d[2];
            void *copies = NULL;
            if (posix_memalign(&copies, align, bytes ? bytes : 1) != 0) {
                ls_omp_warn("out of memory for task reductions' private copies");
                abort();
            }
            memset(copies, 0, bytes);
            d[2] = (uintptr_t)copies;
            d[6] = d[2] + bytes;
        }
        d[5] = d == data;
        for (uintptr_t j = 0; j < d[0]; j++)
            d[7 + 3 * j + 2] = (uintptr_t)d;
        if (d[4] == 0) {
            d[4] = (uintptr_t)old;
            break;
        }
    }
}

/* Free the copies of the registration whose chain starts at data. */
static void red_unregister(uintptr_t *data)
{
    uintptr_t *d = data;
    do {
        free((void *)d[2]);
        d = (uintptr_t *)d[4];
    } while (d && d[5] == 0);
}

static int team_n(const struct ls_omp_thread *t)
{
    return t->c.team ? t->c.team->n : 1;
}

LS_OMP_EXPORT void GOMP_taskgroup_reduction_register(uintptr_t *data)
{
    struct ls_omp_thread *t = ls_omp_thr();
    struct ls_omp_taskgroup *g = t->c.task->inner;
    if (!g) { /* the compiler opens the taskgroup first; be safe if it did not */
        GOMP_taskgroup_start();
        g = t->c.task->inner;
    }
    red_register(data, g->reductions, NULL, team_n(t));
    g->reductions = data;
}

LS_OMP_EXPORT void GOMP_taskgroup_reduction_unregister(uintptr_t *data)
{
    red_unregister(data);
}

/* The item whose original is at addr, in the chain from data; NULL if none. */
static const uintptr_t *find_item(uintptr_t *data, uintptr_t addr, uintptr_t **owner)
{
    for (uintptr_t *d = data; d; d = (uintptr_t *)d[4])
        for (uintptr_t j = 0; j < d[0]; j++)
            if (d[7 + 3 * j] == addr) {
                *owner = d;
                return &d[7 + 3 * j];
            }
    return NULL;
}

/* For i < cnt: ptrs[i], an item's original or some thread's copy of it, becomes this
 * thread's copy; for i < cntorig also ptrs[cnt + i] = the item's original. */
LS_OMP_EXPORT void GOMP_task_reduction_remap(size_t cnt, size_t cntorig, void **ptrs)
{
    struct ls_omp_thread *t = ls_omp_thr();
    uintptr_t id = t->c.team ? (uintptr_t)t->c.tid : 0;
    struct ls_omp_taskgroup *g = t->c.task->inner;
    uintptr_t *data = g ? g->reductions : NULL;
    for (size_t i = 0; i < cnt; i++) {
        uintptr_t p = (uintptr_t)ptrs[i], *d = NULL;
        const uintptr_t *item = find_item(data, p, &d);
        if (item) {
            ptrs[i] = (void *)(d[2] + id * d[1] + item[1]);
            if (i < cntorig)
                ptrs[cnt + i] = (void *)item[0];
            continue;
        }
        for (d = data; d && !(p >= d[2] && p < d[6]); d = (uintptr_t *)d[4])
            ;
        if (!d) {
            ls_omp_warn("no task reduction holds %p (in_reduction outside its taskgroup?)",
                        ptrs[i]);
            abort();
        }
        uintptr_t off = (p - d[2]) % d[1];
        ptrs[i] = (void *)(d[2] + id * d[1] + off);
        if (i < cntorig) {
            ptrs[cnt + i] = NULL;
            for (uintptr_t j = 0; j < d[0]; j++)
                if (d[7 + 3 * j + 1] == off)
                    ptrs[cnt + i] = (void *)d[7 + 3 * j];
        }
    }
}

/* ---- work-sharing constructs and parallel ------------------------------------------- */

void ls_omp_ws_reductions(struct ls_omp_thread *t, uintptr_t *reductions)
{
    GOMP_taskgroup_start();
    struct ls_omp_taskgroup *g = t->c.task->inner;
    g->workshare = true;
    struct ls_omp_ws *ws = t->c.team ? t->c.ws : NULL;
    uintptr_t *expect = NULL;
    if (!ws) {
        red_register(reductions, g->reductions, NULL, 1);
    } else if (__atomic_compare_exchange_n(&ws->task_red, &expect, RED_BUSY, false,
                                           __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
        red_register(reductions, g->reductions, NULL, team_n(t));
        ls_store_release(&ws->task_red, reductions); /* publishes the copies' base */
    } else {
        LS_OMP_SPIN_UNTIL(ls_load_acquire(&ws->task_red) != RED_BUSY);
        red_register(reductions, g->reductions, ls_load_acquire(&ws->task_red), team_n(t));
    }
    g->reductions = reductions;
}

/* The end of a work-sharing construct with task reductions: its taskgroup ends (its
 * tasks finish), thread 0 frees the copies after the compiler's code has combined
 * them, and a barrier keeps the others from leaving before the combination. */
LS_OMP_EXPORT void GOMP_workshare_task_reduction_unregister(bool cancelled)
{
    struct ls_omp_thread *t = ls_omp_thr();
    struct ls_omp_taskgroup *g = t->c.task->inner;
    uintptr_t *data = g ? g->reductions : NULL;
    GOMP_taskgroup_end();
    if (data && (!t->c.team || t->c.tid == 0))
        red_unregister(data);
    if (!cancelled && t->c.team)
        ls_omp_barrier();
}

static void scope_init(struct ls_omp_ws *ws, void *arg, int n)
{
    (void)arg;
    ls_omp_ws_init(ws, LS_SCHED_STATIC, 0, 0, 0, 0, n);
}

/* scope is no work-sharing construct, but with task reductions it shares copies as one:
 * it takes a descriptor only to agree on the first thread. */
LS_OMP_EXPORT void GOMP_scope_start(uintptr_t *reductions)
{
    if (!reductions)
        return;
    struct ls_omp_thread *t = ls_omp_thr();
    if (t->c.team)
        ls_omp_ws_enter(t, scope_init, NULL);
    ls_omp_ws_reductions(t, reductions);
    if (t->c.team)
        ls_omp_ws_leave(t);
}

/* parallel with reduction(task, ...): the copies for the team, and the taskgroup its
 * implicit tasks start in. Returns the team's size, which the combination reads. */
LS_OMP_EXPORT unsigned GOMP_parallel_reductions(void (*fn)(void *), void *data,
                                                unsigned num_threads, unsigned flags)
{
    struct ls_omp_thread *t = ls_omp_thr();
    uintptr_t *rdata = *(uintptr_t **)data;
    struct ls_omp_taskgroup g;
    memset(&g, 0, sizeof g);
    red_register(rdata, NULL, NULL, ls_omp_team_size(t, num_threads));
    g.reductions = rdata;
    t->fork_group = &g;
    ls_omp_fork(fn, data, num_threads, flags, 0, 0, 0, 0, 0);
    unsigned n = (unsigned)t->c.team->n;
    fn(data);
    ls_omp_join();
    return n;
}
