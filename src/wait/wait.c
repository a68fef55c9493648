/* Waiting: spin -> yield -> futex park. The protocol that makes parking safe:
 *
 *   waiter                                  publisher
 *   1. sleepers += 1        (seq_cst)       a. value = v          (seq_cst)
 *   2. read value           (seq_cst)       b. read sleepers      (seq_cst)
 *   3. FUTEX_WAIT(value, seen)              c. if sleepers: FUTEX_WAKE(all)
 *   4. sleepers -= 1
 *
 * Sequential consistency orders 1 before 2 and a before b, so either the waiter sees v
 * at 2 (and does not sleep) or the publisher sees the waiter at b (and wakes it);
 * FUTEX_WAIT itself re-checks value == seen in the kernel, closing the gap between 2
 * and 3.
 *
 * Asymmetric fences. A seq_cst store is an XCHG on x86: it stalls the publisher until
 * it owns the line the waiters are spinning on, one extra cache transfer per release.
 * Where the kernel offers membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED), the fast side
 * (the publisher) uses a plain release store and only a compiler fence before reading
 * sleepers, and the slow side (a waiter about to park, which is about to pay a
 * context switch anyway) calls membarrier between 1 and 2. membarrier runs a full
 * barrier on every CPU running a thread of this process, so either the publisher's
 * store is visible to the waiter's read at 2, or the waiter's increment at 1 is
 * visible to the publisher's read at b (the scheme userspace-rcu uses for its readers).
 * PRIVATE_EXPEDITED covers one process only. Across processes the global command
 * (MEMBARRIER_CMD_GLOBAL_EXPEDITED) does the same for every process registered for it,
 * so a process-shared word may use the scheme only when every process on both sides
 * is registered: lockstep_wait_init keeps the seq_cst pair for such words, and
 * lockstep_comm switches its ranks' waits over once all of them have registered
 * (ls_wait_global_fences; src/comm/create.c). */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <linux/membarrier.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "lockstep/wait.h"
#include "../internal.h"
#include "kernel.h"
#include "tuning.h"

uint64_t lockstep_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#ifdef LOCKSTEP_PERTURB
void ls_perturb(void)
{
    /* A cheap per-thread xorshift: yield on about one protocol point in eight. */
    static __thread uint32_t s;
    if (s == 0)
        s = (uint32_t)(uintptr_t)&s | 1u;
    s ^= s << 13;
    s ^= s >> 17;
    s ^= s << 5;
    if ((s & 7u) == 0)
        ls_yield();
}
#endif

/* Register this process, once, for membarrier's command cmd (with its registration
 * command reg). *state caches the answer: 1 registered, -1 unavailable, 0 before the
 * first try. */
