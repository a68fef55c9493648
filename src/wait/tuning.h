/* Tuned constants of waiting, each with its reason: the one place they live for
 * everything in lockstep that waits (the pool and the barriers, the OpenMP runtime,
 * the collectives). LOCKSTEP_WAIT_POLICY, and OMP_WAIT_POLICY and GOMP_SPINCOUNT in
 * the OpenMP runtime, override the budgets. */
#ifndef LOCKSTEP_WAIT_TUNING_H
#define LOCKSTEP_WAIT_TUNING_H

/* Spin budget before a waiter yields, then parks: above the tail of the kernel's
 * wake-up latency (`lockstep_bench_threads auto calibrate 1 5`), so a partner just
 * woken is met while still spinning instead of both falling into a park/wake convoy.
 * Turned into PAUSE rounds by timing PAUSE once per process. */
#define LS_WAIT_SPIN_NS 40000u

/* Yields before parking */
#define LS_WAIT_YIELDS 16u

/* Yields before parking when the participants outnumber the CPUs (auto policy): a
 * yield hands the CPU straight to a thread being waited for, which a park/wake pair
 * does only a wake-up latency later. */
#define LS_WAIT_YIELDS_OVERSUBSCRIBED 64u

/* The participants outnumber the CPUs, and every one a waiter still misses last ran on
 * another CPU: it is most likely running there now, and a yield would hand this CPU
 * to a thread that only waits too (a switch away and often one back). So the waiter
 * spins up to this long first (ls_wait_elsewhere_spins), in case one has moved here
 * since; a few context switches' worth. */
#define LS_WAIT_ELSEWHERE_NS 64000u

/* PAUSE rounds a short wait (an ordered turn, a child task running elsewhere, a
 * work-share slot, a lock held for a few stores) spins before it yields between
 * checks: a holder on another CPU ends within that. */
#define LS_WAIT_SHORT_SPIN 256u

/* The longest gap between two looks of a waiter for a contended lock (the gaps double
 * from one PAUSE): a holder that takes the lock again at once keeps its line, and a
 * waiter comes late by at most this, or about half what it has waited. */
#define LS_WAIT_BACKOFF_NS 2000u

/* PAUSE rounds a taskwait with nothing to run waits for its count before it looks for
 * tasks again: a child running elsewhere may queue descendants it can take. */
#define LS_WAIT_RESCAN_SPIN 32u

#endif
