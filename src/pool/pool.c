/* Thread pool lifecycle and fork/join regions.
 *
 * Every region is one episode of the region barrier:
 *   worker i:  loop { arrive(i); wait(i); if exit: stop; task.fn(arg, i, n) }
 *   caller:    [workers have all arrived]   <- gather, done at the end of the last region
 *              task = {fn, arg}
 *              arrive_and_wait(0)           <- arrives last: releases the workers (fork)
 *              fn(arg, 0, n)
 *              gather()                     <- every worker arrived again (join)
 * The workers' arrival after a region is at once the join of that region and their
 * half of the next region's fork, so a region costs one episode, not two.
 *
 * Start-up: workers first wait on `start` so that a failed pthread_create can still
 * send the ones already running home (start = 2) before any of them enters the
 * barrier, which needs all n participants.
 *
 * fork(): the child has only the thread that forked; the workers stay in the parent.
 * The child's first claim of an idle pool sets the barrier up afresh and starts new
 * workers (respawn), so the child's regions run on n threads as the parent's do,
 * instead of waiting forever for workers that are not there. A fork made inside a
 * region leaves the child's copy of that region without its join (participant 0; a
 * graph run stops after the node) or ends the child's thread (a worker: it would wait
 * for the others forever). A pool that another thread was driving at the fork is idle in
 * the child (that thread stayed in the parent): its first claim there takes it over. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "pool_impl.h"
#include "../workers/workers.h"

lockstep_pool_params_t lockstep_pool_params_default(void)
{
    lockstep_pool_params_t p;
    memset(&p, 0, sizeof p);
    p.n_threads = lockstep_cpus_available();
    p.placement = LOCKSTEP_PLACE_NONE;
    p.wait_policy = LOCKSTEP_WAIT_DEFAULT;
    p.barrier = LOCKSTEP_BARRIER_AUTO;
    p.fold_shares = 1;
    return p;
}

static uintptr_t self_id(void)
{
    pthread_t t = pthread_self();
    uintptr_t id = 0;
    memcpy(&id, &t, sizeof t < sizeof id ? sizeof t : sizeof id);
    return id;
}

static void *worker_main(void *p)
{
    struct ls_worker *w = p;
    lockstep_pool_t *pool = w->pool;
    unsigned tid = w->tid;
    lockstep_wait_until(&pool->start_wait, &pool->start, 1, 0);
    if (ls_load_acquire(&pool->start.value) != 1)
        return NULL;
    /* Started on a CPU of its own (start_cpus), and woken there from the start wait
     * (it parks: unbound, the wake-up often brought it to its creator's CPU): now free
     * to go anywhere. */
    if (pool->start_on[tid] >= 0)
        ls_unpin(&pool->start_mask);
    for (;;) {
        lockstep_barrier_arrive(pool->bar, tid);
        lockstep_barrier_wait(pool->bar, tid);
        if (pool->task.exit)
            break;
        pool->task.fn(pool->task.arg, (int)tid, pool->n);
        if (LS_UNLIKELY(pool->fork_gen != ls_fork_gen()))
            break; /* fn forked and this is the child: no one else to wait for */
    }
    return NULL;
}

/* CPU for each participant under the placement; -EINVAL for a CPU outside the mask. */
static int place(lockstep_pool_t *pool, const lockstep_pool_params_t *p)
{
    for (int i = 0; i < pool->n; i++)
        pool->cpu_of[i] = -1;
    if (p->placement == LOCKSTEP_PLACE_NONE)
        return 0;
    cpu_set_t allowed;
    int list[CPU_SETSIZE], m = ls_allowed_cpus(&allowed, list, CPU_SETSIZE);
    if (m < 0)
        return m;
    if (m == 0)
        return -EINVAL;
    for (int i = 0; i < pool->n; i++) {
        switch (p->placement) {
        case LOCKSTEP_PLACE_CLOSE:
            pool->cpu_of[i] = list[i % m];
            break;
        case LOCKSTEP_PLACE_SPREAD:
            pool->cpu_of[i] = pool->n <= m ? list[(int)((long)i * m / pool->n)] : list[i % m];
            break;
        case LOCKSTEP_PLACE_LIST: {
            int c = p->cpus[i % p->n_cpus];
            if (c < 0 || c >= CPU_SETSIZE || !CPU_ISSET(c, &allowed))
                return -EINVAL;
            pool->cpu_of[i] = c;
            break;
        }
        default:
            return -EINVAL;
        }
    }
    return 0;
}

/* Start workers 1 .. n-1, each waiting on `start`: pinned ones on their CPU, the
 * others each begun on a CPU of its own (the worker core's ls_start_cpu) and given
 * back the caller's CPUs once woken there (worker_main). 0, or -EAGAIN with the ones
 * already started sent home and joined. */
