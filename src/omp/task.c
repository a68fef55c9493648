/* Explicit tasks: task, taskwait, taskgroup, taskyield, taskloop.
 *
 * A deferred task is copied to a block (kept per thread for reuse) and pushed on its
 * creator's deque (deque.c): the creator runs its own newest first, the team's other
 * members take the oldest when they wait. A task is pending from its creation until it
 * completes (each member counts those it created and those it completed, in its slot),
 * and the team barrier does not release an episode while any is (barrier.c), so every
 * task created in a region has run when the region, or a barrier in it, ends. Any
 * thread of the team runs queued tasks while it waits at a barrier or at the join;
 * taskwait and taskgroup end run only descendants of the waiting task (the task
 * scheduling constraint for tied tasks): from its own deque those pushed since the
 * task began (t->c.mark), from others' those whose ancestors include it.
 *
 * A task runs at once instead (undeferred) when: its if clause is false; it is final
 * or inside a final task; the team has one thread; its creator's deque holds enough
 * for the team (queued_enough); or it has depend clauses, in which case its parent's
 * earlier children finish first, so it runs after every sibling it could depend on, in
 * creation order. One run at once and not detached is included: its creator runs it
 * to its end before going on, so its parent and taskgroup do not count it.
 *
 * Lifetime: a heap task lives until its run (and any hold on it) has ended and its
 * children have finished; its block then goes back to the member that created it
 * (taskmem.h). Implicit tasks are never freed: a region ends only after all its tasks. */
#define _GNU_SOURCE
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "omp_impl.h"
#include "bell.h"
#include "taskmem.h"

/* t's slot in team, where it counts the team's tasks; NULL if it has none there. */
static inline struct ls_omp_slot *slot_in(const struct ls_omp_thread *t,
                                          const struct ls_omp_team *team)
{
    return t->c.team == team ? ls_omp_own_slot(t) : NULL;
}

/* A deferred task of team is created: counted before anything publishes it. */
static void count_created(struct ls_omp_thread *t, struct ls_omp_team *team)
{
    struct ls_omp_slot *slot = slot_in(t, team);
    if (slot)
        ls_store_relaxed(&slot->created, ls_load_relaxed(&slot->created) + 1u);
    else
        ls_fetch_add(&team->created_elsewhere, 1u, __ATOMIC_RELAXED);
}

/* A deferred task of team completed; with the last pending one, a parked waiter at
 * its barrier may leave (the seq_cst count before the seq_cst read of sleepers). */
static void count_completed(struct ls_omp_team *team)
{
    struct ls_omp_slot *slot = slot_in(ls_omp_thr(), team);
    if (slot)
        ls_store_seqcst(&slot->completed, ls_load_relaxed(&slot->completed) + 1u);
    else
        ls_fetch_add(&team->completed_elsewhere, 1u, __ATOMIC_SEQ_CST);
    if (ls_load_seqcst(&team->bell.sleepers) != 0 && ls_omp_no_pending(team))
        ls_omp_ring(team);
}

/* A task is complete: its parent, its taskgroup and the team's barrier stop waiting
 * for it. Called by the thread that ran it, or, for a detached task, by whichever of
 * its body and omp_fulfill_event ends last (that may be a thread of no team). */
static void complete_task(struct ls_omp_task *task)
{
    LS_OMP_COUNT(tasks, 1);
    struct ls_omp_task *parent = task->parent;
    struct ls_omp_taskgroup *group = task->group;
    struct ls_omp_team *team = task->team;
    bool counted = task->counted;
    if (task->dn) { /* its successors may start */
        uint32_t ready = ls_omp_deps_done(task);
        for (uint32_t i = 0; i < ready; i++)
            ls_omp_task_enqueue(task->dn->succ[i]->team, task->dn->succ[i]);
        ls_omp_deps_clear(task);
    }
    if (task->included) {
        /* its creator waited for it: no count of its parent or taskgroup to settle */
    } else if (group)
        ls_fetch_add(&group->count, (uint32_t)-1, __ATOMIC_RELEASE);
    if (parent && !task->included) {
        if (ls_fetch_add(&parent->finished, 1u, __ATOMIC_ACQ_REL) == (uint32_t)-1 &&
            task->parent_heap)
            ls_omp_task_recycle(parent); /* it had ended: this was its last child */
    }
    ls_omp_task_release(task);
    if (counted && team)
        count_completed(team);
}

