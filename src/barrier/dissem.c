/* Dissemination barrier: ceil(log2 n) rounds; in round k participant i tells
 * (i + 2^k) mod n that it has finished rounds 0..k-1, then waits to hear the same
 * from (i - 2^k) mod n. After the last round every participant has heard, through a
 * chain of releases and acquires, from every other.
 *
 * Flags hold episode numbers rather than toggling senses: a partner that has raced
 * ahead only makes a flag larger, and "reached" (wrap-around >=) still holds. Each
 * flag has one writer and sits on its own line, except with 2 participants: one round,
 * each writes the other's flag, and both flags share participant 0's line, so each
 * write fetches the line with the other's flag in it (see flat.c). */
#include "barrier_impl.h"

unsigned ls_dissem_rounds(unsigned n)
{
    unsigned r = 0;
    while ((1u << r) < n)
        r++;
    return r;
}

void ls_dissem_arrive(lockstep_barrier_t *b, unsigned tid)
{
    ls_slot_t *s = ls_slot(b, tid);
    uint32_t ep = ++s->ep;
    LS_PERTURB();
    if (b->cfg.rounds)
        lockstep_wait_publish(&b->cfg.wait, ls_dissem_flag(b, (tid + 1) % b->cfg.n, 0), ep);
}

int ls_dissem_wait(lockstep_barrier_t *b, unsigned tid, uint64_t deadline_ns)
{
    /* resumable: rounds already passed are passed again at once, and re-sending a
     * round's signal stores the same episode number */
    uint32_t ep = ls_slot(b, tid)->ep, n = b->cfg.n;
    for (unsigned k = 0; k < b->cfg.rounds; k++) {
        int rc = lockstep_wait_until(&b->cfg.wait, ls_dissem_flag(b, tid, k), ep, deadline_ns);
        if (rc)
            return rc;
        LS_PERTURB();
        if (k + 1 < b->cfg.rounds) {
            unsigned to = (unsigned)(((uint64_t)tid + (1ull << (k + 1))) % n);
            lockstep_wait_publish(&b->cfg.wait, ls_dissem_flag(b, to, k + 1), ep);
        }
    }
    return 0;
}
