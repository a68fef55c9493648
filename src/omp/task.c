/* Explicit tasks: task, taskwait, taskgroup, taskyield, taskloop.
 *
 * A deferred task is copied to a block (kept per thread for reuse) and pushed on its
 * creator's deque (deque.c): the creator runs its own newest first, the team's other
 * members take the oldest when they wait. pending counts a task until it finishes, and
 * the team barrier does not release an episode while pending > 0 (team.c), so every
 * task created in a region has run when the region, or a barrier in it, ends. Any
 * thread of the team runs queued tasks while it waits at a barrier or at the join;
 * taskwait and taskgroup end run only descendants of the waiting task (the task
 * scheduling constraint for tied tasks): from its own deque those pushed since the
 * task began (t->c.mark), from others' those whose ancestors include it.
 *
 * A task runs at once instead (undeferred) when: its if clause is false; it is final
 * or inside a final task; the team has one thread; its creator's deque is full; or it
 * has depend clauses, in which case its parent's earlier children finish first, so it
 * runs after every sibling it could depend on, in creation order.
 *
 * Lifetime: a heap task holds one reference for its run and one per live child (a
 * child decrements its parent's counts when it finishes); the last reference frees
 * it. Implicit tasks are never freed: a region ends only after all its tasks. */
#define _GNU_SOURCE
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "omp_impl.h"

/* gcc's GOMP_TASK_FLAG_* bits (the ABI) */
#define F_UNTIED 1u
#define F_FINAL 2u
#define F_DEPEND 8u
#define F_GRAINSIZE (1u << 9)
#define F_IF (1u << 10)
#define F_NOGROUP (1u << 11)
#define F_REDUCTION (1u << 12)
#define F_DETACH (1u << 13)
#define F_STRICT (1u << 14) /* grainsize(strict:) and num_tasks(strict:) */

/* A task of size bytes; a block from the thread's spares when it fits one. */
static struct ls_omp_task *task_alloc(struct ls_omp_thread *t, size_t size)
{
    if (size > LS_OMP_TASK_BLOCK)
        return malloc(size);
    struct ls_omp_task *task = t->spare;
    if (task) {
        t->spare = task->next;
        t->n_spare--;
    } else {
        task = malloc(LS_OMP_TASK_BLOCK);
    }
    return task;
}

/* The last reference is gone: the block joins the releasing thread's spares (a thread
 * that frees them when it ends), else goes back to malloc. */
static void task_release(struct ls_omp_task *task)
{
    if (!task->heap || ls_fetch_add(&task->refs, (uint32_t)-1, __ATOMIC_ACQ_REL) != 1u)
        return;
    struct ls_omp_thread *t = ls_omp_thr();
    if (task->block && t->keeps_spares && t->n_spare < LS_OMP_TASK_SPARES) {
        task->next = t->spare;
        t->spare = task;
        t->n_spare++;
    } else {
        free(task);
    }
}

