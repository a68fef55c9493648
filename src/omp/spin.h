/* The runtime's short waits: whether a waiter may spin, spin-then-yield, and the
 * spinlock for a few stores' worth of holding. Part of omp_impl.h, which includes it
 * last (it reads ls_omp_g); the long waits are the barrier's (src/wait/loop.h). */
#ifndef LOCKSTEP_OMP_SPIN_H
#define LOCKSTEP_OMP_SPIN_H

/* Spin only while the process's running threads (every team inside a region, every
 * live pool: the worker core's budget) fit the CPUs: past that, a spinner takes the
 * time slice the thread it waits for needs. */
static inline bool ls_omp_may_spin(void)
{
    return ls_budget_running() <= ls_omp_g.n_cpus;
}

/* Spin briefly (within the budget), then yield, until cond holds (short waits only). */
#define LS_OMP_SPIN_UNTIL(cond)                                                         \
    do {                                                                                \
        unsigned ls_spin_ = ls_omp_may_spin() ? LS_WAIT_SHORT_SPIN : 0u;                \
        for (unsigned ls_i_ = 0; !(cond); ls_i_++) {                                    \
            if (ls_i_ < ls_spin_)                                                       \
                ls_cpu_relax();                                                         \
            else                                                                        \
                ls_yield();                                                          \
        }                                                                               \
    } while (0)

/* A spinlock for a few stores' worth of holding (a task list, a deque's top): a mutex's
 * sleep and wake would cost microseconds. acquire/release: each holder sees the last
 * one's changes. */
static inline void ls_omp_spin_lock(uint32_t *lock)
{
    while (__atomic_exchange_n(lock, 1u, __ATOMIC_ACQUIRE) != 0)
        LS_OMP_SPIN_UNTIL(ls_load_relaxed(lock) == 0);
}

static inline bool ls_omp_spin_trylock(uint32_t *lock)
{
    return __atomic_exchange_n(lock, 1u, __ATOMIC_ACQUIRE) == 0;
}

static inline void ls_omp_spin_unlock(uint32_t *lock)
{
    ls_store_release(lock, 0u);
}

#endif
