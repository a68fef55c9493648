/* lockstep/barrier.h — barriers for a fixed set of participants, with split phases.
 *
 * Contract (all algorithms):
 *   - Every write a participant made before it arrived at episode e happens-before every
 *     read any participant makes after its wait for episode e returns.
 *   - No participant's wait for episode e returns before all n participants arrived at e.
 *   - A participant is named by its index tid in [0, n). Its per-episode state lives in
 *     its own padded slot inside the barrier object and is touched only by that
 *     participant (no thread-local storage), so one thread may drive several barriers and
 *     a barrier may live in memory shared between processes: the object holds no
 *     pointers, only offsets, and is relocatable after init.
 *
 * The caller places the object: allocate lockstep_barrier_size(kind, n, fanin) bytes,
 * preferably aligned to LOCKSTEP_CACHELINE (8 is the minimum), and call
 * lockstep_barrier_init. There is nothing to free; lockstep_barrier_destroy only poisons.
 *
 * Algorithms:
 *   CENTRAL — one arrival counter and one release word, on separate cache lines. The
 *             last arriver resets the counter and publishes the next generation.
 *   FLAT    — one arrival flag per participant on its own line; participant 0 (the
 *             primary) checks them all, then publishes one generation word (with 2
 *             participants it shares the other's flag line: one line passes between
 *             the two threads instead of two). When waiting yields the CPU (more
 *             participants than CPUs, or the passive policy), any participant that
 *             finds every flag raised publishes the word, rather than all waiting
 *             for the primary to be scheduled.
 *   TREE    — combining tree of arrival counters with fan-in `fanin` (2..64); the last
 *             arriver at a node climbs to its parent, the last at the root publishes
 *             the generation word. Participant 0 arrives directly at the root.
 *   DISSEM  — dissemination: ceil(log2 n) rounds, in round k participant i signals
 *             (i + 2^k) mod n. No central word; no primary. (With 2 participants
 *             both flags share one line.)
 *   COUNTER — one arrival counter that is never reset: episode e is complete when it
 *             reaches e * n, so the last arrival is itself the release, and waiters
 *             need observe only that one write (CENTRAL's release word costs them one
 *             more cache transfer).
 *   AUTO    — chosen by init from n and the CPUs available: CENTRAL when the
 *             participants outnumber the CPUs (waiters park on a word that changes
 *             once per episode, and one futex wake releases everyone); else COUNTER
 *             up to 8 participants; beyond that DISSEM, or TREE when the params ask
 *             for lockstep_barrier_gather (need_gather).
 * Every wait follows the lockstep_wait_t policy chosen at init (spin, yield, park). */
#ifndef LOCKSTEP_BARRIER_H
#define LOCKSTEP_BARRIER_H

#include <stddef.h>
#include <stdint.h>
#include "lockstep/wait.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum lockstep_barrier_kind {
    LOCKSTEP_BARRIER_AUTO    = 0,
    LOCKSTEP_BARRIER_CENTRAL = 1,
    LOCKSTEP_BARRIER_FLAT    = 2,
    LOCKSTEP_BARRIER_TREE    = 3,
    LOCKSTEP_BARRIER_DISSEM  = 4,
    LOCKSTEP_BARRIER_COUNTER = 5
} lockstep_barrier_kind_t;

#define LOCKSTEP_BARRIER_MAX_PARTICIPANTS 4096u
#define LOCKSTEP_BARRIER_DEFAULT_FANIN 4u

typedef struct lockstep_barrier_params {
    lockstep_barrier_kind_t kind;
    unsigned fanin;                    /* TREE only; 0 = LOCKSTEP_BARRIER_DEFAULT_FANIN */
    lockstep_wait_policy_t wait_policy;
    int process_shared;                /* non-zero: placed in shared memory (futex without PRIVATE) */
    int need_gather;                   /* AUTO must resolve to a kind with a primary */
} lockstep_barrier_params_t;

/* The fixed part of a barrier; per-participant slots and tree nodes follow it at the
 * offsets recorded in cfg. Each member is one padded cache line. */