/* Run a task on this thread, then retire it (a detached task: once fulfilled too). */
/* Run a task's body as the thread's current task, in its own data environment. */
static void run_body(struct ls_omp_thread *t, struct ls_omp_task *task)
{
    struct ls_omp_task *saved = t->c.task;
    /* the task's ICVs are its own: a change in it stays there (ls_omp_icv_write) */
    struct ls_omp_icv before, *outer_backup = t->icv_backup;
    bool outer_saved = t->icv_saved;
    /* a deferred task runs with its creator's ICVs: a copy when the creator had
     * changed its own, else its team's, which this thread has unless it changed them */
    const struct ls_omp_icv *want =
        task->icv ? task->icv : t->icv_dirty && task->team ? &task->team->icv : NULL;
    t->icv_backup = &before;
    t->icv_saved = want != NULL;
    if (want) {
        before = t->c.icv;
        t->c.icv = *want;
    }
    t->c.task = task;
    task->fn(task->data);
    t->c.task = saved;
    if (t->icv_saved)
        t->c.icv = before;
    t->icv_backup = outer_backup;
    t->icv_saved = outer_saved;
}

static void run_task(struct ls_omp_thread *t, struct ls_omp_task *task)
{
    /* a task of a cancelled region or taskgroup completes unrun (a detached one runs:
     * its event may still be fulfilled from elsewhere) */
    if (LS_LIKELY(!ls_omp_g.cancellation) || task->detach || !ls_omp_task_cancelled(task))
        run_body(t, task);
    if (task->detach && ls_fetch_add(&task->detach, (uint32_t)-1, __ATOMIC_ACQ_REL) != 1u)
        return; /* its event completes it */
    complete_task(task);
}

LS_OMP_EXPORT void omp_fulfill_event(uintptr_t event)
{
    struct ls_omp_task *task = (struct ls_omp_task *)event;
    if (!task)
        return;
    if (ls_fetch_add(&task->detach, (uint32_t)-1, __ATOMIC_ACQ_REL) == 1u)
        complete_task(task);
}

/* Take the first task in the inbox that `want` accepts (NULL accepts any). */
static struct ls_omp_task *inbox_take(struct ls_omp_team *team,
                                      bool (*want)(const struct ls_omp_task *, const void *),
                                      const void *arg)
{
    if (ls_load_acquire(&team->inboxed) == 0)
        return NULL;
    ls_omp_spin_lock(&team->task_lock);
    struct ls_omp_task **pp = &team->inbox, *task;
    while ((task = *pp) && want && !want(task, arg))
        pp = &task->next;
    if (task) {
        *pp = task->next;
        ls_store_relaxed(&team->inboxed, team->inboxed - 1u);
    }
    ls_omp_spin_unlock(&team->task_lock);
    return task;
}

/* A queued task for t: the newest of its own deque pushed at or after mark, else the
 * oldest of another member's, else one from the inbox; from the others only one
 * that want accepts. */
static struct ls_omp_task *find(struct ls_omp_thread *t, uint32_t mark,
                                bool (*want)(const struct ls_omp_task *, const void *),
                                const void *arg)
{
    struct ls_omp_task *task = ls_omp_deque_pop(t->c.deque, mark);
    if (task)
        return task;
    struct ls_omp_team *team = t->c.team;
    for (int i = 1, n = t->c.n; i < n; i++) {
        int v = t->c.tid + i < n ? t->c.tid + i : t->c.tid + i - n;
        /* with a filter, one task it accepts; else a batch: the first runs, the rest
         * are queued here */
        struct ls_omp_task *batch[LS_OMP_STEAL_BATCH];
        uint32_t k = ls_omp_deque_steal(&team->slots[v]->tasks, batch,
                                        want ? 1u : LS_OMP_STEAL_BATCH, want, arg);
        for (uint32_t j = k; j-- > 1;)
            ls_omp_task_enqueue(team, batch[j]);
        if (k)
            return batch[0];
    }
    return inbox_take(team, want, arg);
}

bool ls_omp_tasks_queued(const struct ls_omp_thread *t, const struct ls_omp_team *team)
{
    if (!t->c.deque || t->c.team != team)
        return false;
    for (int i = 0; i < t->c.n; i++)
        if (ls_omp_deque_busy(&team->slots[i]->tasks))
            return true;
    return ls_load_seqcst(&team->inboxed) != 0;
}

