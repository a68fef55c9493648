/* Teams: the pool of workers an initial thread owns, and fork/join.
 *
 * Fork/join, one barrier episode per region (barrier.c counts the arrivals):
 *   - join: each worker arrives at its next episode and waits; the master gathers
 *     (waits until every worker has arrived, no task is pending and no released worker
 *     is still leaving) and returns to the program;
 *   - fork: the master writes the region, then arrives itself, the episode's last
 *     arrival: that releases the workers into the region. A smaller team sends the
 *     workers past n to their idle word (leaving counts them until they have read n);
 *     a larger one wakes idle workers, creating them on first use. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "omp_impl.h"
#include "bell.h"
#include "../workers/workers.h"

struct ls_omp_worker {
    struct ls_omp_slot slot;      /* first: the allocation is aligned for it */
    pthread_t thread;
    lockstep_waitword_t idle;     /* bumped to send the worker into the team */
    uint32_t idle_seen;
    int tid;
    int place;                    /* the place it is bound to, -1: none */
    int start_cpu;                /* unbound: the CPU it began on (-1: anywhere) ... */
    bool keeps_cpu;               /* ... kept there (ls_keeps_cpu), or ... */
    cpu_set_t creator;            /* ... the CPUs it then takes back */
    struct ls_omp_pool *pool;
    /* its implicit task in the team: here, not in the thread's TLS, so that the line
     * the tasks it creates write as they finish neighbours nothing the thread writes */
    _Alignas(LOCKSTEP_CACHELINE) struct ls_omp_task implicit;
};

struct ls_omp_pool {
    struct ls_omp_team team;
    struct ls_omp_slot master_slot;
    struct ls_omp_worker **workers; /* [1, n_workers]; [0] unused */
    int n_workers;
    int cap;
    int cur_n;                      /* team size the in-team workers are at the join of */
    unsigned fork_gen;
    bool busy;                      /* its team runs a region now */
    struct ls_omp_pool *next;       /* the same thread's next pool */
    lockstep_wait_t idle_wait;
    struct ls_cpus *cpus;           /* the master's CPUs when the pool last grew */
    int arranged_cpu;               /* the master's CPU the kept workers sit after; -1 */
    /* read by the workers after every join: away from what the master writes then */
    _Alignas(LOCKSTEP_CACHELINE) int exiting;
};

static pthread_key_t pool_key;
static pthread_once_t pool_once = PTHREAD_ONCE_INIT;

/* ---- the region as every member starts it ------------------------------------------ */

static void enter_team(struct ls_omp_thread *t, struct ls_omp_team *team, int tid,
                       struct ls_omp_task *implicit)
{
    ls_omp_task_clear(implicit, team->implicit_group);
    implicit->finished = 0;
    t->c.team = team;
    t->c.tid = tid;
    t->c.n = team->n;
    t->c.deque = team->pool ? &team->slots[tid]->tasks : NULL;
    t->c.mark = t->c.deque ? t->c.deque->bottom : 0u;
    /* the deque is empty (every task of the last region ran): its count exact again,
     * so no stale one keeps this region's tasks here (task.c, queued_enough) */
    if (t->c.deque && t->c.deque->top_seen != t->c.mark)
        t->c.deque->top_seen = t->c.mark;
    t->c.next_target = team->base + (uint64_t)team->n;
    t->c.ws_count = team->ws_base;
    t->c.ws = NULL;
    t->c.static_k = 0;
    t->c.chunk_held = false;
    t->c.task = implicit;
    t->c.icv = team->icv;
    t->icv_dirty = false;
    t->c.league_num = team->league_num;
    t->c.league_size = team->league_size;
    if (LS_UNLIKELY(ls_omp_g.display_affinity))
        ls_omp_affinity_show(t, team->n);
    if (team->preinit) { /* a combined loop: its construct is set up and entered */
        t->c.ws = &team->ring[team->ws_base % LS_OMP_WS_RING];
        t->c.ws_count = team->ws_base + 1u;
    }
}

