/* Counter barrier: one arrival counter that is never reset, so the arrival that
 * completes an episode is also its release (CENTRAL keeps a separate release word).
 *
 * Episode e (1-based, each participant counts its own) is complete when the counter
 * reaches e * n (mod 2^32, compared in wrap-around order; the counter moves by exactly
 * n per episode, so this holds for any n). Each participant adds 1 and waits for e * n
 * on the same word. Against a separate release word this saves the release store and
 * the extra transfer it costs the waiters: the last arriver's add is the only write
 * they must observe. The primary's gather waits for e * n - 1 instead.
 *
 * Two cache misses are kept off the path:
 * - the counter's sleeper count lives on the (otherwise unused) release line, not
 *   next to the counter: the adder's check for sleepers right after its add used to
 *   miss whenever the other thread's add had taken the line in between;
 * - the arrival that completes the episode records it in its own slot, and its wait
 *   returns from there without reading the counter line again. Its add read every
 *   earlier add of the episode (a chain of RMWs), so it already synchronizes with
 *   all of them. */
#include "barrier_impl.h"

static inline uint32_t *counter_sleepers(lockstep_barrier_t *b)
{
    return &b->release.gen.sleepers;
}

void ls_counter_arrive(lockstep_barrier_t *b, unsigned tid)
{
    ls_slot_t *s = ls_slot(b, tid);
    uint32_t ep = ++s->ep;
    uint32_t n = b->cfg.n, target = ep * n;
    LS_PERTURB();
    /* seq_cst RMW: acquire of earlier arrivals' writes, release of ours (the final add
     * of an episode releases everybody), and ordered before the sleepers check */
    uint32_t now = ls_fetch_add(&b->arrive.count.value, 1u, __ATOMIC_SEQ_CST) + 1u;
    if (now == target)
        s->done = ep;
    if (now == target || now == target - 1u) /* everybody arrived, or all but the primary */
        ls_wait_wake_split(&b->cfg.wait, &b->arrive.count.value, counter_sleepers(b));
}

int ls_counter_wait(lockstep_barrier_t *b, unsigned tid, uint64_t deadline_ns)
{
    ls_slot_t *s = ls_slot(b, tid);
    if (s->done == s->ep)
        return 0;
    return ls_wait_until_split(&b->cfg.wait, &b->arrive.count.value, counter_sleepers(b),
                               s->ep * b->cfg.n, deadline_ns);
}

int ls_counter_gather(lockstep_barrier_t *b, uint64_t deadline_ns)
{
    uint32_t next = ls_slot(b, 0)->ep + 1u;
    return ls_wait_until_split(&b->cfg.wait, &b->arrive.count.value, counter_sleepers(b),
                               next * b->cfg.n - 1u, deadline_ns);
}