bool ls_omp_run_one_task(struct ls_omp_thread *t)
{
    if (!t->c.deque) /* a serial team queues nothing */
        return false;
    struct ls_omp_task *task = find(t, ls_load_relaxed(&t->c.deque->top), NULL, NULL);
    if (!task)
        return false;
    run_task(t, task);
    return true;
}

static bool descends(const struct ls_omp_task *task, const void *ancestor)
{
    for (const struct ls_omp_task *p = task->parent; p; p = p->parent)
        if (p == ancestor)
            return true;
    return false;
}

bool ls_omp_run_child(struct ls_omp_thread *t)
{
    struct ls_omp_task *task = t->c.deque ? find(t, t->c.mark, descends, t->c.task) : NULL;
    if (task)
        run_task(t, task);
    return task != NULL;
}

/* Until *count reads want, run queued descendants of this thread's task; between
 * tries, wait a little for the count (the rest run on other threads). */
static void run_until(struct ls_omp_thread *t, uint32_t *count, uint32_t want)
{
    while (ls_load_acquire(count) != want) {
        if (ls_omp_run_child(t))
            continue;
        bool spin = ls_omp_may_spin();
        for (unsigned i = 0; i < LS_WAIT_RESCAN_SPIN && ls_load_acquire(count) != want; i++) {
            if (spin)
                ls_cpu_relax();
            else
                ls_yield();
        }
    }
}

void ls_omp_taskwait(struct ls_omp_thread *t)
{
    struct ls_omp_task *task = t->c.task;
    run_until(t, &task->finished, task->spawned);
}

/* A construct that only waits on its depend clauses: a waiter of its own, linked after
 * the siblings it depends on (depend.c), while this thread runs the parent's children. */
void ls_omp_wait_depend(struct ls_omp_thread *t, void **depend)
{
    struct ls_omp_team *team = t->c.team;
    if (!team || team->n == 1 || !team->pool) {
        ls_omp_taskwait(t); /* nothing is queued: every earlier sibling has ended */
        return;
    }
    struct ls_omp_task w = {0};
    struct ls_omp_depnode dn = {0};
    uint32_t n = ls_omp_deps_parse(depend, NULL);
    struct ls_omp_dep deps[n ? n : 1];
    ls_omp_deps_parse(depend, deps);
    dn.deps = deps;
    dn.ndeps = n;
    dn.waiter = true;
    w.dn = &dn;
    if (ls_omp_deps_link(t->c.task, &w, false) == 0)
        return;
    while (ls_load_acquire(&dn.npred) != 0)
        if (!ls_omp_run_child(t))
            ls_yield();
}

static void link_task(struct ls_omp_thread *t, struct ls_omp_task *task, bool final)
{
    struct ls_omp_task *parent = t->c.task;
    task->parent = parent;
    task->group = parent->inner;
    task->inner = task->group;
    task->final = final;
    task->is_explicit = true;
    task->spawned = 0; /* finished is 0 already (task_alloc) */
    task->parent_heap = parent->heap;
    if (task->included)
        return; /* its creator runs it to the end before it goes on */
    parent->spawned++; /* only this thread runs the parent */
    if (task->group)
        ls_fetch_add(&task->group->count, 1u, __ATOMIC_RELAXED);
}

void ls_omp_task_enqueue(struct ls_omp_team *team, struct ls_omp_task *task)
{
    struct ls_omp_thread *t = ls_omp_thr();
    bool was_empty;
    if (!ls_load_relaxed(&team->queued_any))
        ls_store_relaxed(&team->queued_any, 1u);
    if (t->c.team == team && t->c.deque && ls_omp_deque_push(t->c.deque, task, &was_empty)) {
        if (was_empty) /* waiters park only when they see every deque empty */
            ls_omp_ring(team);
        return;
    }
    ls_omp_spin_lock(&team->task_lock);
    task->next = team->inbox;
    team->inbox = task;
    uint32_t was = ls_fetch_add(&team->inboxed, 1u, __ATOMIC_SEQ_CST); /* for ls_omp_ring */
    ls_omp_spin_unlock(&team->task_lock);
    if (was == 0)
        ls_omp_ring(team);
}

/* Whether the creator's deque holds enough tasks for the team (LS_OMP_QUEUED_PER_MEMBER
 * per member): then a new task runs at once, as libgomp's creators do past their
 * threshold. The count uses top as this check last read it (top only grows, so the
 * count is never too low) and reads it again, a line thieves write, only after
 * LS_OMP_QUEUE_RECHECK_TICKS: between two reads the creator queues at most a limit's
 * worth of tasks and runs the rest itself, and after a long task it looks at once. */
