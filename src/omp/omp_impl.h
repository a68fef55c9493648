/* The OpenMP runtime's private state, shared by the files of src/omp.
 *
 * Threads and teams:
 *   - Each application thread that opens a region outside any other is an initial
 *     thread; it owns a pool (its workers and one team object reused region after
 *     region), so worker i is the same OS thread in every region of that thread.
 *   - A region of one thread (nested regions, num_threads(1)) runs on a serial team
 *     from the thread's own cache: nothing is shared, every construct is trivial.
 *   - A thread's context (team, number, work-share count, current task, ICVs) lives in
 *     its thread-local ls_omp_thread; a nested region saves it and restores it.
 *
 * The team barrier (barrier.c) counts arrivals in one 64-bit word that is never
 * reset: episode k of a region is complete when it reaches base + k * n. Waiters
 * that park sleep on a doorbell in the same line, rung when an episode completes, a
 * task is queued or the last pending task finishes, so a waiting thread also runs the
 * team's tasks. Fork/join costs one episode: workers arrive at the end of a region
 * and wait; the master gathers them (the join), and its own arrival at that episode,
 * when it forks the next region, releases them. */
#ifndef LOCKSTEP_OMP_IMPL_H
#define LOCKSTEP_OMP_IMPL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lockstep/wait.h"
#include "../internal.h"
#include "../wait/kernel.h"
#include "../wait/tuning.h"
#include "../workers/budget.h"
#include "tuning.h"

#define LS_OMP_EXPORT __attribute__((visibility("default")))
#define LS_OMP_MAX_THREADS 4096 /* a team's size is capped here (OMP_THREAD_LIMIT lower) */
#define LS_OMP_MAX_LEVELS 255   /* active nesting levels supported, as libgomp's */
#define LS_PADTO(used) char LS_CAT(pad_, __LINE__)[LOCKSTEP_CACHELINE - (used)]
#define LS_CAT2(a, b) a##b
#define LS_CAT(a, b) LS_CAT2(a, b)

/* Schedule kinds as omp.h numbers them (omp_sched_t); 0x80000000 marks monotonic. */
enum { LS_SCHED_STATIC = 1, LS_SCHED_DYNAMIC = 2, LS_SCHED_GUIDED = 3, LS_SCHED_AUTO = 4 };
#define LS_SCHED_MONOTONIC 0x80000000u
#define LS_WS_ORDERED 0x100 /* or'ed into a descriptor's schedule: an ordered loop */

/* proc_bind values as omp.h numbers them (omp_proc_bind_t) */
enum { LS_BIND_FALSE = 0, LS_BIND_TRUE = 1, LS_BIND_PRIMARY = 2, LS_BIND_CLOSE = 3,
       LS_BIND_SPREAD = 4 };

/* Internal control variables of one data environment. */
struct ls_omp_icv {
    int nthreads;          /* nthreads-var for the next region */
    int run_sched;         /* run-sched-var kind (LS_SCHED_*, monotonic bit allowed) */
    long run_chunk;        /* its chunk, 0 = default */
    int dyn;               /* dyn-var */
    int max_active_levels; /* max-active-levels-var */
    int bind;              /* bind-var for the next region */
    int default_device;
    int thread_limit;      /* thread-limit-var: threads of this contention group */
    uintptr_t def_allocator; /* def-allocator-var (omp_default_mem_alloc is 1) */
};

