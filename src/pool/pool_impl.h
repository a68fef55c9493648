/* The pool's private state, shared by pool.c, parallel_for.c and graph.c. */
#ifndef LOCKSTEP_POOL_IMPL_H
#define LOCKSTEP_POOL_IMPL_H

#include <pthread.h>
#include <sched.h>
#include "lockstep/pool.h"
#include "../barrier/barrier_impl.h"
#include "../internal.h"
#include "../workers/budget.h"

#define LS_PAD(name, used) char name[LOCKSTEP_CACHELINE - (used)]

struct lockstep_pool {
    /* read-mostly configuration */
    int n;
    int fold_shares;
    lockstep_wait_policy_t policy;
    lockstep_barrier_t *bar;   /* region barrier: n participants, fork/join */
    size_t bar_size;
    lockstep_barrier_params_t bar_params; /* to set bar up again in a forked child */
    unsigned fork_gen;         /* ls_fork_gen() the workers were started in */
    lockstep_barrier_t *gbar;  /* graph barrier: sized for n, initialised per run */
    size_t gbar_size;
    unsigned gbar_n;           /* participants gbar is initialised for (0 = none) */
    lockstep_barrier_kind_t graph_kind; /* the params' kind; AUTO resolves per run */
    pthread_t *threads;        /* [1..n-1]; [0] unused */
    int *cpu_of;               /* CPU per participant, -1 = unpinned */
    int *start_on;             /* unpinned workers: the CPU each starts on (the worker
                                  core's ls_start_cpu), -1 = anywhere */
    cpu_set_t start_mask;      /* ... and the CPU set each then gets back */
    struct ls_worker *workers;
    lockstep_wait_t start_wait;

    /* Each group below starts a cache line of its own (posix_memalign'd struct): the
     * pads only fill the line, so a field added above cannot shift a group across
     * two lines. */

    /* the region being forked: written by participant 0 before it releases the
     * episode, read by the workers after their wait (ordered by the barrier) */
    _Alignas(LOCKSTEP_CACHELINE) struct {
        lockstep_region_fn fn;
        void *arg;
        int exit;
    } task;
    LS_PAD(pad1, sizeof(void *) * 3);

    /* who drives the pool: 0 = idle, else a region is in flight (see claim in pool.c) */
    _Alignas(LOCKSTEP_CACHELINE) uint32_t busy;
    uintptr_t owner;           /* pthread_self() of the driver, as an integer */
    lockstep_waitword_t start; /* 1 = workers may begin, 2 = creation failed: exit */
    LS_PAD(pad2, 4 + sizeof(uintptr_t) + sizeof(lockstep_waitword_t) + 4);

    /* set by lockstep_pool_abort or a node returning non-zero */
    _Alignas(LOCKSTEP_CACHELINE) uint32_t abort_req;
    LS_PAD(pad3, 4);

    /* graph: abort votes for node boundary i live in votes[i % 3] */
    _Alignas(LOCKSTEP_CACHELINE) uint32_t votes[3];
    LS_PAD(pad4, 12);

    /* parallel_for DYNAMIC: next chunk index */
    _Alignas(LOCKSTEP_CACHELINE) int64_t next_chunk;
    LS_PAD(pad5, 8);
};

struct ls_worker {
    lockstep_pool_t *pool;
    unsigned tid;
};

/* Fork fn over the pool and join; the caller has already claimed the pool. */
void ls_pool_region(lockstep_pool_t *pool, lockstep_region_fn fn, void *arg);

/* Claim the pool for one region (0, -EDEADLK, -EBUSY, -EINVAL; in a forked child
 * whose workers are not started yet, -EAGAIN when they cannot be) and release it. */
int ls_pool_claim(lockstep_pool_t *pool);
void ls_pool_unclaim(lockstep_pool_t *pool);

#endif