static bool queued_enough(struct ls_omp_deque *d, int n)
{
    int64_t limit = (int64_t)LS_OMP_QUEUED_PER_MEMBER * n;
    if (limit > LS_OMP_DEQUE_ROOM)
        limit = LS_OMP_DEQUE_ROOM;
    uint32_t b = ls_load_relaxed(&d->bottom);
    if ((int32_t)(b - d->top_seen) < limit)
        return false;
    uint64_t now = __rdtsc();
    if (now - d->top_read_at < LS_OMP_QUEUE_RECHECK_TICKS)
        return true;
    d->top_read_at = now;
    d->top_seen = ls_load_acquire(&d->top);
    return (int32_t)(b - d->top_seen) >= limit;
}

/* depend: the task's depend clauses, for a deferred task of a team of several (it waits
 * for its predecessors); NULL otherwise. */
void ls_omp_task_create(void (*fn)(void *), void *data, void (*cpyfn)(void *, void *),
                        long arg_size, long arg_align, bool deferrable, bool final,
                        uintptr_t *detach, void **depend)
{
    struct ls_omp_thread *t = ls_omp_thr();
    struct ls_omp_team *team = t->c.team;
    bool defer = deferrable && team && team->n > 1 && t->c.deque &&
                 (depend || !queued_enough(t->c.deque, team->n));
    if (!defer && (!team || team->n == 1) && !detach) {
        /* a team of one: everything runs here and now, children included, so the
         * task can live on this stack; no other thread sees it from start to end, so
         * its parent and taskgroup need not count it (copied from a cleared one: a
         * memset, or an initializer, of the struct compiles to a slow `rep stos`) */
        struct ls_omp_task *parent = t->c.task;
        /* a task of a cancelled region or taskgroup is discarded, as if queued */
        if (LS_UNLIKELY(ls_omp_g.cancellation) && ls_omp_cancelled_in(team, parent->inner))
            return;
        static const struct ls_omp_task cleared;
        struct ls_omp_task task = cleared;
        task.fn = fn;
        task.data = data;
        task.parent = parent;
        task.group = task.inner = parent->inner;
        task.final = final;
        task.is_explicit = true;
        char buf[cpyfn ? ls_omp_copy_room(arg_size, arg_align) : 1];
        if (cpyfn) { /* without one, the data is used in place, as it is not deferred */
            task.data = ls_omp_copy_at(buf, arg_align);
            cpyfn(task.data, data);
        }
        run_body(t, &task);
        LS_OMP_COUNT(tasks, 1);
        return;
    }
    uint32_t ndeps = depend ? ls_omp_deps_parse(depend, NULL) : 0;
    /* after the task: its ICVs, then its dependences, then its data */
    size_t deps_room = ndeps ? sizeof(struct ls_omp_depnode) + ndeps * sizeof(struct ls_omp_dep) : 0;
    bool own_icv = t->icv_dirty || !team; /* else its team's ICVs are its creator's */
    size_t icv_room = own_icv ? sizeof(struct ls_omp_icv) : 0;
    size_t head = sizeof(struct ls_omp_task) + icv_room + deps_room;
    size_t size = head + ls_omp_copy_room(arg_size, arg_align);
    struct ls_omp_task *task = ls_omp_task_alloc(t, size);
    if (!task) {
        ls_omp_warn("out of memory for a task");
        abort();
    }
    ls_omp_task_clear(task, NULL);
    task->block = size <= LS_OMP_TASK_BLOCK;
    task->home = task->block ? ls_omp_own_slot(t) : NULL;
    task->fn = fn;
    task->refs = 1;
    task->team = team;
    task->heap = true;
    if (own_icv)
        task->icv = (struct ls_omp_icv *)(task + 1);
    if (ndeps) {
        task->dn = (struct ls_omp_depnode *)(void *)((char *)(task + 1) + icv_room);
        memset(task->dn, 0, sizeof *task->dn);
        task->dn->deps = (struct ls_omp_dep *)(task->dn + 1);
        task->dn->ndeps = ls_omp_deps_parse(depend, task->dn->deps);
    }
    task->data = ls_omp_copy_at((char *)task + head, arg_align);
    if (detach) {
        /* the event is the task: its handle goes to the clause's variable and to the
         * data's first word, where the body reads it, before the data is copied */
        task->detach = 2u;
        *detach = (uintptr_t)task;
        if (data)
            *(uintptr_t *)data = (uintptr_t)task;
    }
    if (cpyfn)
        cpyfn(task->data, data);
    else if (arg_size > 0)
        memcpy(task->data, data, (size_t)arg_size);
    task->included = !defer && !detach;
    link_task(t, task, final);
    if (task->icv)
        *task->icv = t->c.icv;
    if (!defer) {
        /* a detached task run at once by a team of one may end after this: the team's
         * barriers wait for it; run undeferred (if(0)), its creator waits for it here */
        task->counted = detach && team && deferrable;
        if (task->counted)
            count_created(t, team);
        if (detach && !deferrable)
            ls_fetch_add(&task->refs, 1u, __ATOMIC_RELAXED); /* held for the wait below */
        run_task(t, task);
        if (detach && !deferrable) {
            while (ls_load_acquire(&task->detach) != 0)
                if (!ls_omp_run_one_task(t))
                    ls_yield();
            ls_omp_task_release(task);
        }
        return;
    }
    task->counted = true;
    count_created(t, team);
    /* with predecessors, the last of them to complete queues it */
    if (!task->dn || ls_omp_deps_link(t->c.task, task, true) == 0)
        ls_omp_task_enqueue(team, task);
}

