/* Centralized barrier: an arrival counter and a release word on separate lines.
 *
 * Episode e (1-based, each participant counts its own):
 *   1. every participant adds 1 to count;
 *   2. the one that brings it to n resets count to 0, then publishes gen = e;
 *   3. the others wait until gen reaches e.
 * The reset in 2 cannot race with episode e+1's increments: nobody starts e+1 before
 * seeing gen = e, and the publish is a release that orders the reset before it. */
#include "barrier_impl.h"

void ls_central_arrive(lockstep_barrier_t *b, unsigned tid)
{
    ls_slot_t *s = ls_slot(b, tid);
    uint32_t ep = ++s->ep;
    uint32_t n = b->cfg.n;
    LS_PERTURB();
    /* seq_cst RMW: acquire of earlier arrivals' writes, release of ours, and ordered
     * before the sleepers check in lockstep_wait_wake (gather protocol) */
    uint32_t old = ls_fetch_add(&b->arrive.count.value, 1u, __ATOMIC_SEQ_CST);
    if (old == n - 1) {
        ls_store_relaxed(&b->arrive.count.value, 0u); /* ordered by the publish below */
        LS_PERTURB();
        lockstep_wait_publish(&b->cfg.wait, &b->release.gen, ep);
    } else if (old + 2 == n) {
        /* everyone but one has arrived: a primary may be parked in gather */
        lockstep_wait_wake(&b->cfg.wait, &b->arrive.count);
    }
}

int ls_central_wait(lockstep_barrier_t *b, unsigned tid, uint64_t deadline_ns)
{
    return lockstep_wait_until(&b->cfg.wait, &b->release.gen, ls_slot(b, tid)->ep, deadline_ns);
}

int ls_central_gather(lockstep_barrier_t *b, uint64_t deadline_ns)
{
    /* count only climbs to n - 1 until participant 0 arrives, so "reached" is exact */
    return lockstep_wait_until(&b->cfg.wait, &b->arrive.count, b->cfg.n - 1, deadline_ns);
}
