/* Flat gather barrier: each participant publishes the episode it reached in its own
 * padded flag; participant 0 (the primary) waits for every flag in turn, then
 * publishes the generation word everybody else waits on.
 *
 * Each flag has exactly one writer, so arrival costs no contended RMW; the primary
 * reads n - 1 lines, each transferred once.
 *
 * With 2 participants the generation word sits in participant 1's slot, on the line
 * of its flag, instead of a line of its own: the two words then pass between the same
 * two threads on one line, and each write fetches the line with the other's latest
 * word in it. Two threads handing a word back and forth (scratch program, 2 CPUs of
 * this VM) took 122-132 ns per round trip on one line against 270-290 on two; 2
 * threads, `lockstep_bench_threads flat barrier 2 5`, median of 5 reps, 3 runs each,
 * alternating: 118-124 ns against 318-404 (libgomp 216-239 in the same session);
 * graph 423-432 against 624-659 ns per node, empty regions 269-296 against 324-370.
 * With more participants the others would poll that line too, and every arrival of
 * participant 1 would take it from them: the word keeps its own line there. */
#include "barrier_impl.h"

/* the release word: see above */
static inline lockstep_waitword_t *flat_gen(lockstep_barrier_t *b)
{
    return b->cfg.n == 2 ? &ls_slot(b, 1)->gen : &b->release.gen;
}

void ls_flat_arrive(lockstep_barrier_t *b, unsigned tid)
{
    ls_slot_t *s = ls_slot(b, tid);
    uint32_t ep = ++s->ep;
    LS_PERTURB();
    if (tid != 0)
        lockstep_wait_publish(&b->cfg.wait, &s->flag, ep);
}

static int gather_flags(lockstep_barrier_t *b, uint32_t ep, uint64_t deadline_ns)
{
    for (unsigned i = 1; i < b->cfg.n; i++) {
        int rc = lockstep_wait_until(&b->cfg.wait, &ls_slot(b, i)->flag, ep, deadline_ns);
        if (rc)
            return rc;
    }
    return 0;
}

int ls_flat_wait(lockstep_barrier_t *b, unsigned tid, uint64_t deadline_ns)
{
    uint32_t ep = ls_slot(b, tid)->ep;
    if (tid != 0)
        return lockstep_wait_until(&b->cfg.wait, flat_gen(b), ep, deadline_ns);
    int rc = gather_flags(b, ep, deadline_ns);
    if (rc)
        return rc;
    LS_PERTURB();
    lockstep_wait_publish(&b->cfg.wait, flat_gen(b), ep);
    return 0;
}

int ls_flat_gather(lockstep_barrier_t *b, uint64_t deadline_ns)
{
    return gather_flags(b, ls_slot(b, 0)->ep + 1, deadline_ns);
}