LS_OMP_EXPORT void GOMP_task(void (*fn)(void *), void *data, void (*cpyfn)(void *, void *),
                             long arg_size, long arg_align, bool if_clause, unsigned flags,
                             void **depend, int priority, void *detach)
{
    (void)priority;
    struct ls_omp_thread *t = ls_omp_thr();
    /* inside a final task every task is included: undeferred, and final itself */
    bool included = t->c.task->final;
    struct ls_omp_team *team = t->c.team;
    bool graph = (flags & LS_OMP_TF_DEPEND) && depend && if_clause && !included && team &&
                 team->n > 1 && team->pool;
    if ((flags & LS_OMP_TF_DEPEND) && depend && !graph) {
        /* a team of one or an included task: it runs now (a detached one may end
         * later), once its predecessors have completed */
        ls_omp_wait_depend(t, depend);
    }
    ls_omp_task_create(fn, data, cpyfn, arg_size, arg_align, if_clause && !included,
                included || (flags & LS_OMP_TF_FINAL), (flags & LS_OMP_TF_DETACH) ? (uintptr_t *)detach : NULL,
                graph ? depend : NULL);
}

LS_OMP_EXPORT void GOMP_taskwait(void)
{
    ls_omp_taskwait(ls_omp_thr());
}

LS_OMP_EXPORT void GOMP_taskwait_depend(void **depend)
{
    ls_omp_wait_depend(ls_omp_thr(), depend);
}

static void no_body(void *data)
{
    (void)data;
}

/* taskwait depend(...) nowait: no wait, but later siblings order after the clauses as
 * after a task with them; an empty task carries them */
LS_OMP_EXPORT void GOMP_taskwait_depend_nowait(void **depend)
{
    GOMP_task(no_body, NULL, NULL, 0, 1, true, LS_OMP_TF_DEPEND, depend, 0, NULL);
}

LS_OMP_EXPORT int omp_in_explicit_task(void)
{
    return ls_omp_thr()->c.task->is_explicit;
}

LS_OMP_EXPORT void GOMP_taskyield(void)
{
    /* a scheduling point; tied tasks may not switch here to an unrelated task */
}

/* ---- taskgroup -------------------------------------------------------------------------- */

LS_OMP_EXPORT void GOMP_taskgroup_start(void)
{
    struct ls_omp_thread *t = ls_omp_thr();
    struct ls_omp_taskgroup *g = calloc(1, sizeof *g);
    if (!g) {
        ls_omp_warn("out of memory for a taskgroup");
        abort();
    }
    g->prev = t->c.task->inner;
    g->reductions = g->prev ? g->prev->reductions : NULL;
    t->c.task->inner = g;
}

LS_OMP_EXPORT void GOMP_taskgroup_end(void)
{
    struct ls_omp_thread *t = ls_omp_thr();
    struct ls_omp_taskgroup *g = t->c.task->inner;
    if (!g)
        return;
    run_until(t, &g->count, 0);
    t->c.task->inner = g->prev;
    free(g);
}
