/* lockstep/pool.h — a thread pool with fork/join regions, parallel-for and a graph runner.
 *
 * The calling thread is participant 0 of every region; the pool owns n_threads - 1
 * workers. A region costs one barrier episode: the gather that joins region k is the
 * same episode whose release forks region k + 1 (see lockstep_barrier_gather).
 *
 * Ordering: everything the caller wrote before lockstep_pool_run happens-before every
 * share of the region; everything any share wrote happens-before run's return.
 *
 * Threading rules: one thread drives a pool at a time. Calling run, parallel_for or
 * graph_run from inside a region of the same pool returns -EDEADLK; from another thread
 * while a region is in flight, -EBUSY. An idle pool's workers park (under the auto and
 * passive wait policies) after the spin budget in wait.h, so it costs no CPU.
 *
 * fork(): a child gets a copy of the pool without its workers (they are threads of the
 * parent). The child's first run, parallel_for or graph_run starts n_threads - 1 new
 * workers for its copy (-EAGAIN if it cannot), so regions behave in the child as in the
 * parent; lockstep_pool_free in the child frees the copy. A pool that another thread
 * was driving at the fork is idle in the child (that thread stayed in the parent).
 * A share that forks: in the child, its region ends when the share returns (a graph
 * run, after that node: -LOCKSTEP_EABORTED), or its thread ends if it was a worker's,
 * instead of waiting for shares that stayed in the parent. */
#ifndef LOCKSTEP_POOL_H
#define LOCKSTEP_POOL_H

#include <stdint.h>
#include "lockstep/wait.h"
#include "lockstep/barrier.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct lockstep_pool lockstep_pool_t;

typedef enum lockstep_placement {
    LOCKSTEP_PLACE_NONE   = 0, /* leave placement to the scheduler: each worker
                                  only starts on a CPU of its own (the allowed CPUs
                                  in turn from the caller's) and then may run on any
                                  CPU the caller may (LOCKSTEP_NO_SPREAD=1: starts
                                  anywhere too) */
    LOCKSTEP_PLACE_CLOSE  = 1, /* thread i on the i-th allowed CPU (wrapping) */
    LOCKSTEP_PLACE_SPREAD = 2, /* threads spaced evenly over the allowed CPUs */
    LOCKSTEP_PLACE_LIST   = 3  /* thread i on cpus[i % n_cpus] */
} lockstep_placement_t;

typedef enum lockstep_schedule {
    LOCKSTEP_SCHEDULE_STATIC  = 0, /* contiguous blocks, one per thread */
    LOCKSTEP_SCHEDULE_DYNAMIC = 1  /* chunks taken from a shared counter */
} lockstep_schedule_t;

typedef struct lockstep_pool_params {
    int n_threads;                      /* participants including the caller; >= 1 */
    lockstep_placement_t placement;
    const int *cpus;                    /* LIST: CPU numbers, each allowed by affinity */
    int n_cpus;
    lockstep_wait_policy_t wait_policy;
    lockstep_barrier_kind_t barrier;    /* AUTO, CENTRAL, COUNTER, FLAT or TREE */
    unsigned fanin;                     /* TREE fan-in, 0 = default */
    int fold_shares;                    /* graph_run: run several shares per thread when
                                           threads outnumber CPUs (default 1) */
} lockstep_pool_params_t;

/* n_threads = lockstep_cpus_available(), no placement, default policy, AUTO barrier,
 * fold_shares = 1. */
lockstep_pool_params_t lockstep_pool_params_default(void);

/* Create a pool. Returns NULL with errno: EINVAL (NULL params, n_threads < 1 or >
 * LOCKSTEP_BARRIER_MAX_PARTICIPANTS, bad placement, LIST with no CPUs or a CPU not in
 * the affinity mask, DISSEM or unknown barrier, bad wait policy), ENOMEM, EAGAIN (a
 * thread could not be started; nothing is leaked). */
lockstep_pool_t *lockstep_pool_create(const lockstep_pool_params_t *params);

/* Stop and join the workers, free everything. NULL is a no-op. Must not be called from
 * inside a region. */
void lockstep_pool_free(lockstep_pool_t *pool);

/* Number of participants (n_threads), or -EINVAL. */
int lockstep_pool_size(const lockstep_pool_t *pool);

/* The barrier algorithm the pool resolved to, or -EINVAL. */
int lockstep_pool_barrier_kind(const lockstep_pool_t *pool);

typedef void (*lockstep_region_fn)(void *arg, int ith, int nth);

/* Run fn(arg, ith, nth) once on every participant (ith in [0, nth), nth = pool size)
 * and return when all have finished. Returns 0, -EINVAL (NULL pool or fn), -EDEADLK
 * (nested), -EBUSY (another thread's region is in flight), -EAGAIN (a forked child's
 * copy could not start its workers). */
int lockstep_pool_run(lockstep_pool_t *pool, lockstep_region_fn fn, void *arg);

typedef void (*lockstep_for_fn)(void *arg, int64_t begin, int64_t end, int ith);

/* Call fn over [0, n) split into [begin, end) ranges so that each index is covered
 * exactly once. STATIC: one contiguous block per participant (chunk ignored).
 * DYNAMIC: chunks of `chunk` indices (0 = automatic) taken from a shared counter.
 * n == 0 returns 0 without calling fn. Returns 0, -EINVAL (NULL, n < 0, chunk < 0,
 * bad schedule), -EDEADLK, -EBUSY, -EAGAIN. */
int lockstep_pool_parallel_for(lockstep_pool_t *pool, int64_t n, int64_t chunk,
                               lockstep_schedule_t schedule, lockstep_for_fn fn, void *arg);

/* A graph node's share: node index, share index ith in [0, nth). Return non-zero to
 * abort the run after this node. */
typedef int (*lockstep_node_fn)(void *arg, int node, int ith, int nth);

/* Run nodes 0 .. n_nodes-1 in order; every share of node i finishes before any share
 * of node i + 1 starts (one barrier episode between nodes). nth = n_shares (0 = pool
 * size). When fold_shares is set and the pool has more threads than CPUs, only
 * min(n_threads, CPUs) threads take part and each runs several shares in turn.
 * The abort flag (a node returning non-zero, or lockstep_pool_abort) is sampled at
 * every node boundary, consistently: all shares stop after the same node.
 * Returns 0, -LOCKSTEP_EABORTED, -EINVAL (NULL, n_nodes < 0, n_shares < 0),
 * -EDEADLK, -EBUSY, -EAGAIN. */
int lockstep_pool_graph_run(lockstep_pool_t *pool, int n_nodes, int n_shares,
                            lockstep_node_fn fn, void *arg);

/* Ask the graph run in flight (if any) to stop at the next node boundary. Safe from any
 * thread. Returns 0 or -EINVAL. */
int lockstep_pool_abort(lockstep_pool_t *pool);

#ifdef __cplusplus
}
#endif

#endif
