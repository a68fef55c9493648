/* Flat gather barrier: each participant publishes the episode it reached in its own
 * padded flag; participant 0 (the primary) waits for every flag in turn, then
 * publishes the generation word everybody else waits on.
 *
 * Each flag has exactly one writer, so arrival costs no contended RMW; the primary
 * reads n - 1 lines, each transferred once. */
#include "barrier_impl.h"

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
        return lockstep_wait_until(&b->cfg.wait, &b->release.gen, ep, deadline_ns);
    int rc = gather_flags(b, ep, deadline_ns);
    if (rc)
        return rc;
    LS_PERTURB();
    lockstep_wait_publish(&b->cfg.wait, &b->release.gen, ep);
    return 0;
}

int ls_flat_gather(lockstep_barrier_t *b, uint64_t deadline_ns)
{
    return gather_flags(b, ls_slot(b, 0)->ep + 1, deadline_ns);
}
