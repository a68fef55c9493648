/* Task memory: the blocks deferred tasks live in, kept per thread for reuse, and given
 * back to the member that created them once done. Inline: every task takes and returns
 * one (taskmem.c has the rest). For task.c. */
#ifndef LOCKSTEP_OMP_TASKMEM_H
#define LOCKSTEP_OMP_TASKMEM_H

#include <stdlib.h>

#include "omp_impl.h"

/* A task of size bytes: a block from the thread's spares when it fits one, else from
 * the blocks other threads gave back to its slot, else new. */
static inline struct ls_omp_task *ls_omp_task_alloc(struct ls_omp_thread *t, size_t size)
{
    struct ls_omp_task *task = NULL;
    if (size <= LS_OMP_TASK_BLOCK) {
        struct ls_omp_slot *slot;
        size = LS_OMP_TASK_BLOCK;
        task = t->spare;
        if (!task && (slot = ls_omp_own_slot(t)) && ls_load_relaxed(&slot->returned))
            task = ls_exchange(&slot->returned, NULL, __ATOMIC_ACQUIRE);
        if (task) {
            t->spare = task->next;
            if (t->n_spare)
                t->n_spare--;
            return task;
        }
    }
    task = malloc(size);
    if (task)
        task->finished = 0;
    return task;
}

/* The task's memory is no longer needed. A block another member created goes back to
 * it (so a creator whose tasks run elsewhere reuses its blocks instead of taking new
 * ones from malloc, where this thread's frees would contend for its arena), in
 * batches, so its slot's line moves once per batch; a member holding some gives them
 * back before any wait of its team ends (ls_omp_wait), so none outlives the team.
 * Others join this thread's spares (a thread that frees them when it ends), else go
 * back to malloc. */
static inline void ls_omp_task_recycle(struct ls_omp_task *task)
{
    struct ls_omp_thread *t = ls_omp_thr();
    struct ls_omp_slot *home = task->home, *own = ls_omp_own_slot(t);
    if (home && home != own) {
        if (t->give_to != home)
            ls_omp_give_back(t);
        if (!t->give)
            t->give_tail = task;
        task->next = t->give;
        t->give = task;
        t->give_to = home;
        if (++t->n_give >= LS_OMP_TASK_GIVE_BATCH || !own)
            ls_omp_give_back(t); /* a thread of no team has no wait that would */
    } else if (task->block && t->keeps_spares && t->n_spare < LS_OMP_TASK_SPARES) {
        task->next = t->spare;
        t->spare = task;
        t->n_spare++;
    } else {
        free(task);
    }
}

/* Drop a reference to a heap task (its run's, or a hold). A task lives until it has
 * ended and its children have finished, counted without a word that both its
 * creations and its children's ends write: children add 1 to finished as they end;
 * the last reference subtracts spawned (final by then). Whichever brings finished to
 * 0 frees the task; before the subtraction finished is its children's count, so no
 * child's addition reaches 0. A leaf's finished stays 0, and a task nothing else
 * holds (none can take a hold once others may run it) skips the subtraction on refs:
 * the thread that ran it writes to it only to give it back. */
static inline void ls_omp_task_release(struct ls_omp_task *task)
{
    if (!task->heap)
        return;
    if (ls_load_acquire(&task->refs) != 1u &&
        ls_fetch_add(&task->refs, (uint32_t)-1, __ATOMIC_ACQ_REL) != 1u)
        return;
    uint32_t spawned = task->spawned;
    if (spawned == 0 || ls_fetch_add(&task->finished, 0u - spawned, __ATOMIC_ACQ_REL) == spawned)
        ls_omp_task_recycle(task);
}

#endif