/* Process-wide settings read once at load (env.c). */
struct ls_omp_global {
    struct ls_omp_icv icv;       /* initial ICVs of every initial thread */
    int *nthreads_list;          /* OMP_NUM_THREADS per nesting level */
    int n_nthreads_list;
    int *bind_list;              /* OMP_PROC_BIND per nesting level */
    int n_bind_list;
    int thread_limit;            /* OMP_THREAD_LIMIT */
    int nteams;                  /* nteams-var (OMP_NUM_TEAMS), 0 = not set */
    int teams_thread_limit;      /* teams-thread-limit-var, 0 = not set */
    int n_cpus;                  /* CPUs the process may use */
    int places;                  /* OMP_PLACES given: number of places (one per CPU) */
    size_t stacksize;            /* worker stacks, 0 = default */
    lockstep_wait_policy_t wait_policy;
    long spincount;              /* GOMP_SPINCOUNT, -1 = not set */
    lockstep_wait_t lock_wait;   /* a contended lock's (sync.c): the policy's budgets */
    int stats;                   /* LOCKSTEP_OMP_STATS */
    int display_affinity;        /* OMP_DISPLAY_AFFINITY */
    int cancellation;            /* cancel-var (OMP_CANCELLATION) */
    int max_task_priority;
};
extern struct ls_omp_global ls_omp_g;

/* What LOCKSTEP_OMP_STATS counts. */
struct ls_omp_stats {
    uint64_t regions, barriers, tasks, workers;
};
extern struct ls_omp_stats ls_omp_stats;
#define LS_OMP_COUNT(field, k)                                                          \
    do {                                                                                \
        if (LS_UNLIKELY(ls_omp_g.stats))                                                \
            __atomic_fetch_add(&ls_omp_stats.field, (k), __ATOMIC_RELAXED);             \
    } while (0)

/* ---- tasks ------------------------------------------------------------------------ */

struct ls_omp_taskgroup {
    struct ls_omp_taskgroup *prev;   /* enclosing group of the same task */
    uint32_t count;                  /* queued or running tasks counted in this group */
    uint32_t cancelled;              /* cancel taskgroup: its tasks not started are discarded */
    bool workshare;                  /* opened by a work-sharing construct's reductions */
    uintptr_t *reductions;           /* task reductions its tasks see (reduction.c) */
};

/* One depend clause entry: an address, and whether the task writes it. */
struct ls_omp_dep {
    uintptr_t addr;
    bool out;
};

/* A task's place in its siblings' dependences (depend.c), under the parent's dep_lock;
 * only tasks with depend clauses (and a construct's waiter) have one. */
struct ls_omp_depnode {
    struct ls_omp_dep *deps;         /* its depend clauses */
    uint32_t ndeps;
    uint32_t npred;                  /* predecessors still to complete */
    struct ls_omp_task *next;        /* the parent's list of live children with deps */
    struct ls_omp_task **succ;       /* tasks waiting for this one */
    uint32_t nsucc, succ_cap;
    bool waiter;                     /* a construct's stack waiter, never queued */
};

struct ls_omp_task {
    /* its runner's and creator's fields, apart from finished */
    union {
        struct {
            uint32_t spawned;            /* children it created; only its runner writes it */
            uint32_t refs;               /* heap tasks: 1 for running + holds; see task_release */
            void (*fn)(void *);
            void *data;
            struct ls_omp_task *parent;  /* lives until this task has finished */
            struct ls_omp_taskgroup *group;  /* the group this task is counted in, or NULL */
            struct ls_omp_taskgroup *inner;  /* innermost group open in this task's body */
            struct ls_omp_task *next;    /* the team's inbox link */
            struct ls_omp_icv *icv;      /* heap tasks: its creator's ICVs, for its run */
            struct ls_omp_team *team;    /* the team it was created in (NULL: none) */
            struct ls_omp_depnode *dn;   /* with depend clauses: its dependences, or NULL */
            struct ls_omp_task *dep_list;    /* as a parent: live children with dependences */
            uint32_t dep_lock;           /* as a parent: guards dep_list and its children's dn */
            uint32_t detach;             /* detach clause: its body and its event still to end */
            bool counted;                /* pending in its team until it completes */
            bool final;
            bool is_explicit;            /* created by a task construct (not implicit) */
            bool heap;                   /* allocated by task.c: freed when done with */
            bool parent_heap;            /* its parent is, and so waits for it to finish */
            bool block;                  /* in an LS_OMP_TASK_BLOCK block: a thread may keep it */
            bool included;               /* run by its creator at once: its parent and
                                            taskgroup do not count it (task.c) */
            struct ls_omp_slot *home;    /* a block: its creator's slot, where it goes back */
        };
        char fields_line[LOCKSTEP_CACHELINE];
    };
    /* children that finished (less spawned once it has ended: see task_release): the
     * one field other threads write, on another line than the fields, which its
     * creator and its runner write; a leaf never touches it */
    uint32_t finished;
};