/* ---- workers ----------------------------------------------------------------------- */

/* The last arrival at the join's episode: it releases the workers waiting there.
 * Ordering: release — everything the master wrote before (the next region's fields)
 * happens-before the workers' reads after their wait. */
static void master_arrives(struct ls_omp_team *team)
{
    ls_fetch_add(&team->count, 1u, __ATOMIC_SEQ_CST);
    ls_omp_ring(team);
}

/* A worker at the join of a cancelled region, whose members arrived at different
 * numbers of episodes: it waits for the next fork (or the pool's end) itself. */
static void cancelled_join(struct ls_omp_pool *pool, struct ls_omp_team *team, uint32_t seq)
{
    while (ls_load_acquire(&team->region_seq) == seq && !ls_load_acquire(&pool->exiting)) {
        uint32_t seen = ls_load_acquire(&team->bell.value);
        ls_fetch_add(&team->bell.sleepers, 1u, __ATOMIC_SEQ_CST);
        if (ls_load_seqcst(&team->region_seq) == seq && !ls_load_seqcst(&pool->exiting))
            ls_omp_sleep(team, seen);
        ls_fetch_add(&team->bell.sleepers, (uint32_t)-1, __ATOMIC_RELAXED);
    }
}

static void *worker_main(void *arg)
{
    struct ls_omp_worker *w = arg;
    struct ls_omp_pool *pool = w->pool;
    struct ls_omp_thread *t = ls_omp_thr();
    t->place = w->place;
    t->keeps_spares = true;
    if (w->start_cpu >= 0 && !w->keeps_cpu)
        ls_unpin(&w->creator);
    for (;;) {
        w->idle_seen++;
        lockstep_wait_until(&pool->idle_wait, &w->idle, w->idle_seen, 0);
        if (ls_load_acquire(&pool->exiting)) {
            ls_omp_spares_free(t);
            return NULL;
        }
        struct ls_omp_team *team = &pool->team;
        for (;;) {
            enter_team(t, team, w->tid, &w->implicit);
            team->fn(team->data);
            /* the join: arrive, and wait for the master's arrival, which forks the
             * next region (team->n is the master's to rewrite meanwhile: the wait
             * does not read it) */
            uint32_t seq = team->region_seq;
            uint64_t target = ls_omp_arrive(t, team);
            ls_store_relaxed(&w->slot.join_target, target);
            ls_store_release(&w->slot.joined, seq); /* for a cancelled region's master */
            if (LS_UNLIKELY(ls_load_seqcst(&team->cancelled)))
                cancelled_join(pool, team, seq);
            else
                ls_omp_wait(t, team, target, LS_WAIT_JOIN);
            t->c.team = NULL;
            t->c.deque = NULL;
            if (ls_load_acquire(&pool->exiting)) {
                ls_omp_spares_free(t);
                return NULL;
            }
            if (w->tid >= team->n) {
                if (ls_fetch_add(&team->leaving, (uint32_t)-1, __ATOMIC_SEQ_CST) == 1u)
                    ls_omp_ring(team);
                break;
            }
        }
    }
}

static void pool_free(struct ls_omp_pool *pool)
{
    struct ls_omp_team *team = &pool->team;
    ls_store_release(&pool->exiting, 1);
    if (pool->cur_n > 1)
        master_arrives(team);
    for (int i = 1; i <= pool->n_workers; i++) {
        struct ls_omp_worker *w = pool->workers[i];
        if (i >= pool->cur_n)
            lockstep_wait_publish(&pool->idle_wait, &w->idle, w->idle.value + 1u);
    }
    /* every worker ended before any is freed: a waiting worker reads the others'
     * deques */
    for (int i = 1; i <= pool->n_workers; i++)
        pthread_join(pool->workers[i]->thread, NULL);
    ls_omp_returned_free(&pool->master_slot);
    for (int i = 1; i <= pool->n_workers; i++) {
        ls_omp_returned_free(&pool->workers[i]->slot);
        free(pool->workers[i]);
    }
    free(pool->workers);
    free(pool->cpus);
    free(team->slots);
    for (unsigned i = 0; i < LS_OMP_WS_RING; i++) {
        free(team->ring[i].mem);
        free(team->ring[i].doacross);
    }
    free(pool);
}