static int start_workers(lockstep_pool_t *pool)
{
    struct ls_cpus *cpus = malloc(sizeof *cpus); /* 4 KiB: not on a caller's stack */
    if (!cpus)
        return -EAGAIN;
    ls_cpus_read(cpus);
    pool->start_mask = cpus->set;
    int started = 1;
    for (; started < pool->n; started++) {
        cpu_set_t one;
        struct ls_spawn s = {worker_main, &pool->workers[started], NULL, -1, 0};
        pool->start_on[started] = -1;
        if (pool->cpu_of[started] >= 0) {
            CPU_ZERO(&one);
            CPU_SET(pool->cpu_of[started], &one);
            s.bind = &one;
        } else {
            s.start_cpu = pool->start_on[started] = ls_start_cpu(cpus, started);
        }
        pool->workers[started].pool = pool;
        pool->workers[started].tid = (unsigned)started;
        if (ls_spawn(&pool->threads[started], &s) != 0)
            break;
    }
    free(cpus);
    if (started == pool->n)
        return 0;
    lockstep_wait_publish(&pool->start_wait, &pool->start, 2);
    for (int i = 1; i < started; i++)
        pthread_join(pool->threads[i], NULL);
    return -EAGAIN;
}

/* Let the started workers in, and establish the between-regions invariant: every
 * worker has arrived. */
static void release_workers(lockstep_pool_t *pool)
{
    lockstep_wait_publish(&pool->start_wait, &pool->start, 1);
    lockstep_barrier_gather(pool->bar, 0);
}

static void destroy(lockstep_pool_t *pool)
{
    free(pool->bar);
    free(pool->gbar);
    free(pool->threads);
    free(pool->cpu_of);
    free(pool->start_on);
    free(pool->workers);
    free(pool);
}

lockstep_pool_t *lockstep_pool_create(const lockstep_pool_params_t *p)
{
    int err = EINVAL;
    if (!p || p->n_threads < 1 || (unsigned)p->n_threads > LOCKSTEP_BARRIER_MAX_PARTICIPANTS)
        goto fail;
    if ((unsigned)p->placement > LOCKSTEP_PLACE_LIST ||
        (p->placement == LOCKSTEP_PLACE_LIST && (!p->cpus || p->n_cpus < 1)))
        goto fail;
    if (p->barrier == LOCKSTEP_BARRIER_DISSEM || (unsigned)p->barrier > LOCKSTEP_BARRIER_COUNTER)
        goto fail; /* dissemination has no primary, so it cannot gather for a join */

    lockstep_pool_t *pool;
    if (ls_fork_watch() != 0 || posix_memalign((void **)&pool, LOCKSTEP_CACHELINE, sizeof *pool) != 0) {
        err = ENOMEM;
        goto fail;
    }
    memset(pool, 0, sizeof *pool);
    pool->fork_gen = ls_fork_gen();
    pool->n = p->n_threads;
    pool->fold_shares = p->fold_shares;
    pool->policy = p->wait_policy;
    pool->graph_kind = p->barrier;

    lockstep_barrier_params_t bp = lockstep_barrier_params_default();
    bp.kind = p->barrier;
    bp.fanin = p->fanin;
    bp.wait_policy = p->wait_policy;
    bp.need_gather = 1;
    size_t bsize = lockstep_barrier_size(bp.kind, (unsigned)pool->n, bp.fanin);
    if (bsize == 0) {
        destroy(pool);
        goto fail;
    }
    size_t dsize = lockstep_barrier_size(LOCKSTEP_BARRIER_DISSEM, (unsigned)pool->n, 0);
    pool->gbar_size = dsize > bsize ? dsize : bsize;
    if (posix_memalign((void **)&pool->bar, LOCKSTEP_CACHELINE, bsize) != 0 ||
        posix_memalign((void **)&pool->gbar, LOCKSTEP_CACHELINE, pool->gbar_size) != 0) {
        destroy(pool);
        err = ENOMEM;
        goto fail;
    }
    pool->bar_size = bsize;
    pool->bar_params = bp;
    /* its waits count the threads already running in the process (other pools, OpenMP
     * teams): together they may outnumber the CPUs */
    int rc = ls_barrier_init_among(pool->bar, bsize, (unsigned)pool->n, &bp,
                                   (unsigned)ls_budget_running());
    if (rc == 0)
        rc = lockstep_wait_init(&pool->start_wait, LOCKSTEP_WAIT_PASSIVE, 1, 0);
    if (rc) {
        destroy(pool);
        err = -rc;
        goto fail;
    }
    pool->threads = calloc((size_t)pool->n, sizeof *pool->threads);
    pool->cpu_of = calloc((size_t)pool->n, sizeof *pool->cpu_of);
    pool->start_on = calloc((size_t)pool->n, sizeof *pool->start_on);
    pool->workers = calloc((size_t)pool->n, sizeof *pool->workers);
    if (!pool->threads || !pool->cpu_of || !pool->start_on || !pool->workers) {
        destroy(pool);
        err = ENOMEM;
        goto fail;
    }
    rc = place(pool, p);
    if (rc) {
        destroy(pool);
        err = -rc;
        goto fail;
    }

    if (start_workers(pool) != 0) {
        destroy(pool);
        err = EAGAIN;
        goto fail;
    }
    if (pool->cpu_of[0] >= 0) {
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(pool->cpu_of[0], &one);
        pthread_setaffinity_np(pthread_self(), sizeof one, &one);
    }
    release_workers(pool);
    ls_budget_pool_add(pool->n);
    return pool;

fail:
    errno = err;
    return NULL;
}