_Static_assert(offsetof(struct ls_omp_task, home) + sizeof(void *) <= LOCKSTEP_CACHELINE,
               "a task's fields fit the line before finished");

/* A task with every field zero but inner, and finished as it was (0 in a new task and
 * in a recycled one: see task_release): field by field, as a memset of the struct
 * compiles to `rep stos`, whose start costs tens of cycles, once per region. */
static inline void ls_omp_task_clear(struct ls_omp_task *t, struct ls_omp_taskgroup *inner)
{
    t->fn = NULL;
    t->data = NULL;
    t->parent = NULL;
    t->group = NULL;
    t->inner = inner;
    t->next = NULL;
    t->spawned = 0;
    t->refs = 0;
    t->icv = NULL;
    t->team = NULL;
    t->dn = NULL;
    t->dep_list = NULL;
    t->dep_lock = 0;
    t->detach = 0;
    t->home = NULL;
    t->counted = t->final = t->is_explicit = t->heap = t->parent_heap = t->block = false;
    t->included = false;
}

/* ---- work sharing ------------------------------------------------------------------ */

/* One work-share construct's descriptor, in a ring slot of the team. The iteration
 * space is normalised to [0, count): value = start + i * incr (mod 2^64). */
struct ls_omp_ws {
    _Alignas(LOCKSTEP_CACHELINE) uint64_t next; /* dynamic / guided: first unassigned index */
    LS_PADTO(8);
    uint64_t ordered_next;  /* ordered: the index whose chunk may enter next */
    LS_PADTO(8);
    uint32_t remaining;     /* threads not yet done with this construct; 0 = free */
    int sched;              /* LS_SCHED_* (runtime and auto resolved) */
    int ordered;            /* an ordered loop: chunks pass the turn in order */
    uint64_t count;
    uint64_t chunk;
    uint64_t n_chunks;      /* static with a chunk: ceil(count / chunk) */
    uint64_t start, incr;   /* in the caller's type, as 64-bit patterns */
    void *copy;             /* single copyprivate: the winner's data */
    uint32_t copy_ready;
    void *mem;              /* GOMP_loop_start's team-shared memory */
    uintptr_t *task_red;    /* the first thread's task reductions (reduction.c) */
    uint32_t cancelled;     /* cancel for / sections */
    struct ls_omp_doacross *doacross; /* ordered(n) loops' posted iterations (doacross.c) */
    size_t mem_size;
};

/* ---- teams and threads --------------------------------------------------------------- */

/* A member's deferred tasks (deque.c): the member pushes and pops at the bottom, its
 * own line; thieves take from the top, one at a time under lock, on another line. */
struct ls_omp_deque {
    _Alignas(LOCKSTEP_CACHELINE) uint32_t bottom;
    uint32_t top_seen;           /* the owner's last read of top (top only grows) */
    uint64_t top_read_at;        /* ... and when (TSC: task.c, queued_enough) */
    LS_PADTO(16);
    _Alignas(LOCKSTEP_CACHELINE) uint32_t top;
    uint32_t lock;
    LS_PADTO(8);
    struct ls_omp_task *ring[LS_OMP_DEQUE_CAP];
};

/* A member's record for waiters on other CPUs deciding whether to yield: the episode
 * it last arrived at and the CPU it arrived on. Written only when threads outnumber
 * the CPUs; a stale value only makes a waiter yield where it could have spun. */
