/* A team's bell and its task counts: what a thread that makes a waiter's condition
 * true (an arrival, a task queued, the last pending task finishing) and the waiters
 * share. Inline: every arrival rings and every barrier counts (bell.c has the rest;
 * barrier.c the parking protocol). */
#ifndef LOCKSTEP_OMP_BELL_H
#define LOCKSTEP_OMP_BELL_H

#include <limits.h>

#include "omp_impl.h"

/* The caller made a waiter's condition true with a seq_cst RMW (an arrival, a push, a
 * finished task), ordered before this seq_cst read of sleepers. */
static inline void ls_omp_ring(struct ls_omp_team *team)
{
    if (ls_load_seqcst(&team->bell.sleepers) != 0) {
        ls_fetch_add(&team->bell.value, 1u, __ATOMIC_RELEASE);
        ls_futex_wake(&team->bell.value, INT_MAX, 1);
    }
}

/* Counters only grow, and a task is counted as created before anything can count it
 * completed (its creator's store is ordered before the push that publishes it). All
 * completed counts are read before all created ones, so equal sums mean that, at the
 * moment between, every task created had completed: no task was running to create
 * more, and no member outside the barrier does. Every slot the pool has counts, not
 * only the team's: one slot's counts need not match (a member counts the tasks it ran
 * where another created them), only the sums do; and the master rewrites team->n at
 * a fork while a worker at the join may still count a task. */
static inline bool ls_omp_no_pending(const struct ls_omp_team *team)
{
    uint32_t n = ls_load_acquire(&team->n_slots);
    uint64_t completed = ls_load_seqcst(&team->completed_elsewhere);
    for (uint32_t i = 0; i < n; i++)
        completed += ls_load_seqcst(&team->slots[i]->completed);
    uint64_t created = ls_load_seqcst(&team->created_elsewhere);
    for (uint32_t i = 0; i < n; i++)
        created += ls_load_seqcst(&team->slots[i]->created);
    return created == completed;
}

#endif
