/* Graph runner: n nodes in order, a barrier episode between consecutive nodes, all
 * inside one region (so a graph of N nodes costs N episodes plus one fork/join).
 *
 * Folding shares. With T threads but only C < T CPUs, a barrier between nodes costs a
 * round of context switches, because every share must get a time slice before anyone
 * may go on. With fold_shares the runner lets only A = min(T, nth, C) threads take part
 * and runs shares ith, ith + A, ith + 2A, ... on participant ith; the others return at
 * once and wait for the join.
 *
 * Consistent abort. An abort request can land while some participants have already
 * passed a node boundary and others have not; letting each look at the flag on its own
 * would make some stop and leave the rest waiting forever. Instead each participant
 * that sees the request before boundary i votes into votes[i % 3]; after the boundary
 * everyone reads the same vote, since the barrier orders all votes before all reads.
 * Participant 0 clears votes[(i + 2) % 3] after boundary i: every read of that slot
 * (boundary i - 1) is done before boundary i completes, and its next votes (boundary
 * i + 2) come after boundary i + 1, which participant 0 has not yet arrived at. */
#include <errno.h>

#include "lockstep/lockstep.h"
#include "pool_impl.h"

struct graph {
    lockstep_pool_t *pool;
    lockstep_node_fn fn;
    void *arg;
    int n_nodes, nth, active;
    int stopped_after; /* node after which the run stopped, -1 if it ran to the end */
};

static void graph_share(void *p, int ith, int nthreads)
{
    (void)nthreads;
    struct graph *g = p;
    lockstep_pool_t *pool = g->pool;
    if (ith >= g->active)
        return;
    for (int node = 0; node < g->n_nodes; node++) {
        for (int share = ith; share < g->nth; share += g->active)
            if (g->fn(g->arg, node, share, g->nth))
                __atomic_store_n(&pool->abort_req, 1u, __ATOMIC_RELAXED);
        if (LS_UNLIKELY(pool->fork_gen != ls_fork_gen())) {
            if (ith == 0) /* a node forked and this is the child, alone: stop here */
                g->stopped_after = node;
            return;
        }
        uint32_t *vote = &pool->votes[node % 3];
        if (__atomic_load_n(&pool->abort_req, __ATOMIC_RELAXED))
            __atomic_store_n(vote, 1u, __ATOMIC_RELAXED); /* ordered by the barrier */
        lockstep_barrier_arrive_and_wait(pool->gbar, (unsigned)ith);
        int stop = (int)__atomic_load_n(vote, __ATOMIC_RELAXED);
        if (ith == 0) {
            uint32_t *stale = &pool->votes[(node + 2) % 3];
            if (__atomic_load_n(stale, __ATOMIC_RELAXED))
                __atomic_store_n(stale, 0u, __ATOMIC_RELAXED);
            if (stop)
                g->stopped_after = node;
        }
        if (stop)
            return;
    }
}

int lockstep_pool_graph_run(lockstep_pool_t *pool, int n_nodes, int n_shares,
                            lockstep_node_fn fn, void *arg)
{
    if (!pool || !fn || n_nodes < 0 || n_shares < 0)
        return -EINVAL;
    int rc = ls_pool_claim(pool);
    if (rc)
        return rc;
    struct graph g = {pool, fn, arg, n_nodes, n_shares ? n_shares : pool->n, 0, -1};
    g.active = pool->n < g.nth ? pool->n : g.nth;
    int cpus = lockstep_cpus_available();
    if (pool->fold_shares && g.active > cpus)
        g.active = cpus;
    if (pool->gbar_n != (unsigned)g.active) {
        lockstep_barrier_params_t bp = lockstep_barrier_params_default();
        /* between nodes nobody gathers, so AUTO may pick dissemination here even
         * though the pool's own region barrier needs a primary */
        bp.kind = pool->graph_kind;
        bp.fanin = pool->bar->cfg.fanin;
        bp.wait_policy = pool->policy;
        rc = ls_barrier_init_among(pool->gbar, pool->gbar_size, (unsigned)g.active, &bp,
                                   (unsigned)(ls_budget_running() - pool->n));
        if (rc) {
            ls_pool_unclaim(pool);
            return rc;
        }
        pool->gbar_n = (unsigned)g.active;
    }
    __atomic_store_n(&pool->abort_req, 0u, __ATOMIC_RELAXED);
    for (int i = 0; i < 3; i++)
        pool->votes[i] = 0;
    if (n_nodes > 0)
        ls_pool_region(pool, graph_share, &g);
    ls_pool_unclaim(pool);
    return g.stopped_after >= 0 ? -LOCKSTEP_EABORTED : 0;
}