struct ls_omp_slot {
    _Alignas(LOCKSTEP_CACHELINE) uint64_t arrived;
    int cpu;
    uint32_t joined;        /* the region whose join this member reached (cancel.c) */
    uint64_t join_target;   /* the count that completes its join episode */
    struct ls_omp_deque tasks;
    /* deferred tasks this member created, and those it completed: written only by it */
    _Alignas(LOCKSTEP_CACHELINE) uint64_t created;
    uint64_t completed;
    /* task blocks this member created, freed by other threads: they push here, the
     * member takes the whole list when its spares run out (task.c) */
    _Alignas(LOCKSTEP_CACHELINE) struct ls_omp_task *returned;
};

struct ls_omp_pool;
struct ls_omp_team;

/* A thread's place in its current team; saved and restored around nested regions. */
struct ls_omp_ctx {
    struct ls_omp_team *team;   /* NULL outside any region */
    int tid;
    int n;                      /* the team's size as this thread entered it */
    uint64_t next_target;       /* count that completes this thread's next episode */
    uint32_t ws_count;          /* work-share constructs this thread has entered */
    struct ls_omp_ws *ws;       /* the loop or sections construct it is in */
    uint64_t static_k;          /* static schedule: chunks this thread has taken */
    uint64_t chunk_lo, chunk_hi;/* its current chunk, for ordered */
    bool chunk_held;
    struct ls_omp_task *task;   /* the task it is running */
    struct ls_omp_deque *deque; /* its deque in the team, NULL in a serial team */
    uint32_t mark;              /* the deque's bottom when the running task started */
    struct ls_omp_icv icv;
    int league_num;             /* teams: this thread's team in the league */
    int league_size;            /* teams in the league, 0 outside a teams region */
};


struct ls_omp_team {
    /* the barrier (barrier.c), and what changes with every region: one line, so a
     * worker released into a region reads all that its master changed in one move
     * of one line (the master writes the other region fields only when they change) */
    _Alignas(LOCKSTEP_CACHELINE) uint64_t count;   /* arrivals, never reset */
    uint64_t base;                  /* count when the region started */
    lockstep_waitword_t bell;                      /* parked waiters sleep here */
    /* a task was queued in this region: waiters look in the deques only then (set
     * once per region, reset by the master at the fork) */
    uint32_t queued_any;
    uint32_t region_seq;            /* regions forked; written last before the release */
    uint32_t leaving;               /* released workers still to notice they left */
    LS_PADTO(36);

    /* the region: written by the master before the release */
    _Alignas(LOCKSTEP_CACHELINE) void (*fn)(void *);
    void *data;
    int n;                          /* team size */
    int level, active_level;
    int parent_tid;                 /* the master's number in the enclosing team */
    int league_num, league_size;    /* the master's teams region, for every member */
    struct ls_omp_taskgroup *implicit_group; /* the implicit tasks start in it, or NULL */
    struct ls_omp_team *parent;     /* the enclosing team, NULL at level 1 */
    uint32_t ws_base;               /* work-share count at the region's start */
    int preinit;                    /* a combined parallel loop: ring[ws_base] is set up */
    uint32_t cancelled;             /* cancel parallel (cancel.c) */
    struct ls_omp_icv icv;          /* ICVs of the region's implicit tasks */
    struct ls_omp_pool *pool;       /* NULL for a serial team */
    struct ls_omp_slot **slots;     /* [tid]: each member's own line (barrier.c) */
    lockstep_wait_t wait;           /* spin and yield budgets, park or not */

    /* work-share claims: ws_claim = constructs started, ws_inited = initialised */
    _Alignas(LOCKSTEP_CACHELINE) uint32_t ws_claim;
    LS_PADTO(4);
    _Alignas(LOCKSTEP_CACHELINE) uint32_t ws_inited;
    LS_PADTO(4);
    struct ls_omp_ws ring[LS_OMP_WS_RING];

