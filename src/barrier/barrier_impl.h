/* Layout shared by the barrier algorithms. Not installed.
 *
 *   [lockstep_barrier_t: cfg line | release line | arrive line]
 *   [slot 0] ... [slot n-1]        slot_stride bytes each, owned by participant i
 *   [node 0] ... [node nnodes-1]   TREE only, one line each, root last
 *
 * A slot's first line holds the participant's episode counter (written only by it),
 * its tree leaf, and its FLAT arrival flag (and, in slot 1 of a 2-participant FLAT,
 * the release word: flat.c). DISSEM adds one line per round holding the flag that
 * round's partner sets (with 2 participants both flags lie on slot 0's: dissem.c).
 * Everything is addressed by offset, never by pointer. */
#ifndef LOCKSTEP_BARRIER_IMPL_H
#define LOCKSTEP_BARRIER_IMPL_H

#include "lockstep/barrier.h"
#include "../internal.h"

#define LS_BARRIER_MAGIC 0x6c736272u /* "lsbr" */
#define LS_NODE_NONE UINT32_MAX

typedef struct ls_slot {
    uint32_t ep;              /* episodes this participant has arrived at */
    uint32_t leaf;            /* TREE: node it arrives at */
    uint32_t done;            /* COUNTER: the last episode this participant completed */
    lockstep_waitword_t flag; /* FLAT: the last episode it arrived at */
    lockstep_waitword_t gen;  /* FLAT with 2 participants, slot 1: the release word */
} ls_slot_t;

typedef struct ls_node {
    lockstep_waitword_t count; /* arrivals at this node in the current episode */
    uint32_t expected;         /* arrivals that complete the node */
    uint32_t parent;           /* LS_NODE_NONE at the root */
} ls_node_t;

static inline ls_slot_t *ls_slot(lockstep_barrier_t *b, unsigned tid)
{
    return (ls_slot_t *)(void *)((char *)b + b->cfg.off_slots + (size_t)tid * b->cfg.slot_stride);
}

/* where participant tid's round-k flag lies: its slot's line k + 1, except with 2
 * participants (one round), whose two flags lie side by side on participant 0's (see
 * dissem.c) */
static inline lockstep_waitword_t *ls_dissem_flag(lockstep_barrier_t *b, unsigned tid, unsigned round)
{
    if (b->cfg.n == 2)
        return (lockstep_waitword_t *)(void *)((char *)ls_slot(b, 0) + LOCKSTEP_CACHELINE) + tid;
    return (lockstep_waitword_t *)(void *)((char *)ls_slot(b, tid) + (size_t)(round + 1) * LOCKSTEP_CACHELINE);
}

static inline ls_node_t *ls_node(lockstep_barrier_t *b, uint32_t i)
{
    return (ls_node_t *)(void *)((char *)b + b->cfg.off_nodes + (size_t)i * LOCKSTEP_CACHELINE);
}

/* Per-algorithm entry points; arguments are already validated. */
void ls_central_arrive(lockstep_barrier_t *b, unsigned tid);
int ls_central_wait(lockstep_barrier_t *b, unsigned tid, uint64_t deadline_ns);
int ls_central_gather(lockstep_barrier_t *b, uint64_t deadline_ns);

void ls_counter_arrive(lockstep_barrier_t *b, unsigned tid);
int ls_counter_wait(lockstep_barrier_t *b, unsigned tid, uint64_t deadline_ns);
int ls_counter_gather(lockstep_barrier_t *b, uint64_t deadline_ns);

void ls_flat_arrive(lockstep_barrier_t *b, unsigned tid);
int ls_flat_wait(lockstep_barrier_t *b, unsigned tid, uint64_t deadline_ns);
int ls_flat_gather(lockstep_barrier_t *b, uint64_t deadline_ns);

/* lockstep_barrier_init for n participants whose waits share the CPUs with `others`
 * threads already running (the pool: the worker core's budget) */
int ls_barrier_init_among(lockstep_barrier_t *b, size_t size, unsigned n,
                          const lockstep_barrier_params_t *params, unsigned others);

void ls_tree_arrive(lockstep_barrier_t *b, unsigned tid);
int ls_tree_wait(lockstep_barrier_t *b, unsigned tid, uint64_t deadline_ns);
int ls_tree_gather(lockstep_barrier_t *b, uint64_t deadline_ns);
/* Number of nodes for n participants at this fan-in; fills nodes/slots when b != NULL. */
uint32_t ls_tree_build(lockstep_barrier_t *b, unsigned n, unsigned fanin);

void ls_dissem_arrive(lockstep_barrier_t *b, unsigned tid);
int ls_dissem_wait(lockstep_barrier_t *b, unsigned tid, uint64_t deadline_ns);
unsigned ls_dissem_rounds(unsigned n);

#endif
