/* lockstep/wait.h — how a thread waits: spin, then yield, then park on a futex.
 *
 * A waiter watches one 32-bit word until it reaches a target value. The same word is
 * the futex the waiter parks on, so the store that publishes the value is the store the
 * kernel checks: no wake-up can be lost between "checked" and "asleep".
 *
 * Phases (see lockstep_wait_until):
 *   1. spin  — re-read the word with a CPU pause between reads, for `spin` reads;
 *   2. yield — re-read it around sched_yield(), for `yields` rounds;
 *   3. park  — announce ourselves in `sleepers`, re-check, FUTEX_WAIT on the word.
 * The publisher stores the value and calls FUTEX_WAKE only when `sleepers` is non-zero,
 * so the fast path of a release is one store and one load of the same cache line.
 *
 * Spin budget. A waiter should not park while the thread it waits for may still
 * arrive soon; in particular, when that thread was itself parked and has just been
 * woken, it needs the kernel's wake-up latency before it runs. With a budget below
 * the typical wake-up latency a pair of threads falls into a convoy: each parks just
 * before the other arrives, and every barrier then costs a futex hand-off. So the
 * budget (the library's src/wait/tuning.h) lies above the tail of that latency
 * (`lockstep_bench_threads auto calibrate 1 5` measures it), and a woken partner is
 * almost always met while still spinning. An idle pool spins that long once, then
 * parks. The budget is turned into PAUSE iterations by timing PAUSE once per process.
 *
 * Policy (like OMP_WAIT_POLICY):
 *   active  — spin and yield, never park (lowest latency, burns CPU while idle);
 *   passive — park after a few yields (no spinning);
 *   auto    — spin for the budget, yield, park; but when the participants outnumber
 *             the CPUs this process may use (sched_getaffinity and the cgroup CPU
 *             quota) skip spinning, which would only steal the time slice the awaited
 *             thread needs, and yield longer instead, which gives it that slice.
 * The environment variable LOCKSTEP_WAIT_POLICY (active|passive|auto) chooses the
 * policy wherever the caller passes LOCKSTEP_WAIT_DEFAULT. */
#ifndef LOCKSTEP_WAIT_H
#define LOCKSTEP_WAIT_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Cache-line padding used for every hot word: 128 bytes on x86-64 because the L2
 * adjacent-line prefetcher pulls lines in 128-byte pairs, so two words 64 bytes apart
 * still contend. */
#define LOCKSTEP_CACHELINE 128

typedef enum lockstep_wait_policy {
    LOCKSTEP_WAIT_DEFAULT = 0, /* LOCKSTEP_WAIT_POLICY from the environment, else auto */
    LOCKSTEP_WAIT_AUTO    = 1,
    LOCKSTEP_WAIT_ACTIVE  = 2,
    LOCKSTEP_WAIT_PASSIVE = 3
} lockstep_wait_policy_t;

/* A resolved policy: plain data, safe to place in memory shared between processes. */
typedef struct lockstep_wait {
    uint32_t spin;    /* PAUSE iterations in phase 1 */
    uint32_t yields;  /* sched_yield rounds in phase 2 */
    uint32_t flags;   /* LOCKSTEP_WAIT_F_* */
    uint32_t policy;  /* the resolved lockstep_wait_policy_t (never DEFAULT) */
} lockstep_wait_t;

#define LOCKSTEP_WAIT_F_SHARED 1u /* the words live in memory shared between processes */
#define LOCKSTEP_WAIT_F_NOPARK 2u /* never park (active policy) */
#define LOCKSTEP_WAIT_F_ASYM   4u /* publish with a plain store; parkers use membarrier
                                     (with F_SHARED: its global command, which fences
                                     only processes registered for it; lockstep_wait_init
                                     never sets both, lockstep_comm does when all its
                                     ranks are registered) */

/* A word to wait on and the count of its parked waiters. Keep both on one line. */
typedef struct lockstep_waitword {
    uint32_t value;
    uint32_t sleepers;
} lockstep_waitword_t;

/* Resolve `policy` for `participants` waiters. process_shared != 0 when the words will
 * live in memory shared between processes. Returns 0, or -EINVAL for a NULL w, an
 * unknown policy, or an unparsable LOCKSTEP_WAIT_POLICY. */
int lockstep_wait_init(lockstep_wait_t *w, lockstep_wait_policy_t policy,
                       unsigned participants, int process_shared);

/* Wait until (int32_t)(ww->value - target) >= 0, i.e. the word has reached target in
 * wrap-around order. deadline_ns is an absolute CLOCK_MONOTONIC time, 0 for none.
 * Ordering: acquire — everything the publisher wrote before the lockstep_wait_publish
 * that made the value reach target is visible after this returns 0.
 * Returns 0, -ETIMEDOUT at the deadline, -EINVAL for NULL arguments. */
int lockstep_wait_until(const lockstep_wait_t *w, lockstep_waitword_t *ww,
                        uint32_t target, uint64_t deadline_ns);

/* Store value into ww->value and wake every parked waiter.
 * Ordering: release — the caller's earlier writes are visible to any waiter that
 * observes this value. (The store is sequentially consistent where membarrier is
 * unavailable, and for process-shared words unless every process that uses them has
 * agreed on the global membarrier, as lockstep_comm's ranks do; see wait.c.) */
void lockstep_wait_publish(const lockstep_wait_t *w, lockstep_waitword_t *ww, uint32_t value);

/* Wake the waiters parked on ww without storing (after an RMW on ww->value that the
 * caller made itself). Cheap when nobody sleeps: one load. */
void lockstep_wait_wake(const lockstep_wait_t *w, lockstep_waitword_t *ww);

/* CPUs this process may run on: the sched_getaffinity mask, capped by the cgroup
 * (v2 cpu.max or v1 cfs quota) CPU quota rounded up. Always >= 1. Cached after the
 * first call. */
int lockstep_cpus_available(void);

/* CLOCK_MONOTONIC now, in nanoseconds. */
uint64_t lockstep_now_ns(void);

#ifdef __cplusplus
}
#endif

#endif