    /* deferred tasks: those queued by a thread with no room in a deque of this team
     * (its deque full, or no member: an event fulfilled elsewhere) wait in the inbox, a
     * LIFO list under a spinlock */
    _Alignas(LOCKSTEP_CACHELINE) uint32_t task_lock;
    struct ls_omp_task *inbox;
    uint32_t inboxed;               /* tasks in the inbox */
    /* deferred tasks created or completed by a thread with no slot in this team (a
     * team of one, an event fulfilled elsewhere); members count theirs in their slots,
     * so a creator and the thread that ran its task share no counter (ls_omp_pending) */
    _Alignas(LOCKSTEP_CACHELINE) uint64_t created_elsewhere;
    uint64_t completed_elsewhere;
    uint32_t n_slots;               /* slots[0, n_slots) exist (a pool's: only grows) */
    LS_PADTO(20);

    /* the master's own context outside this region, and its implicit task in it */
    struct ls_omp_ctx master_saved;
    _Alignas(LOCKSTEP_CACHELINE) struct ls_omp_task master_implicit;
    struct ls_omp_team *next_free;  /* serial team cache */
};

_Static_assert(offsetof(struct ls_omp_team, leaving) + sizeof(uint32_t) <= LOCKSTEP_CACHELINE,
               "what changes with every region shares the barrier's line");

struct ls_omp_thread {
    struct ls_omp_ctx c;
    struct ls_omp_task implicit;    /* this thread's implicit task in its team */
    struct ls_omp_pool *pool;       /* initial threads: the pool they own */
    struct ls_omp_team *serial_free;/* cached serial teams */
    struct ls_omp_taskgroup *fork_group; /* for the next fork's implicit tasks */
    unsigned orphan_section, orphan_sections; /* sections outside any region: last given, count */
    int place;                      /* the place it is bound to, -1: none */
    uint64_t here;                  /* oversubscribed: members (tid < 64) last seen on its
                                     * CPU at a wait (barrier.c) */
    /* the running explicit task's ICVs as it started, saved by the first ICV change
     * in it (ls_omp_icv_write) and restored when it ends */
    struct ls_omp_icv *icv_backup;
    bool icv_saved;
    bool icv_dirty;                 /* its ICVs may differ from its team's (set by a change) */
    int shown_n;                    /* OMP_DISPLAY_AFFINITY: team size last shown */
    struct ls_omp_task *spare;      /* freed task blocks kept for reuse (task.c) */
    uint32_t n_spare;
    bool keeps_spares;              /* a worker or a pool's owner: frees them at exit */
    /* blocks of another member freed here, given back together (task.c) */
    struct ls_omp_task *give, *give_tail;
    struct ls_omp_slot *give_to;
    uint32_t n_give;
    int initialized;
};

/* initial-exec: one load off the thread pointer (general-dynamic, -fPIC's default, calls
 * __tls_get_addr on every access); the runtime is preloaded or linked, not dlopened late */
extern __thread struct ls_omp_thread ls_omp_self __attribute__((tls_model("initial-exec")));
extern int ls_omp_used; /* some thread has called into the runtime */

/* The calling thread's state, initialised on first use. */
static inline struct ls_omp_thread *ls_omp_thr(void)
{
    struct ls_omp_thread *t = &ls_omp_self;
    if (LS_UNLIKELY(!t->initialized)) {
        t->initialized = 1;
        ls_store_relaxed(&ls_omp_used, 1);
        t->c.icv = ls_omp_g.icv;
        t->c.task = &t->implicit;
        t->place = -1;
    }
    return t;
}

/* The calling thread's team at nesting level `level` (1 = outermost) and its number in
 * it (*tid), or NULL when the thread is not that deep. */
static inline struct ls_omp_team *ls_omp_ancestor(int level, int *tid)
{
    struct ls_omp_thread *t = ls_omp_thr();
    struct ls_omp_team *team = t->c.team;
    int id = t->c.tid;
    if (!team || level < 1 || level > team->level)
        return NULL;
    while (team->level > level) {
        id = team->parent_tid;
        team = team->parent;
    }
    *tid = id;
    return team;
}

