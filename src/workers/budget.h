#ifndef LOCKSTEP_WORKERS_BUDGET_H
#define LOCKSTEP_WORKERS_BUDGET_H

#include <stdbool.h>

/* The worker core's budget of running threads (workers.h, budget.c): one count per
 * process of the threads that may be running at once, every live pool's participants
 * and the OpenMP threads inside regions. A waiter spins only while the
 * count fits the CPUs (past that it would take the time slice of the thread it waits
 * for). OMP_THREAD_LIMIT bounds the OpenMP share alone (a contention group is
 * OpenMP's). */
int ls_budget_running(void);
int ls_budget_pools(void); /* the live pools' participants alone */
void ls_budget_pool_add(int delta);
/* Reserve up to want OpenMP threads within limit; a nested region's master is counted
 * already. Returns how many were granted (at least 1). */
int ls_budget_omp_reserve(int want, bool nested, int limit);
void ls_budget_omp_add(int delta);
void ls_budget_omp_reset(void); /* a forked child: no OpenMP thread runs there */

#endif
