/* Internal helpers shared by the library's sources. Not installed. */
#ifndef LOCKSTEP_INTERNAL_H
#define LOCKSTEP_INTERNAL_H

#include <stdint.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define ls_cpu_relax() _mm_pause()
#elif defined(__aarch64__)
#define ls_cpu_relax() __asm__ __volatile__("yield" ::: "memory")
#else
#define ls_cpu_relax() __asm__ __volatile__("" ::: "memory")
#endif

/* Atomics on plain integers, so that public structs need no _Atomic (C++ headers). */
#define ls_load_relaxed(p)     __atomic_load_n((p), __ATOMIC_RELAXED)
#define ls_load_acquire(p)     __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define ls_load_seqcst(p)      __atomic_load_n((p), __ATOMIC_SEQ_CST)
#define ls_store_relaxed(p, v) __atomic_store_n((p), (v), __ATOMIC_RELAXED)
#define ls_store_release(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)
#define ls_store_seqcst(p, v)  __atomic_store_n((p), (v), __ATOMIC_SEQ_CST)
#define ls_fetch_add(p, v, mo) __atomic_fetch_add((p), (v), (mo))
#define ls_exchange(p, v, mo)  __atomic_exchange_n((p), (v), (mo))

#define LS_LIKELY(x)   __builtin_expect(!!(x), 1)
#define LS_UNLIKELY(x) __builtin_expect(!!(x), 0)

/* Has a wrap-around counter reached target? */
static inline int ls_reached(uint32_t value, uint32_t target)
{
    return (int32_t)(value - target) >= 0;
}

/* LOCKSTEP_ISA's cap on the vector kernels (reductions, the loader's conversions):
 * 0 base, 1 avx2, 2 avx512; unset: 2; -1 with *bad (if bad) pointing at a value it
 * does not know */
int ls_isa_cap(const char **bad);

/* wait.c's protocol with the futex word and its sleeper count passed separately, so
 * that a hot word can keep its sleeper count on another cache line (the publisher's
 * read of it then hits a line nobody writes). Every waiter and waker of one value
 * word must name the same sleepers word. */
struct lockstep_wait;
int ls_wait_until_split(const struct lockstep_wait *w, uint32_t *value, uint32_t *sleepers,
                        uint32_t target, uint64_t deadline_ns);
void ls_wait_wake_split(const struct lockstep_wait *w, uint32_t *value, uint32_t *sleepers);

/* The one rule for a waiter when the participants outnumber the CPUs and every one it
 * still misses last ran on another CPU (most likely running there now): spin this
 * many PAUSE rounds (LS_WAIT_ELSEWHERE_NS, src/wait/tuning.h) before yielding, as a
 * yield would hand this CPU to a thread that only waits too. Each waiter knows where
 * its peers ran (the OpenMP team's slots, the communicator's control blocks). */
uint32_t ls_wait_elsewhere_spins(void);
/* PAUSE rounds that take about ns (PAUSE timed once per process), at least 64 */
uint32_t ls_wait_pauses_for(uint64_t ns);

/* Register this process (once) for membarrier's global expedited command: 1 when it
 * is. A process-shared lockstep_wait_t may then carry LOCKSTEP_WAIT_F_ASYM (publish
 * with a plain store; a parker's membarrier fences every registered process), but only
 * if every process that publishes or parks on its words is registered too: one that is
 * not would publish without a fence the parker can force. lockstep_comm agrees on it
 * across its ranks at create (src/comm/create.c). */
int ls_wait_global_fences(void);

/* fork(2): ls_fork_gen() is 0 in the process that loaded the library and one more in
 * each child forked after ls_fork_watch() (pthread_atfork, registered once; 0 or
 * -ENOMEM). An object that owns threads or a rank watches, records the generation at
 * creation, and finds out with one load whether it is now a child's copy (fork.c). */
extern unsigned ls_fork_generation;
int ls_fork_watch(void);
static inline unsigned ls_fork_gen(void)
{
    return ls_load_relaxed(&ls_fork_generation);
}

/* 1 when the environment variable is set to anything but "" or "0" (the LOCKSTEP_NO_*
 * switches; common/env.c) */
int ls_env_set(const char *name);

/* Perturbation builds (-DLOCKSTEP_PERTURB) yield at protocol points to shake out races
 * that a quiet schedule would hide. */
#ifdef LOCKSTEP_PERTURB
void ls_perturb(void);
#define LS_PERTURB() ls_perturb()
#else
#define LS_PERTURB() ((void)0)
#endif

#endif