/* The calling thread's ICVs, to change: an explicit task's change stays in its data
 * environment (the values before it are saved once, for its end). */
static inline struct ls_omp_icv *ls_omp_icv_write(struct ls_omp_thread *t)
{
    if (t->icv_backup && !t->icv_saved) {
        *t->icv_backup = t->c.icv;
        t->icv_saved = true;
    }
    t->icv_dirty = true;
    return &t->c.icv;
}

/* team.c */
void ls_omp_fork(void (*fn)(void *), void *data, unsigned num_threads, unsigned flags,
                 int preinit_sched, uint64_t start, uint64_t count, uint64_t incr, uint64_t chunk);
void ls_omp_join(void);
/* The size a region forked now would have at most. */
int ls_omp_team_size(struct ls_omp_thread *t, unsigned num_threads);
void ls_omp_pause_pool(void);

/* barrier.c */
void ls_omp_barrier(void);
/* Arrive at this thread's next episode; returns the count that completes it. */
uint64_t ls_omp_arrive(struct ls_omp_thread *t, struct ls_omp_team *team);
/* How a thread waits: at a barrier in the region, at the join (a worker: team->n is
 * the master's to rewrite meanwhile), or gathering the workers (the master, which also
 * waits until no released worker is still leaving). */
enum ls_omp_wait_kind { LS_WAIT_BARRIER, LS_WAIT_JOIN, LS_WAIT_GATHER, LS_WAIT_CANCELLABLE };
/* Wait until count >= target and no task is pending, running queued tasks meanwhile. */
void ls_omp_wait(struct ls_omp_thread *t, struct ls_omp_team *team, uint64_t target,
                 enum ls_omp_wait_kind kind);
/* A team of one: wait until the detached tasks it ran have been fulfilled. */
void ls_omp_wait_detached(struct ls_omp_team *team);

/* bell.c (bell.h rings the bell and counts the pending tasks) */
/* Sleep on the team's bell while it still reads seen (registered in bell.sleepers). */
void ls_omp_sleep(struct ls_omp_team *team, uint32_t seen);
void ls_omp_init_wait(lockstep_wait_t *w);

/* work.c */
void ls_omp_ws_init(struct ls_omp_ws *ws, int sched, uint64_t start, uint64_t count,
                    uint64_t incr, uint64_t chunk, int n);
/* enter the next work-share construct: 1 if this thread initialised it (init runs
 * under the claim), 0 if it joined one another thread initialised */
typedef void (*ls_omp_ws_initfn)(struct ls_omp_ws *ws, void *arg, int n);
int ls_omp_ws_enter(struct ls_omp_thread *t, ls_omp_ws_initfn init, void *arg);
void ls_omp_ws_leave(struct ls_omp_thread *t);
/* enter a loop construct (or sections) over [0, count), setting it up if first */
void ls_omp_loop_enter(struct ls_omp_thread *t, int sched, uint64_t start, uint64_t count,
                       uint64_t incr, uint64_t chunk, void **mem);
void ls_omp_ordered_release(struct ls_omp_thread *t);
/* the next chunk of a loop but the common dynamic one (chunk.h: ls_omp_loop_next) */
bool ls_omp_loop_next_rest(struct ls_omp_thread *t, uint64_t *lo, uint64_t *hi);
int ls_omp_resolve_sched(int sched, long *chunk, const struct ls_omp_icv *icv);
/* loop.c: enter a loop from start to end by incr (is == NULL: only enter), the first
 * chunk's values into *is, *ie; sched 0 is runtime. */
bool ls_omp_start_long(int sched, bool ordered, long start, long end, long incr, long chunk,
                       long *is, long *ie, void **mem);
bool ls_omp_start_ull(int sched, bool ordered, bool up, unsigned long long start,
                      unsigned long long end, unsigned long long incr, unsigned long long chunk,
                      unsigned long long *is, unsigned long long *ie, void **mem);