static int membarrier_registered(int *state, int cmd, int reg)
{
    int st = __atomic_load_n(state, __ATOMIC_ACQUIRE);
    if (st == 0) {
        long q = syscall(SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
        st = q > 0 && (q & cmd) && syscall(SYS_membarrier, reg, 0, 0) == 0 ? 1 : -1;
        __atomic_store_n(state, st, __ATOMIC_RELEASE);
    }
    return st > 0;
}

/* PRIVATE_EXPEDITED: a full barrier on every CPU that runs a thread of this process */
static int asym_fences(void)
{
    static int state;
    return membarrier_registered(&state, MEMBARRIER_CMD_PRIVATE_EXPEDITED,
                                 MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED);
}

/* The same across processes: GLOBAL_EXPEDITED runs a full barrier on every CPU that
 * runs a thread of a registered process */
int ls_wait_global_fences(void)
{
    static int state;
    return membarrier_registered(&state, MEMBARRIER_CMD_GLOBAL_EXPEDITED,
                                 MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED);
}

/* ---- policy ---------------------------------------------------------------------- */

/* PAUSE iterations that take ns, from PAUSE timed once per process. */
uint32_t ls_wait_pauses_for(uint64_t ns)
{
    enum { PROBE = 2000 };
    static uint64_t probe_ns; /* PROBE pauses took this long, the best of three */
    uint64_t best = __atomic_load_n(&probe_ns, __ATOMIC_RELAXED);
    if (!best) {
        best = UINT64_MAX;
        for (int rep = 0; rep < 3; rep++) { /* a preemption only lengthens */
            uint64_t t0 = lockstep_now_ns();
            for (int i = 0; i < PROBE; i++)
                ls_cpu_relax();
            uint64_t dt = lockstep_now_ns() - t0;
            if (dt < best)
                best = dt;
        }
        if (best == 0)
            best = 1;
        __atomic_store_n(&probe_ns, best, __ATOMIC_RELAXED);
    }
    uint64_t n = ns * PROBE / best;
    return (uint32_t)(n < 64 ? 64 : n > 1000000 ? 1000000 : n);
}

static uint32_t spin_iterations(void)
{
    return ls_wait_pauses_for(LS_WAIT_SPIN_NS);
}

uint32_t ls_wait_elsewhere_spins(void)
{
    return ls_wait_pauses_for(LS_WAIT_ELSEWHERE_NS);
}

static int policy_from_env(lockstep_wait_policy_t *out)
{
    const char *s = getenv("LOCKSTEP_WAIT_POLICY");
    if (!s || !*s) {
        *out = LOCKSTEP_WAIT_AUTO;
        return 0;
    }
    if (strcasecmp(s, "auto") == 0)
        *out = LOCKSTEP_WAIT_AUTO;
    else if (strcasecmp(s, "active") == 0)
        *out = LOCKSTEP_WAIT_ACTIVE;
    else if (strcasecmp(s, "passive") == 0)
        *out = LOCKSTEP_WAIT_PASSIVE;
    else
        return -EINVAL;
    return 0;
}

int lockstep_wait_init(lockstep_wait_t *w, lockstep_wait_policy_t policy,
                       unsigned participants, int process_shared)
{
    if (!w)
        return -EINVAL;
    if (policy == LOCKSTEP_WAIT_DEFAULT) {
        int rc = policy_from_env(&policy);
        if (rc)
            return rc;
    }
    memset(w, 0, sizeof *w);
    w->flags = process_shared ? LOCKSTEP_WAIT_F_SHARED : (asym_fences() ? LOCKSTEP_WAIT_F_ASYM : 0);
    switch (policy) {
    case LOCKSTEP_WAIT_ACTIVE:
        w->spin = spin_iterations();
        w->yields = LS_WAIT_YIELDS;
        w->flags |= LOCKSTEP_WAIT_F_NOPARK;
        break;
    case LOCKSTEP_WAIT_PASSIVE:
        w->spin = 0;
        w->yields = 2;
        break;
    case LOCKSTEP_WAIT_AUTO:
        if (participants > (unsigned)lockstep_cpus_available()) {
            w->spin = 0;
            w->yields = LS_WAIT_YIELDS_OVERSUBSCRIBED;
        } else {
            w->spin = spin_iterations();
            w->yields = LS_WAIT_YIELDS;
        }
        break;
    default:
        return -EINVAL;
    }
    w->policy = (uint32_t)policy;
    return 0;
}

/* ---- waiting ---------------------------------------------------------------------- */

static int park(const lockstep_wait_t *w, uint32_t *value, uint32_t *sleepers, uint32_t target,
                uint64_t deadline_ns)
{
    int process_private = !(w->flags & LOCKSTEP_WAIT_F_SHARED);
    for (;;) {
        struct timespec ts, *tsp = NULL;
        if (deadline_ns) {
            uint64_t now = lockstep_now_ns();
            if (now >= deadline_ns)
                return -ETIMEDOUT;
            uint64_t left = deadline_ns - now;
            ts.tv_sec = (time_t)(left / 1000000000ull);
            ts.tv_nsec = (long)(left % 1000000000ull);
            tsp = &ts;
        }
        ls_fetch_add(sleepers, 1u, __ATOMIC_SEQ_CST);           /* step 1 */
        if (w->flags & LOCKSTEP_WAIT_F_ASYM) /* orders 1 before any publisher's read of sleepers */
            syscall(SYS_membarrier,
                    (w->flags & LOCKSTEP_WAIT_F_SHARED) ? MEMBARRIER_CMD_GLOBAL_EXPEDITED
                                                        : MEMBARRIER_CMD_PRIVATE_EXPEDITED,
                    0, 0);
        uint32_t seen = ls_load_seqcst(value);                  /* step 2 */
        if (!ls_reached(seen, target))
            ls_futex_wait(value, seen, tsp, process_private);   /* step 3 */
        ls_fetch_add(sleepers, (uint32_t)-1, __ATOMIC_RELAXED);
        if (ls_reached(ls_load_acquire(value), target))
            return 0;
    }
}

int ls_wait_until_split(const lockstep_wait_t *w, uint32_t *value, uint32_t *sleepers,
                        uint32_t target, uint64_t deadline_ns)
{
    if (ls_reached(ls_load_acquire(value), target))
        return 0;
    for (uint32_t i = 0; i < w->spin; i++) {
        ls_cpu_relax();
        if (ls_reached(ls_load_acquire(value), target))
            return 0;
    }
    for (uint32_t round = 0;; round++) {
        for (uint32_t i = 0; i < w->yields; i++) {
            ls_yield();
            if (ls_reached(ls_load_acquire(value), target))
                return 0;
        }
        if (deadline_ns && lockstep_now_ns() >= deadline_ns)
            return ls_reached(ls_load_acquire(value), target) ? 0 : -ETIMEDOUT;
        if (!(w->flags & LOCKSTEP_WAIT_F_NOPARK))
            return park(w, value, sleepers, target, deadline_ns);
        /* active: keep spinning, with a deadline check after every round of yields */
        for (uint32_t i = 0; i < w->spin; i++) {
            ls_cpu_relax();
            if (ls_reached(ls_load_acquire(value), target))
                return 0;
        }
    }
}

void ls_wait_wake_split(const lockstep_wait_t *w, uint32_t *value, uint32_t *sleepers)
{
    uint32_t n;
    if (w->flags & LOCKSTEP_WAIT_F_ASYM) {
        /* the parking side's membarrier supplies the store->load ordering; we only
         * keep the compiler from hoisting this read above the caller's store */
        __atomic_signal_fence(__ATOMIC_SEQ_CST);
        n = ls_load_relaxed(sleepers);
    } else {
        /* seq_cst: must not be ordered before the caller's store/RMW of value */
        n = ls_load_seqcst(sleepers);
    }
    if (n != 0) {
        ls_futex_wake(value, INT_MAX, !(w->flags & LOCKSTEP_WAIT_F_SHARED));
    }
}

int lockstep_wait_until(const lockstep_wait_t *w, lockstep_waitword_t *ww,
                        uint32_t target, uint64_t deadline_ns)
{
    if (LS_UNLIKELY(!w || !ww))
        return -EINVAL;
    return ls_wait_until_split(w, &ww->value, &ww->sleepers, target, deadline_ns);
}

void lockstep_wait_wake(const lockstep_wait_t *w, lockstep_waitword_t *ww)
{
    ls_wait_wake_split(w, &ww->value, &ww->sleepers);
}

void lockstep_wait_publish(const lockstep_wait_t *w, lockstep_waitword_t *ww, uint32_t value)
{
    if (w->flags & LOCKSTEP_WAIT_F_ASYM)
        ls_store_release(&ww->value, value); /* step a: release of everything before it */
    else
        ls_store_seqcst(&ww->value, value);  /* step a, ordered before b by itself */
    lockstep_wait_wake(w, ww);               /* steps b and c */
}