/* a thread's pools, one per nesting level it has been a master at (the key's destructor) */
static void pools_free(void *arg)
{
    struct ls_omp_pool *pool = arg;
    ls_omp_spares_free(&ls_omp_self); /* the exiting thread's own */
    if (!pool || pool->fork_gen != ls_fork_gen())
        return;
    while (pool) {
        struct ls_omp_pool *next = pool->next;
        pool_free(pool);
        pool = next;
    }
}

static void make_key(void)
{
    pthread_key_create(&pool_key, pools_free);
}

/* The pool this thread forks a region on: its first one not running a region. A
 * master of nested regions (or of a target region's regions inside its own region)
 * has one per level it is a master at, since the outer regions' teams are in use;
 * the same nesting finds the same pool, so a member is the same OS thread again. */
static struct ls_omp_pool *pool_get(struct ls_omp_thread *t)
{
    struct ls_omp_pool *pool = t->pool;
    if (pool && pool->fork_gen != ls_fork_gen())
        pool = t->pool = NULL; /* a forked child's copy: the workers stay in the parent */
    for (; pool; pool = pool->next)
        if (!pool->busy)
            return pool;
    pthread_once(&pool_once, make_key);
    ls_fork_watch();
    if (posix_memalign((void **)&pool, LOCKSTEP_CACHELINE, sizeof *pool) != 0)
        return NULL;
    memset(pool, 0, sizeof *pool);
    pool->team.slots = calloc(LS_OMP_MAX_THREADS, sizeof *pool->team.slots);
    if (!pool->team.slots) {
        free(pool);
        return NULL;
    }
    pool->team.slots[0] = &pool->master_slot;
    pool->team.n_slots = 1;
    pool->team.pool = pool;
    pool->cur_n = 1;
    pool->arranged_cpu = -1;
    pool->fork_gen = ls_fork_gen();
    ls_omp_init_wait(&pool->team.wait);
    lockstep_wait_init(&pool->idle_wait, ls_omp_g.wait_policy, 2, 0);
    /* appended: the pools of the outer levels come first */
    struct ls_omp_pool **tail = &t->pool;
    while (*tail)
        tail = &(*tail)->next;
    *tail = pool;
    pthread_setspecific(pool_key, t->pool);
    t->keeps_spares = true;
    return pool;
}

/* Start worker w through the worker core: bound to its place under OMP_PROC_BIND
 * (env.c makes a place per core when OMP_PLACES is unset), else begun on a CPU of its
 * own after the creator's (cpus), and kept there in a team larger than the CPUs. 0 or
 * -errno. */
static int start_worker(struct ls_omp_worker *w, int want, const struct ls_cpus *cpus)
{
    cpu_set_t set;
    struct ls_spawn s = {worker_main, w, NULL, -1, ls_omp_g.stacksize};
    w->place = -1;
    w->start_cpu = -1;
    if (ls_omp_g.icv.bind != LS_BIND_FALSE && ls_omp_g.places) {
        w->place = ls_omp_place_for(w->tid, want, ls_omp_self.place, ls_omp_g.icv.bind);
        if (ls_omp_place_set(w->place, &set))
            s.bind = &set;
    } else {
        w->creator = cpus->set;
        s.start_cpu = w->start_cpu = ls_start_cpu(cpus, w->tid);
        w->keeps_cpu = ls_keeps_cpu(cpus, want);
    }
    return ls_spawn(&w->thread, &s);
}