/* task.c */
/* gcc's GOMP_TASK_FLAG_* bits (the ABI) */
#define LS_OMP_TF_UNTIED 1u
#define LS_OMP_TF_FINAL 2u
#define LS_OMP_TF_DEPEND 8u
#define LS_OMP_TF_GRAINSIZE (1u << 9)
#define LS_OMP_TF_IF (1u << 10)
#define LS_OMP_TF_NOGROUP (1u << 11)
#define LS_OMP_TF_REDUCTION (1u << 12)
#define LS_OMP_TF_DETACH (1u << 13)
#define LS_OMP_TF_STRICT (1u << 14) /* grainsize(strict:) and num_tasks(strict:) */

/* The bytes a copy of a task's data needs in a buffer: its size plus room to align. */
static inline size_t ls_omp_copy_room(long arg_size, long arg_align)
{
    return (size_t)arg_size + (arg_align > 1 ? (size_t)arg_align : 1u);
}

/* Where in buf a copy of a task's data starts: the first arg_align boundary. */
static inline void *ls_omp_copy_at(void *buf, long arg_align)
{
    uintptr_t a = arg_align > 1 ? (uintptr_t)arg_align : 1u;
    return (void *)(((uintptr_t)buf + a - 1) & ~(a - 1));
}

/* Create a task (task.c): run at once unless deferrable, queued on this thread's deque
 * otherwise; depend: its depend clauses (a deferred task of a team of several). */
void ls_omp_task_create(void (*fn)(void *), void *data, void (*cpyfn)(void *, void *),
                        long arg_size, long arg_align, bool deferrable, bool final,
                        uintptr_t *detach, void **depend);
bool ls_omp_run_one_task(struct ls_omp_thread *t);
void ls_omp_taskwait(struct ls_omp_thread *t);
void GOMP_taskgroup_start(void);
void GOMP_taskgroup_end(void);
void GOMP_taskgroup_reduction_register(uintptr_t *data);

/* reduction.c: a work-sharing construct's task reductions, once this thread is in it */
void ls_omp_ws_reductions(struct ls_omp_thread *t, uintptr_t *reductions);

/* Queue a deferred task that may run now; run one queued descendant of this thread's
 * task. */
void ls_omp_task_enqueue(struct ls_omp_team *team, struct ls_omp_task *task);
bool ls_omp_run_child(struct ls_omp_thread *t);
bool ls_omp_tasks_queued(const struct ls_omp_thread *t, const struct ls_omp_team *team);

/* The slot of t's place in a team with deques, NULL in none. */
static inline struct ls_omp_slot *ls_omp_own_slot(const struct ls_omp_thread *t)
{
    return t->c.deque ? (struct ls_omp_slot *)(void *)((char *)t->c.deque -
                                                       offsetof(struct ls_omp_slot, tasks))
                      : NULL;
}

/* taskmem.c: the thread's spare blocks freed; a gone team's returned blocks freed; the
 * blocks held for another member given back (taskmem.h: the rest of task memory) */
void ls_omp_spares_free(struct ls_omp_thread *t);
void ls_omp_returned_free(struct ls_omp_slot *slot);
void ls_omp_give_back(struct ls_omp_thread *t);

/* deque.c: push at the bottom (false: full); pop the bottom task if it was pushed at or
 * after mark; take into out the oldest half, at most max, of another member's tasks
 * (with want, max is 1 and only a task want accepts): how many; whether a deque holds
 * a task */
bool ls_omp_deque_push(struct ls_omp_deque *d, struct ls_omp_task *task, bool *was_empty);
/* Tasks a deque holds: its places less those a thief may hold reserved (deque.c). */
#define LS_OMP_DEQUE_ROOM ((int32_t)(LS_OMP_DEQUE_CAP - LS_OMP_STEAL_BATCH))
struct ls_omp_task *ls_omp_deque_pop(struct ls_omp_deque *d, uint32_t mark);
uint32_t ls_omp_deque_steal(struct ls_omp_deque *d, struct ls_omp_task **out, uint32_t max,
                            bool (*want)(const struct ls_omp_task *, const void *),
                            const void *arg);
