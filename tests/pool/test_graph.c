/* Graph runner: nodes run in order (every share of node i before any share of node
 * i + 1), each (node, share) exactly once, folding uses no more threads than CPUs,
 * and an abort (from a node or from another thread) stops every share after the same
 * node. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>

#include "lockstep/lockstep.h"
#include "../common/check.h"

#define NODES 400
#define MAXSHARES 64

struct g {
    int nth;
    int abort_node;               /* node whose last share returns 1, -1 = none */
    uint32_t done[NODES];         /* finished shares per node */
    uint32_t seen[NODES][MAXSHARES];
    uintptr_t who[MAXSHARES];     /* a thread id per share slot (fold check) */
    uint32_t ran;                 /* total share calls */
    int bad;
};

static void flag_bad(struct g *g, const char *why, int node, int ith)
{
    if (!__atomic_exchange_n(&g->bad, 1, __ATOMIC_RELAXED))
        fprintf(stderr, "node %d share %d: %s\n", node, ith, why);
}

static int node_fn(void *p, int node, int ith, int nth)
{
    struct g *g = p;
    if (nth != g->nth || ith < 0 || ith >= nth || node < 0 || node >= NODES) {
        flag_bad(g, "bad arguments", node, ith);
        return 0;
    }
    if (node > 0 && __atomic_load_n(&g->done[node - 1], __ATOMIC_RELAXED) != (uint32_t)nth)
        flag_bad(g, "started before the previous node finished", node, ith);
    if (node + 1 < NODES && __atomic_load_n(&g->done[node + 1], __ATOMIC_RELAXED) != 0)
        flag_bad(g, "the next node already ran", node, ith);
    __atomic_fetch_add(&g->seen[node][ith], 1u, __ATOMIC_RELAXED);
    uintptr_t me = (uintptr_t)pthread_self();
    __atomic_store_n(&g->who[(size_t)ith % MAXSHARES], me, __ATOMIC_RELAXED);
    __atomic_fetch_add(&g->ran, 1u, __ATOMIC_RELAXED);
    __atomic_fetch_add(&g->done[node], 1u, __ATOMIC_RELAXED);
    return node == g->abort_node && ith == nth - 1;
}

static struct g G;

static void reset(int nth, int abort_node)
{
    memset(&G, 0, sizeof G);
    G.nth = nth;
    G.abort_node = abort_node;
}

struct aborter { lockstep_pool_t *pool; };
static void *abort_thread(void *p)
{
    struct aborter *a = p;
    while (__atomic_load_n(&G.ran, __ATOMIC_RELAXED) < 50u * (uint32_t)G.nth)
        sched_yield();
    CHECK_EQ(lockstep_pool_abort(a->pool), 0);
    return NULL;
}

/* every node up to and including `last` ran completely, every later node not at all */
static void check_prefix(int last)
{
    for (int i = 0; i < NODES; i++) {
        uint32_t want = i <= last ? (uint32_t)G.nth : 0u;
        if (G.done[i] != want) {
            fprintf(stderr, "nth=%d node %d: %u shares ran, want %u (last=%d)\n", G.nth, i,
                    G.done[i], want, last);
            exit(1);
        }
        for (int s = 0; s < G.nth; s++)
            CHECK_EQ(G.seen[i][s], i <= last ? 1 : 0);
    }
}

int main(void)
{
    watchdog(240);
    static const int threads[] = {1, 2, 3, 4, 5, 8, 16, 17};
    static const int shares[] = {0, 1, 3, 16, 40};
    int cpus = lockstep_cpus_available();
    for (unsigned ti = 0; ti < sizeof threads / sizeof threads[0]; ti++)
        for (int fold = 0; fold < 2; fold++) {
            lockstep_pool_params_t p = lockstep_pool_params_default();
            p.n_threads = threads[ti];
            p.fold_shares = fold;
            lockstep_pool_t *pool = lockstep_pool_create(&p);
            CHECK(pool != NULL);
            for (unsigned si = 0; si < sizeof shares / sizeof shares[0]; si++) {
                int nth = shares[si] ? shares[si] : threads[ti];
                reset(nth, -1);
                CHECK_EQ(lockstep_pool_graph_run(pool, NODES, shares[si], node_fn, &G), 0);
                CHECK_EQ(G.bad, 0);
                check_prefix(NODES - 1);
                if (fold && nth <= MAXSHARES) {
                    /* distinct threads that ran shares: at most min(threads, nth, CPUs) */
                    int distinct = 0;
                    for (int s = 0; s < nth && s < MAXSHARES; s++) {
                        int dup = 0;
                        for (int q = 0; q < s; q++)
                            dup |= G.who[q] == G.who[s];
                        distinct += !dup;
                    }
                    int limit = threads[ti] < nth ? threads[ti] : nth;
                    if (limit > cpus)
                        limit = cpus;
                    CHECK(distinct <= limit);
                }

                /* abort from a node: all shares stop after that node */
                reset(nth, 37);
                CHECK_EQ(lockstep_pool_graph_run(pool, NODES, shares[si], node_fn, &G), -LOCKSTEP_EABORTED);
                CHECK_EQ(G.bad, 0);
                check_prefix(37);
            }
            /* abort from another thread, mid-run */
            reset(threads[ti], -1);
            struct aborter a = {pool};
            pthread_t t;
            CHECK_EQ(pthread_create(&t, NULL, abort_thread, &a), 0);
            int rc = lockstep_pool_graph_run(pool, NODES, 0, node_fn, &G);
            pthread_join(t, NULL);
            CHECK_EQ(G.bad, 0);
            int last = -1;
            while (last + 1 < NODES && G.done[last + 1] != 0)
                last++;
            CHECK(last >= 49);
            if (rc == 0)
                CHECK_EQ(last, NODES - 1); /* the request came after the last boundary */
            else
                CHECK_EQ(rc, -LOCKSTEP_EABORTED);
            check_prefix(last);

            /* the next run starts clean: an old request does not leak into it */
            reset(threads[ti], -1);
            CHECK_EQ(lockstep_pool_graph_run(pool, NODES, 0, node_fn, &G), 0);
            check_prefix(NODES - 1);

            /* bad arguments, and the empty graph */
            CHECK_EQ(lockstep_pool_graph_run(pool, NODES, 0, NULL, &G), -EINVAL);
            CHECK_EQ(lockstep_pool_graph_run(pool, -1, 0, node_fn, &G), -EINVAL);
            CHECK_EQ(lockstep_pool_graph_run(pool, NODES, -2, node_fn, &G), -EINVAL);
            CHECK_EQ(lockstep_pool_graph_run(NULL, NODES, 0, node_fn, &G), -EINVAL);
            reset(threads[ti], -1);
            CHECK_EQ(lockstep_pool_graph_run(pool, 0, 0, node_fn, &G), 0);
            CHECK_EQ(G.ran, 0);
            lockstep_pool_free(pool);
        }
    return 0;
}
