/* The team barrier, task-aware.
 *
 * count holds every arrival since the team was made. A thread keeps the count that
 * completes its next episode (next_target: the region's base plus n per episode), adds
 * one to count when it arrives, and waits until count >= next_target. The last
 * arrival is itself the release: waiters watch one word that changes once per
 * arrival, as lockstep's COUNTER barrier does.
 *
 * Tasks: a thread may leave once it sees count >= target and no deferred task pending.
 * Every task of the episode was counted as created before its creator arrived, so
 * none pending seen after the last arrival means all of them have finished (a later
 * zero cannot hide them). While tasks are pending, waiters run queued ones. A worker at
 * the join waits for the master's next arrival only: the master left the region after
 * its tasks, and the next region's tasks are not this wait's.
 *
 * The wait's phases and budgets are waiting's own (src/wait/loop.h); the hooks here
 * are the barrier's: its condition, the tasks a waiter runs, where the missing members
 * ran, and the bell it parks on.
 *
 * Parking: a waiter that has spun and yielded its budget registers in bell.sleepers,
 * re-checks, and sleeps on the bell word. Whoever makes a waiter's condition true (the
 * last arrival, a task queued, the last pending task finishing) then reads sleepers
 * and, if any, bumps the bell and wakes them. Both sides write with a seq_cst RMW and
 * then read with seq_cst loads, so either the waiter sees the change or the waker sees
 * the waiter. */
#define _GNU_SOURCE
#include <limits.h>
#include <sched.h>

#include "omp_impl.h"
#include "bell.h"
#include "../wait/loop.h"

/* seq_cst loads: after a parker's seq_cst registration they see any waker's write that
 * its read of sleepers missed (plain loads on x86) */
static inline bool done(struct ls_omp_team *team, uint64_t target, enum ls_omp_wait_kind kind)
{
    return (ls_load_seqcst(&team->count) >= target &&
            (kind == LS_WAIT_JOIN || ls_omp_no_pending(team)) &&
            (kind != LS_WAIT_GATHER || ls_load_seqcst(&team->leaving) == 0)) ||
           (kind == LS_WAIT_CANCELLABLE && ls_load_seqcst(&team->cancelled));
}

/* Threads outnumber the CPUs: is a member that has not arrived at this episode on this
 * CPU (as of its last arrival)? Then this thread yields to it; otherwise the threads it
 * waits for run elsewhere, and it spins a while instead of handing the CPU to another
 * waiter. The members last seen here are looked at first: their lines are this CPU's,
 * the others' a move from another CPU each. */
static bool missing_here(struct ls_omp_thread *t, const struct ls_omp_team *team, int n,
                         uint64_t target, int cpu)
{
    uint64_t seen = t->here, here = 0;
    for (uint64_t m = seen; m; m &= m - 1) {
        int i = __builtin_ctzll(m);
        if (i >= n)
            break;
        const struct ls_omp_slot *s = team->slots[i];
        if (ls_load_relaxed(&s->cpu) != cpu)
            continue;
        if (ls_load_relaxed(&s->arrived) < target)
            return true;
        here |= 1ull << i;
    }
    bool missing = false;
    for (int i = 0; i < n && !missing; i++) {
        if (i < 64 && (seen >> i & 1u))
            continue;
        const struct ls_omp_slot *s = team->slots[i];
        if (ls_load_relaxed(&s->cpu) != cpu)
            continue;
        if (i < 64)
            here |= 1ull << i;
        missing = ls_load_relaxed(&s->arrived) < target;
    }
    t->here = here;
    return missing;
}

/* What a member's wait passes its hooks (src/wait/loop.h) */
struct member_wait {
    struct ls_omp_thread *t;
    struct ls_omp_team *team;
    uint64_t target;
    enum ls_omp_wait_kind kind;
    int n;   /* the members of the episode waited for: at a join, the master may be
              * rewriting team->n for the next region */
    int cpu;
};

static bool wait_done(void *arg)
{
    struct member_wait *m = arg;
    return done(m->team, m->target, m->kind);
}

/* a queued task: run it while waiting */
static bool wait_work(void *arg)
{
    struct member_wait *m = arg;
    return ls_load_relaxed(&m->team->queued_any) && ls_omp_run_one_task(m->t);
}

