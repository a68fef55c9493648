/* Task memory, its cold half: giving blocks back to their creator in batches, and
 * freeing what threads and teams kept (taskmem.h has the hot half). */
#include <stdlib.h>

#include "omp_impl.h"
#include "taskmem.h"

/* Push the blocks this thread holds for another member onto that member's slot. */
void ls_omp_give_back(struct ls_omp_thread *t)
{
    if (!t->give)
        return;
    struct ls_omp_slot *home = t->give_to;
    struct ls_omp_task *head = ls_load_relaxed(&home->returned);
    do /* a stack only pushed to and taken whole: no ABA */
        t->give_tail->next = head;
    while (!__atomic_compare_exchange_n(&home->returned, &head, t->give, true, __ATOMIC_RELEASE,
                                        __ATOMIC_RELAXED));
    t->give = NULL;
    t->n_give = 0;
}

static void free_list(struct ls_omp_task *task)
{
    while (task) {
        struct ls_omp_task *next = task->next;
        free(task);
        task = next;
    }
}

void ls_omp_spares_free(struct ls_omp_thread *t)
{
    free_list(t->spare);
    t->spare = NULL;
    t->n_spare = 0;
}

/* The team is gone: every task of it has ended, so nothing is pushed here any more. */
void ls_omp_returned_free(struct ls_omp_slot *slot)
{
    free_list(slot->returned);
    slot->returned = NULL;
}
