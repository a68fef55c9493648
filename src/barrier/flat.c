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
 * word in it: one line's round trip instead of two. With more participants the others would poll that line too, and every arrival of
 * participant 1 would take it from them: the word keeps its own line there.
 *
 * When waiting means yielding the CPU (no spin: participants outnumber the CPUs, or
 * the passive policy), the primary may be descheduled when the last flag goes up, and
 * everyone would wait for it to run again just to publish the word. So the primary
 * raises a flag too (always: a store to its own line, which nobody reads otherwise),
 * and there a participant other than the primary that finds every flag raised once
 * its own is up publishes the word itself. The primary publishes it again, the same
 * value, once it runs; if two arriving at once each miss the other's flag, so that
 * no one else does, the primary's is the release. The word cannot go backwards:
 * whoever publishes episode e saw every flag at e, so no one has arrived at e + 1
 * before its publish, which comes before its own next arrival. A primary that gathers
 * (lockstep_barrier_gather) has not raised its flag, so no one else releases that
 * episode. Regions (the pool's fork/join, where the primary gathers) are unchanged. */
#include "barrier_impl.h"

/* the release word: see above */
static inline lockstep_waitword_t *flat_gen(lockstep_barrier_t *b)
{
    return b->cfg.n == 2 ? &ls_slot(b, 1)->gen : &b->release.gen;
}

/* every flag, the primary's too, at ep or past it; from tid + 1 on, where the
 * participants still missing most likely are */
static int all_arrived(lockstep_barrier_t *b, unsigned tid, uint32_t ep)
{
    unsigned n = b->cfg.n;
    for (unsigned k = 1; k < n; k++) {
        unsigned i = tid + k < n ? tid + k : tid + k - n;
        if (!ls_reached(ls_load_acquire(&ls_slot(b, i)->flag.value), ep))
            return 0;
    }
    return 1;
}

void ls_flat_arrive(lockstep_barrier_t *b, unsigned tid)
{
    ls_slot_t *s = ls_slot(b, tid);
    uint32_t ep = ++s->ep;
    LS_PERTURB();
    lockstep_wait_publish(&b->cfg.wait, &s->flag, ep);
    if (tid != 0 && b->cfg.wait.spin == 0 && all_arrived(b, tid, ep))
        lockstep_wait_publish(&b->cfg.wait, flat_gen(b), ep);
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