void ls_omp_spares_free(struct ls_omp_thread *t)
{
    while (t->spare) {
        struct ls_omp_task *next = t->spare->next;
        free(t->spare);
        t->spare = next;
    }
    t->n_spare = 0;
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
    if (task->dn)
        ls_omp_deps_done(task); /* its successors may start */
    if (group)
        ls_fetch_add(&group->count, (uint32_t)-1, __ATOMIC_RELEASE);
    if (parent) {
        ls_fetch_add(&parent->children, (uint32_t)-1, __ATOMIC_RELEASE);
        task_release(parent);
    }
    task_release(task);
    /* the last pending task: a barrier may now complete */
    if (counted && team && ls_fetch_add(&team->pending, (uint32_t)-1, __ATOMIC_SEQ_CST) == 1u)
        ls_omp_ring(team);
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
        if ((task = ls_omp_deque_steal(&team->slots[v]->tasks, want, arg)))
            return task;
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

/* Until *count is 0, run queued descendants of this thread's task; between tries,
 * wait a little for the count (the rest run on other threads). */
static void run_until_zero(struct ls_omp_thread *t, uint32_t *count)
{
    while (ls_load_acquire(count) != 0) {
        if (ls_omp_run_child(t))
            continue;
        bool spin = ls_omp_may_spin();
        for (unsigned i = 0; i < LS_OMP_RESCAN_SPIN && ls_load_acquire(count) != 0; i++) {
            if (spin)
                ls_cpu_relax();
            else
                sched_yield();
        }
    }
}

void ls_omp_taskwait(struct ls_omp_thread *t)
{
    run_until_zero(t, &t->c.task->children);
}

/* The bytes a copy of a task's data needs in a buffer: its size plus room to align. */
static size_t copy_room(long arg_size, long arg_align)
{
    return (size_t)arg_size + (arg_align > 1 ? (size_t)arg_align : 1u);
}

/* Where in buf a copy of a task's data starts: the first arg_align boundary. */
static void *copy_at(void *buf, long arg_align)
{
    uintptr_t a = arg_align > 1 ? (uintptr_t)arg_align : 1u;
    return (void *)(((uintptr_t)buf + a - 1) & ~(a - 1));
}

static void link_task(struct ls_omp_thread *t, struct ls_omp_task *task, bool final)
{
    struct ls_omp_task *parent = t->c.task;
    task->parent = parent;
    task->group = parent->inner;
    task->inner = task->group;
    task->final = final;
    task->is_explicit = true;
    task->children = 0;
    ls_fetch_add(&parent->children, 1u, __ATOMIC_RELAXED);
    if (parent->heap)
        ls_fetch_add(&parent->refs, 1u, __ATOMIC_RELAXED);
    if (task->group)
        ls_fetch_add(&task->group->count, 1u, __ATOMIC_RELAXED);
}

void ls_omp_task_enqueue(struct ls_omp_team *team, struct ls_omp_task *task)
{
    struct ls_omp_thread *t = ls_omp_thr();
    bool was_empty;
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

/* depend: the task's depend clauses, for a deferred task of a team of several (it waits
 * for its predecessors); NULL otherwise. */
static void create_task(void (*fn)(void *), void *data, void (*cpyfn)(void *, void *),
                        long arg_size, long arg_align, bool deferrable, bool final,
                        uintptr_t *detach, void **depend)
{
    struct ls_omp_thread *t = ls_omp_thr();
    struct ls_omp_team *team = t->c.team;
    bool defer = deferrable && team && team->n > 1 && t->c.deque &&
                 (depend || !ls_omp_deque_full(t->c.deque));
    if (!defer && (!team || team->n == 1) && !detach) {
        /* a team of one: everything runs here and now, children included, so the
         * task can live on this stack; no other thread sees it from start to end, so
         * its parent and taskgroup need not count it (set field by field: a memset of
         * the struct compiles to a slow `rep stos`) */
        struct ls_omp_task *parent = t->c.task;
        /* a task of a cancelled region or taskgroup is discarded, as if queued */
        if (LS_UNLIKELY(ls_omp_g.cancellation) && ls_omp_cancelled_in(team, parent->inner))
            return;
        struct ls_omp_task task = {.fn = fn, .data = data, .parent = parent,
                                   .group = parent->inner, .inner = parent->inner,
                                   .final = final, .is_explicit = true};
        char buf[cpyfn ? copy_room(arg_size, arg_align) : 1];
        if (cpyfn) { /* without one, the data is used in place, as it is not deferred */
            task.data = copy_at(buf, arg_align);
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
    size_t size = head + copy_room(arg_size, arg_align);
    struct ls_omp_task *task = task_alloc(t, size);
    if (!task) {
        ls_omp_warn("out of memory for a task");
        abort();
    }
    ls_omp_task_clear(task, NULL);
    task->block = size <= LS_OMP_TASK_BLOCK;
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
    task->data = copy_at((char *)task + head, arg_align);
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
    link_task(t, task, final);
    if (task->icv)
        *task->icv = t->c.icv;
    if (!defer) {
        /* a detached task run at once by a team of one may end after this: the team's
         * barriers wait for it; run undeferred (if(0)), its creator waits for it here */
        task->counted = detach && team && deferrable;
        if (task->counted)
            ls_fetch_add(&team->pending, 1u, __ATOMIC_RELAXED);
        if (detach && !deferrable)
            ls_fetch_add(&task->refs, 1u, __ATOMIC_RELAXED); /* held for the wait below */
        run_task(t, task);
        if (detach && !deferrable) {
            while (ls_load_acquire(&task->detach) != 0)
                if (!ls_omp_run_one_task(t))
                    sched_yield();
            task_release(task);
        }
        return;
    }
    task->counted = true;
    ls_fetch_add(&team->pending, 1u, __ATOMIC_RELAXED);
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
    bool graph = (flags & F_DEPEND) && depend && if_clause && !included && team &&
                 team->n > 1 && team->pool;
    if ((flags & F_DEPEND) && depend && !graph) {
        /* a team of one or an included task: it runs now (a detached one may end
         * later), once its predecessors have completed */
        ls_omp_wait_depend(t, depend);
    }
    create_task(fn, data, cpyfn, arg_size, arg_align, if_clause && !included,
                included || (flags & F_FINAL), (flags & F_DETACH) ? (uintptr_t *)detach : NULL,
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
    GOMP_task(no_body, NULL, NULL, 0, 1, true, F_DEPEND, depend, 0, NULL);
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
    run_until_zero(t, &g->count);
    t->c.task->inner = g->prev;
    free(g);
}

/* ---- taskloop ------------------------------------------------------------------------------ */

/* Split [start, end) by step into tasks; each task's copy of data starts with its own
 * first and past-the-end values, as gcc's outlined body reads them. up: the direction. */
static void taskloop(void (*fn)(void *), void *data, void (*cpyfn)(void *, void *),
                     long arg_size, long arg_align, unsigned flags, unsigned long num_tasks,
                     uint64_t start, uint64_t end, uint64_t step, bool up, bool is_long)
{
    struct ls_omp_thread *t = ls_omp_thr();
    uint64_t span = up ? end - start : start - end;
    uint64_t stride = up ? step : 0u - step;
    bool empty = is_long ? (up ? (int64_t)start >= (int64_t)end : (int64_t)start <= (int64_t)end)
                         : (up ? start >= end : start <= end);
    if (empty || stride == 0) {
        /* no task: the compiler's code learns from d[2] = 0 that nothing registered */
        if ((flags & (F_REDUCTION | F_NOGROUP)) == F_REDUCTION)
            ((uintptr_t **)data)[2][2] = 0;
        return;
    }
    uint64_t iters = span / stride + (span % stride != 0);
    uint64_t ntasks, strict_len = 0;
    if ((flags & F_GRAINSIZE) && (flags & F_STRICT) && num_tasks) {
        /* every task has exactly the grain, the last one the rest */
        strict_len = num_tasks;
        ntasks = iters / num_tasks + (iters % num_tasks != 0);
    } else if (flags & F_GRAINSIZE)
        ntasks = num_tasks ? iters / num_tasks : iters;
    else if (num_tasks)
        ntasks = num_tasks;
    else
        ntasks = t->c.team ? (uint64_t)t->c.team->n : 1u;
    if (ntasks < 1)
        ntasks = 1;
    if (ntasks > iters)
        ntasks = iters;
    if (!(flags & F_NOGROUP)) {
        GOMP_taskgroup_start();
        if (flags & F_REDUCTION) /* the data starts {first, past-the-end, reductions} */
            GOMP_taskgroup_reduction_register(((uintptr_t **)data)[2]);
    }
    bool final = t->c.task->final;
    char *buf = malloc(copy_room(arg_size, arg_align));
    if (!buf) {
        ls_omp_warn("out of memory for a taskloop");
        abort();
    }
    void *copy = copy_at(buf, arg_align);
    uint64_t q = iters / ntasks, r = iters % ntasks, first = 0;
    for (uint64_t k = 0; k < ntasks; k++) {
        uint64_t len = strict_len ? (k + 1 < ntasks ? strict_len : iters - first) : q + (k < r);
        if (cpyfn)
            cpyfn(copy, data);
        else
            memcpy(copy, data, (size_t)arg_size);
        uint64_t lo = start + first * step, hi = start + (first + len) * step;
        if (is_long) {
            ((long *)copy)[0] = (long)lo;
            ((long *)copy)[1] = (long)hi;
        } else {
            ((unsigned long long *)copy)[0] = lo;
            ((unsigned long long *)copy)[1] = hi;
        }
        first += len;
        /* the copy is complete: no further copy function */
        create_task(fn, copy, NULL, arg_size, arg_align, (flags & F_IF) && !final, final, NULL,
                    NULL);
    }
    free(buf);
    if (!(flags & F_NOGROUP))
        GOMP_taskgroup_end();
}

LS_OMP_EXPORT void GOMP_taskloop(void (*fn)(void *), void *data, void (*cpyfn)(void *, void *),
                                 long arg_size, long arg_align, unsigned flags,
                                 unsigned long num_tasks, int priority, long start, long end,
                                 long step)
{
    (void)priority;
    taskloop(fn, data, cpyfn, arg_size, arg_align, flags, num_tasks, (uint64_t)start,
             (uint64_t)end, (uint64_t)step, step > 0, true);
}

LS_OMP_EXPORT void GOMP_taskloop_ull(void (*fn)(void *), void *data,
                                     void (*cpyfn)(void *, void *), long arg_size,
                                     long arg_align, unsigned flags, unsigned long num_tasks,
                                     int priority, unsigned long long start,
                                     unsigned long long end, unsigned long long step)
{
    (void)priority;
    taskloop(fn, data, cpyfn, arg_size, arg_align, flags, num_tasks, start, end, step,
             (flags & 256u) != 0, false);
}