typedef struct lockstep_barrier {
    struct {
        uint32_t magic;
        uint32_t kind;        /* resolved kind, never AUTO */
        uint32_t n;
        uint32_t fanin;
        uint32_t rounds;      /* DISSEM: ceil(log2 n) */
        uint32_t nnodes;      /* TREE: number of counter nodes (root last) */
        uint32_t slot_stride; /* bytes per participant slot */
        uint32_t off_slots;   /* from the start of the object */
        uint32_t off_nodes;
        uint32_t reserved;
        lockstep_wait_t wait;
        char pad[LOCKSTEP_CACHELINE - 10 * 4 - sizeof(lockstep_wait_t)];
    } cfg;
    struct {
        lockstep_waitword_t gen; /* release word: the number of completed episodes */
        char pad[LOCKSTEP_CACHELINE - sizeof(lockstep_waitword_t)];
    } release;
    struct {
        lockstep_waitword_t count; /* CENTRAL: arrivals in the current episode */
        char pad[LOCKSTEP_CACHELINE - sizeof(lockstep_waitword_t)];
    } arrive;
} lockstep_barrier_t;

/* Defaults: AUTO, default fan-in, default wait policy, process-private. */
lockstep_barrier_params_t lockstep_barrier_params_default(void);

/* Bytes needed for n participants (0 if n or fanin is out of range). The resolved kind
 * of AUTO may need less than this; size for the worst case. */
size_t lockstep_barrier_size(lockstep_barrier_kind_t kind, unsigned n, unsigned fanin);

/* Initialise a barrier of n participants in `size` bytes at b. Not thread-safe: no
 * participant may use b until init returns. Returns 0, or -EINVAL (NULL, misaligned,
 * n == 0 or > LOCKSTEP_BARRIER_MAX_PARTICIPANTS, bad kind or fanin, bad wait policy),
 * -ENOSPC when size is too small. */
int lockstep_barrier_init(lockstep_barrier_t *b, size_t size, unsigned n,
                          const lockstep_barrier_params_t *params);

/* Poison the object so later calls fail with -EINVAL. No participant may be inside. */
void lockstep_barrier_destroy(lockstep_barrier_t *b);

/* Split phase 1: announce that tid has reached the next episode. Never blocks, except
 * that FLAT and DISSEM do part of their gathering in lockstep_barrier_wait instead.
 * Ordering: release — tid's earlier writes are published to every participant whose
 * wait for this episode returns. Returns 0 or -EINVAL. */
int lockstep_barrier_arrive(lockstep_barrier_t *b, unsigned tid);

/* Split phase 2: wait until every participant has arrived at the episode tid last
 * arrived at. Ordering: acquire (see the contract above). Must follow an arrive by the
 * same tid. Returns 0, or -EINVAL. */
int lockstep_barrier_wait(lockstep_barrier_t *b, unsigned tid);

/* lockstep_barrier_wait with a deadline (absolute CLOCK_MONOTONIC ns, 0 = none).
 * Returns -ETIMEDOUT when it passes; calling it again for the same episode resumes
 * the wait (every algorithm's wait is idempotent), which is how a caller interleaves
 * waiting with its own checks, e.g. whether a peer process is still alive. */
int lockstep_barrier_wait_until(lockstep_barrier_t *b, unsigned tid, uint64_t deadline_ns);

/* Both phases. Returns 0 or -EINVAL. */
int lockstep_barrier_arrive_and_wait(lockstep_barrier_t *b, unsigned tid);

/* Primary only (tid 0, CENTRAL, COUNTER, FLAT and TREE): wait until every other participant has
 * arrived at the episode participant 0 will arrive at next, without arriving itself.
 * Participant 0 then arrives last, so its arrive-and-wait releases the episode at once.
 * This is how a fork/join pool pays one episode per region: the gather is the join of
 * one region, participant 0's arrival the release of the next.
 * Ordering: acquire for every other participant's pre-arrival writes.
 * deadline_ns as in lockstep_wait_until. Returns 0, -ETIMEDOUT, -EINVAL, or -ENOTSUP
 * for DISSEM (it has no primary). */
int lockstep_barrier_gather(lockstep_barrier_t *b, uint64_t deadline_ns);

/* The algorithm actually in use (AUTO resolved), or -EINVAL. */
int lockstep_barrier_kind(const lockstep_barrier_t *b);

/* "central", "flat", "tree", "dissem", "counter", "auto"; NULL for an unknown kind. */
const char *lockstep_barrier_kind_name(lockstep_barrier_kind_t kind);

/* Parse a name as printed by lockstep_barrier_kind_name. Returns the kind or -EINVAL. */
int lockstep_barrier_kind_parse(const char *name);

#ifdef __cplusplus
}
#endif

#endif