static inline bool ls_omp_deque_busy(const struct ls_omp_deque *d)
{
    return (int32_t)(ls_load_seqcst(&d->bottom) - ls_load_seqcst(&d->top)) > 0;
}

/* depend.c: a clause list's entries (counted when deps is NULL); link x after its
 * conflicting live siblings (listed: as a predecessor of later ones too), returning
 * how many it waits for; a task with deps completed: the successors it made ready
 * moved to the front of task->dn->succ, how many returned (the caller queues them, then
 * clears the list). */
uint32_t ls_omp_deps_parse(void **depend, struct ls_omp_dep *deps);
uint32_t ls_omp_deps_link(struct ls_omp_task *parent, struct ls_omp_task *x, bool listed);
uint32_t ls_omp_deps_done(struct ls_omp_task *task);
void ls_omp_deps_clear(struct ls_omp_task *task);
/* task.c: wait for the tasks a construct with these depend clauses depends on */
void ls_omp_wait_depend(struct ls_omp_thread *t, void **depend);
void GOMP_task(void (*fn)(void *), void *data, void (*cpyfn)(void *, void *), long arg_size,
               long arg_align, bool if_clause, unsigned flags, void **depend, int priority,
               void *detach);

/* env.c */
void ls_omp_env_init(void);
void ls_omp_display_env(int verbose);
void ls_omp_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* alloc.c: an allocator from a memory space and traits (omp_init_allocator), and from
 * OMP_ALLOCATOR's text (0, or -1 when malformed) */
uintptr_t ls_omp_allocator_make(uintptr_t memspace, int ntraits, const void *traits);
int ls_omp_allocator_parse(const char *s, uintptr_t *out);
const char *ls_omp_allocator_name(uintptr_t a);

/* affinity.c: OMP_AFFINITY_FORMAT read (0, or -1 when it has an unknown field); show
 * this thread's affinity if its team's size changed (OMP_DISPLAY_AFFINITY) */
int ls_omp_affinity_init(const char *env);
void ls_omp_affinity_show(struct ls_omp_thread *t, int n);

/* places.c: OMP_PLACES read (0, or -1 when malformed); the places; the place of a
 * team's thread tid of nth, its master at place at; a place's CPUs */
int ls_omp_places_init(const char *s);
int ls_omp_num_places(void);
int ls_omp_place_for(int tid, int nth, int at, int bind);
#ifdef _GNU_SOURCE
bool ls_omp_place_set(int p, cpu_set_t *set);
#endif

/* sync.c: the unnamed critical and atomic locks free again (a forked child) */
void ls_omp_locks_reset(void);

/* Cancellation (cancel.c): whether team's region is cancelled; whether a task of team
 * in group belongs to a cancelled region or taskgroup (then it is not run, only
 * completed) */
static inline bool ls_omp_team_cancelled(const struct ls_omp_team *team)
{
    return team && ls_load_acquire(&team->cancelled);
}

static inline bool ls_omp_cancelled_in(const struct ls_omp_team *team,
                                       const struct ls_omp_taskgroup *group)
{
    if (ls_omp_team_cancelled(team))
        return true;
    for (const struct ls_omp_taskgroup *g = group; g; g = g->prev)
        if (ls_load_acquire(&g->cancelled))
            return true;
    return false;
}

static inline bool ls_omp_task_cancelled(const struct ls_omp_task *task)
{
    return ls_omp_cancelled_in(task->team, task->group);
}
void GOMP_loop_end_nowait(void);
void GOMP_sections_end_nowait(void);

/* unsupported.c */
void ls_omp_unsupported(const char *name) __attribute__((noreturn));

#include "spin.h" /* the short waits: with the state above */

#endif