/* Make workers up to tid `want` - 1; returns how many participants are available. */
static int pool_grow(struct ls_omp_pool *pool, int want)
{
    if (want - 1 <= pool->n_workers)
        return want;
    if (want > pool->cap) {
        int cap = want < 8 ? 8 : want;
        void *p = realloc(pool->workers, (size_t)(cap + 1) * sizeof *pool->workers);
        if (!p)
            return pool->n_workers + 1;
        pool->workers = p;
        pool->cap = cap;
    }
    struct ls_cpus *cpus = malloc(sizeof *cpus); /* 4 KiB: not on a program's stack */
    if (!cpus)
        return pool->n_workers + 1;
    ls_cpus_read(cpus);
    while (pool->n_workers + 1 < want) {
        int tid = pool->n_workers + 1;
        struct ls_omp_worker *w = NULL;
        if (posix_memalign((void **)&w, LOCKSTEP_CACHELINE, sizeof *w) != 0)
            break;
        memset(w, 0, sizeof *w);
        pool->team.slots[tid] = &w->slot;
        w->tid = tid;
        w->pool = pool;
        int rc = start_worker(w, want, cpus);
        if (rc != 0) {
            free(w);
            ls_omp_warn("could not start thread %d (%s); the team has %d threads", tid,
                        strerror(-rc), tid);
            break;
        }
        pool->workers[tid] = w;
        pool->n_workers = tid;
        ls_store_release(&pool->team.n_slots, (uint32_t)tid + 1u); /* slots[tid] is set */
        LS_OMP_COUNT(workers, 1);
    }
    free(pool->cpus);
    pool->cpus = cpus;
    return pool->n_workers + 1;
}

/* Where the team outnumbers the CPUs (or did: its workers are kept), the unbound
 * workers sit one per CPU in turn after the master's CPU, as they began; when the
 * master has moved, they are arranged after its new CPU, so that its CPU holds no
 * more of the team than the others. The first such team arranges every worker,
 * those begun for smaller teams and given back the creator's CPUs too. */
static void arrange(struct ls_omp_pool *pool, int n)
{
    const struct ls_cpus *c = pool->cpus;
    if (!c || (pool->arranged_cpu < 0 && !ls_keeps_cpu(c, n)))
        return;
    int cpu = sched_getcpu();
    if (cpu < 0 || cpu == pool->arranged_cpu)
        return;
    for (int i = 1; i <= pool->n_workers; i++) {
        struct ls_omp_worker *w = pool->workers[i];
        int to = ls_cpu_after(c, cpu, i);
        if (w->place < 0 && to >= 0)
            ls_pin(w->thread, to); /* refused: it stays where it is */
    }
    pool->arranged_cpu = cpu;
}

/* ---- fork and join ------------------------------------------------------------------ */

int ls_omp_team_size(struct ls_omp_thread *t, unsigned num_threads)
{
    struct ls_omp_team *cur = t->c.team;
    int active = cur ? cur->active_level : 0;
    if (active >= t->c.icv.max_active_levels)
        return 1; /* past max-active-levels a region is inactive */
    long n = num_threads ? (long)num_threads : t->c.icv.nthreads;
    if (t->c.icv.dyn) {
        /* the threads already running count against the CPUs (a nested region's master
         * is one of them; an outer region starts a contention group of its own, beside
         * the live pools) */
        long busy = cur ? ls_budget_running() - 1 : ls_budget_pools();
        if (n > ls_omp_g.n_cpus - busy)
            n = ls_omp_g.n_cpus - busy;
    }
    if (n > LS_OMP_MAX_THREADS)
        n = LS_OMP_MAX_THREADS;
    return n < 1 ? 1 : (int)n;
}

static struct ls_omp_team *serial_team(struct ls_omp_thread *t)
{
    struct ls_omp_team *team = t->serial_free;
    if (team) {
        t->serial_free = team->next_free;
        return team;
    }
    if (posix_memalign((void **)&team, LOCKSTEP_CACHELINE, sizeof *team) != 0) {
        ls_omp_warn("out of memory for a team");
        abort();
    }
    memset(team, 0, sizeof *team);
    ls_omp_init_wait(&team->wait);
    team->n = 1;
    return team;
}