static bool wait_elsewhere(void *arg)
{
    struct member_wait *m = arg;
    return !missing_here(m->t, m->team, m->n, m->target, m->cpu);
}

static void wait_park(void *arg)
{
    struct member_wait *m = arg;
    struct ls_omp_team *team = m->team;
    uint32_t seen = ls_load_acquire(&team->bell.value);
    ls_fetch_add(&team->bell.sleepers, 1u, __ATOMIC_SEQ_CST);
    if (!done(team, m->target, m->kind) && !ls_omp_tasks_queued(m->t, team))
        ls_omp_sleep(team, seen);
    ls_fetch_add(&team->bell.sleepers, (uint32_t)-1, __ATOMIC_RELAXED);
}

static const struct ls_wait_hooks member_hooks = {wait_done, wait_work, NULL, wait_park};
/* oversubscribed: spin while the missing members run elsewhere */
static const struct ls_wait_hooks member_hooks_aware = {wait_done, wait_work, wait_elsewhere,
                                                        wait_park};

void ls_omp_wait(struct ls_omp_thread *t, struct ls_omp_team *team, uint64_t target,
                 enum ls_omp_wait_kind kind)
{
    const lockstep_wait_t *w = &team->wait;
    bool fits = ls_omp_may_spin();
    uint32_t spins = fits ? w->spin : 0;
    uint32_t yields = fits ? w->yields : LS_WAIT_YIELDS_OVERSUBSCRIBED;
    struct member_wait m = {t, team, target, kind, t->c.n, -1};
    if (!fits && team->slots) {
        m.cpu = sched_getcpu();
        if (kind == LS_WAIT_GATHER) { /* the master arrives at the fork: till then, missing */
            struct ls_omp_slot *s = team->slots[0];
            ls_store_relaxed(&s->cpu, m.cpu);
            ls_store_relaxed(&s->arrived, target);
        }
        /* "last ran elsewhere, so running there" holds only while this team's threads
         * are all that run: another team's (nested regions) or a pool's may hold that
         * CPU, waiting in turn for one queued behind this waiter */
        bool alone = ls_budget_running() <= m.n;
        ls_wait_loop(w, spins, yields, alone ? &member_hooks_aware : &member_hooks, &m);
    } else {
        ls_wait_loop(w, spins, yields, &member_hooks, &m);
    }
    ls_omp_give_back(t); /* before the team may end */
}

uint64_t ls_omp_arrive(struct ls_omp_thread *t, struct ls_omp_team *team)
{
    ls_omp_give_back(t); /* a cancelled region's worker waits for no task after this */
    uint64_t target = t->c.next_target;
    t->c.next_target = target + (uint64_t)team->n;
    if (team->slots && !ls_omp_may_spin()) {
        struct ls_omp_slot *s = team->slots[t->c.tid];
        ls_store_relaxed(&s->cpu, sched_getcpu());
        ls_store_relaxed(&s->arrived, target);
    }
    LS_PERTURB();
    /* release: publishes this thread's writes to every thread that sees the count
     * reach target (the barrier's contract); seq_cst for ls_omp_ring */
    uint64_t now = ls_fetch_add(&team->count, 1u, __ATOMIC_SEQ_CST) + 1u;
    if (now >= target - 1u) /* the last arrival, or the last worker's at a join */
        ls_omp_ring(team);
    return target;
}

void ls_omp_wait_detached(struct ls_omp_team *team)
{
    while (!ls_omp_no_pending(team))
        ls_yield();
}

void ls_omp_barrier(void)
{
    struct ls_omp_thread *t = ls_omp_thr();
    struct ls_omp_team *team = t->c.team;
    LS_OMP_COUNT(barriers, 1);
    if (!team || team->n == 1) { /* alone: its tasks have all run where created */
        if (team)
            ls_omp_wait_detached(team);
        return;
    }
    ls_omp_wait(t, team, ls_omp_arrive(t, team), LS_WAIT_BARRIER);
}

LS_OMP_EXPORT void GOMP_barrier(void)
{
    ls_omp_barrier();
}