/* busy: 0 when idle, else 2 * ls_fork_gen() + 1 of the process whose thread claimed
 * it. In a forked child a claim made in an ancestor is stale (unless the thread that
 * forked made it: it is inside a region), since its driver did not come along: the
 * first claim takes it over, one thread of the child at most (compare and swap). */
static uint32_t claimed_here(void)
{
    return 2u * ls_fork_gen() + 1u;
}

static int claim(lockstep_pool_t *pool)
{
    uint32_t idle = 0, here = claimed_here();
    if (__atomic_compare_exchange_n(&pool->busy, &idle, here, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
        __atomic_store_n(&pool->owner, self_id(), __ATOMIC_RELAXED);
        return 0;
    }
    /* in flight: are we inside it (nested) or another thread (concurrent)? */
    uintptr_t me = self_id();
    if (__atomic_load_n(&pool->owner, __ATOMIC_RELAXED) == me)
        return -EDEADLK;
    for (int i = 1; i < pool->n; i++)
        if (pthread_equal(pool->threads[i], pthread_self()))
            return -EDEADLK;
    uint32_t seen = idle; /* what the compare and swap found */
    if (seen != here && seen != 0 &&
        __atomic_compare_exchange_n(&pool->busy, &seen, here, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
        __atomic_store_n(&pool->owner, me, __ATOMIC_RELAXED);
        return 0; /* a stale claim from before the fork: the pool is ours (respawn follows) */
    }
    return -EBUSY;
}

void ls_pool_unclaim(lockstep_pool_t *pool)
{
    __atomic_store_n(&pool->owner, (uintptr_t)0, __ATOMIC_RELAXED);
    __atomic_store_n(&pool->busy, 0u, __ATOMIC_RELEASE);
}

/* In a forked child, claimed: the barrier as it was made, its state the parent's at
 * the fork; new workers for the ones left in the parent. 0 or -EAGAIN (the pool stays
 * as it was, to be tried again at the next claim). */
static int respawn(lockstep_pool_t *pool)
{
    int rc = ls_barrier_init_among(pool->bar, pool->bar_size, (unsigned)pool->n, &pool->bar_params,
                                   (unsigned)(ls_budget_running() - pool->n));
    if (rc)
        return rc;
    pool->gbar_n = 0; /* the graph barrier too, at the next run */
    pool->task.exit = 0;
    pool->start.value = 0;
    pool->start.sleepers = 0;
    if ((rc = start_workers(pool)) != 0)
        return rc;
    pool->fork_gen = ls_fork_gen(); /* the workers compare it only once released */
    release_workers(pool);
    return 0;
}

int ls_pool_claim(lockstep_pool_t *pool)
{
    int rc = claim(pool);
    if (rc == 0 && LS_UNLIKELY(pool->fork_gen != ls_fork_gen()) && (rc = respawn(pool)) != 0)
        ls_pool_unclaim(pool);
    return rc;
}

void ls_pool_region(lockstep_pool_t *pool, lockstep_region_fn fn, void *arg)
{
    pool->task.fn = fn;
    pool->task.arg = arg;
    lockstep_barrier_arrive_and_wait(pool->bar, 0); /* fork: we arrive last */
    fn(arg, 0, pool->n);
    if (LS_UNLIKELY(pool->fork_gen != ls_fork_gen()))
        return; /* fn forked and this is the child: its workers are the parent's */
    lockstep_barrier_gather(pool->bar, 0);          /* join */
}

int lockstep_pool_run(lockstep_pool_t *pool, lockstep_region_fn fn, void *arg)
{
    if (!pool || !fn)
        return -EINVAL;
    int rc = ls_pool_claim(pool);
    if (rc)
        return rc;
    ls_pool_region(pool, fn, arg);
    ls_pool_unclaim(pool);
    return 0;
}

void lockstep_pool_free(lockstep_pool_t *pool)
{
    if (!pool || claim(pool) != 0)
        return; /* NULL, or called inside a region: freeing now would deadlock */
    if (pool->fork_gen == ls_fork_gen()) { /* else a forked child's: no workers here */
        pool->task.exit = 1;
        lockstep_barrier_arrive_and_wait(pool->bar, 0);
        for (int i = 1; i < pool->n; i++)
            pthread_join(pool->threads[i], NULL);
    }
    ls_budget_pool_add(-pool->n);
    destroy(pool);
}

int lockstep_pool_size(const lockstep_pool_t *pool)
{
    return pool ? pool->n : -EINVAL;
}

int lockstep_pool_barrier_kind(const lockstep_pool_t *pool)
{
    return pool ? lockstep_barrier_kind(pool->bar) : -EINVAL;
}

int lockstep_pool_abort(lockstep_pool_t *pool)
{
    if (!pool)
        return -EINVAL;
    __atomic_store_n(&pool->abort_req, 1u, __ATOMIC_RELAXED);
    return 0;
}