/* A region field its workers read when released: written only when it changes, so
 * that its line stays in their caches from one region to the next (what changes with
 * every region is on the barrier's line, which moves anyway). */
#define SET_FIELD(field, value)                                                          \
    do {                                                                                  \
        __typeof__(field) v_ = (value);                                                   \
        if ((field) != v_)                                                                \
            (field) = v_;                                                                 \
    } while (0)

/* The ICVs of the new region's implicit tasks. */
static void region_icv(struct ls_omp_thread *t, struct ls_omp_team *team)
{
    struct ls_omp_icv icv = t->c.icv;
    int lvl = team->level;
    if (lvl < ls_omp_g.n_nthreads_list)
        icv.nthreads = ls_omp_g.nthreads_list[lvl];
    if (lvl < ls_omp_g.n_bind_list)
        icv.bind = ls_omp_g.bind_list[lvl];
    if (memcmp(&team->icv, &icv, sizeof icv) != 0)
        team->icv = icv;
}

void ls_omp_fork(void (*fn)(void *), void *data, unsigned num_threads, unsigned flags,
                 int preinit_sched, uint64_t start, uint64_t count, uint64_t incr,
                 uint64_t chunk)
{
    struct ls_omp_thread *t = ls_omp_thr();
    int n = ls_omp_team_size(t, num_threads);
    struct ls_omp_pool *pool = NULL;
    struct ls_omp_team *team;
    struct ls_omp_team *outer = t->c.team;
    int level = (outer ? outer->level : 0) + 1;
    int counted = 0; /* threads this region adds to those in regions */
    if (n > 1) {
        n = ls_budget_omp_reserve(n, outer != NULL, t->c.icv.thread_limit);
        counted = outer ? n - 1 : n;
    }
    if (n > 1 && (pool = pool_get(t)) != NULL) {
        int got = pool_grow(pool, n);
        if (got != n) { /* fewer threads could be started */
            ls_budget_omp_add(got - n);
            counted -= n - got;
            n = got;
        }
        if (n == 1)
            pool = NULL;
    }
    if (!pool) {
        if (counted)
            ls_budget_omp_add(-counted);
        n = 1;
    }
    team = pool ? &pool->team : serial_team(t);
    if (ls_load_relaxed(&team->cancelled)) /* read by workers at this region's join only */
        ls_store_relaxed(&team->cancelled, 0u);
    LS_OMP_COUNT(regions, 1);

    SET_FIELD(team->fn, fn);
    SET_FIELD(team->data, data);
    SET_FIELD(team->parent, outer);
    SET_FIELD(team->parent_tid, outer ? t->c.tid : 0);
    SET_FIELD(team->implicit_group, t->fork_group);
    t->fork_group = NULL;
    SET_FIELD(team->league_num, t->c.league_num);
    SET_FIELD(team->league_size, t->c.league_size);
    SET_FIELD(team->level, level);
    SET_FIELD(team->active_level, (outer ? outer->active_level : 0) + (n > 1));
    region_icv(t, team); /* flags' proc_bind is not used: workers are bound when made */
    team->master_saved = t->c;
    uint32_t base = ls_load_relaxed(&team->ws_claim);
    SET_FIELD(team->ws_base, base);
    SET_FIELD(team->preinit, preinit_sched != 0);
    if (preinit_sched) {
        struct ls_omp_ws *ws = &team->ring[base % LS_OMP_WS_RING];
        LS_OMP_SPIN_UNTIL(ls_load_acquire(&ws->remaining) == 0);
        ls_omp_ws_init(ws, preinit_sched, start, count, incr, chunk, n);
        ls_store_relaxed(&team->ws_claim, base + 1u);
        ls_store_relaxed(&team->ws_inited, base + 1u);
    }
    if (pool) {
        arrange(pool, n);
        int old = pool->cur_n;
        if (old > 1) {
            /* the join's episode: the master's arrival completes it (below) */
            ls_store_relaxed(&team->leaving, old > n ? (uint32_t)(old - n) : 0u);
            team->base = ls_load_relaxed(&team->count) + 1u;
        } else {
            team->base = ls_load_relaxed(&team->count);
        }
        SET_FIELD(team->n, n);
        ls_store_relaxed(&team->queued_any, 0u); /* the last region's tasks have all run */
        pool->busy = true;
        /* release: a worker that sees the new number (cancel.c) sees the region's fields */
        ls_store_release(&team->region_seq, team->region_seq + 1u);
        if (old > 1)
            master_arrives(team);
        for (int i = old > 1 ? old : 1; i < n; i++) {
            struct ls_omp_worker *w = pool->workers[i];
            lockstep_wait_publish(&pool->idle_wait, &w->idle, w->idle.value + 1u);
        }
        pool->cur_n = n;
    } else {
        SET_FIELD(team->n, 1);
        team->base = ls_load_relaxed(&team->count);
    }
    enter_team(t, team, 0, &team->master_implicit);
}

/* The master at the join of a cancelled region: every worker at the join, no task
 * pending, then count raised so that the next fork's arrival completes every worker's
 * join episode. */
static void cancelled_gather(struct ls_omp_thread *t, struct ls_omp_team *team)
{
    uint32_t seq = team->region_seq;
    for (;;) {
        bool all = ls_omp_no_pending(team) && ls_load_seqcst(&team->leaving) == 0;
        for (int i = 1; all && i < team->n; i++)
            all = ls_load_acquire(&team->slots[i]->joined) == seq;
        if (all)
            break;
        if (!ls_omp_run_one_task(t))
            ls_yield();
    }
    ls_omp_give_back(t);
    uint64_t high = ls_load_relaxed(&team->count);
    for (int i = 1; i < team->n; i++) {
        uint64_t want = ls_load_relaxed(&team->slots[i]->join_target) - 1u;
        if (want > high)
            high = want;
    }
    /* every worker waits only for count; none arrives again before the next fork */
    ls_store_release(&team->count, high);
}

void ls_omp_join(void)
{
    struct ls_omp_thread *t = ls_omp_thr();
    struct ls_omp_team *team = t->c.team;
    if (!team)
        return;
    if (team->n > 1) {
        /* the gather: every worker has arrived at the episode the master's next
         * arrival (the next fork) completes */
        if (LS_UNLIKELY(ls_load_seqcst(&team->cancelled)))
            cancelled_gather(t, team);
        else
            ls_omp_wait(t, team, t->c.next_target - 1u, LS_WAIT_GATHER);
        ls_budget_omp_add(team->parent ? 1 - team->n : -team->n);
    } else { /* a team of one ran its tasks where created; detached ones may still wait */
        ls_omp_wait_detached(team);
    }
    t->c = team->master_saved;
    if (team->pool)
        team->pool->busy = false;
    else {
        team->next_free = t->serial_free;
        t->serial_free = team;
    }
}

void ls_omp_pause_pool(void)
{
    struct ls_omp_thread *t = ls_omp_thr();
    if (t->c.team || !t->pool)
        return;
    pthread_setspecific(pool_key, NULL);
    pools_free(t->pool);
    t->pool = NULL;
    t->keeps_spares = false; /* no destructor left to free them at its exit */
}

/* ---- the GOMP entry points ------------------------------------------------------------ */


LS_OMP_EXPORT void GOMP_parallel(void (*fn)(void *), void *data, unsigned num_threads,
                                 unsigned flags)
{
    ls_omp_fork(fn, data, num_threads, flags, 0, 0, 0, 0, 0);
    fn(data);
    ls_omp_join();
}

LS_OMP_EXPORT void GOMP_parallel_start(void (*fn)(void *), void *data, unsigned num_threads)
{
    ls_omp_fork(fn, data, num_threads, 0, 0, 0, 0, 0, 0);
}

LS_OMP_EXPORT void GOMP_parallel_end(void)
{
    ls_omp_join();
}

