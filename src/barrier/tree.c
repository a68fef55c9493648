/* Combining-tree barrier with configurable fan-in and one release word.
 *
 * Participants 1..n-1 are grouped fanin at a time under level-0 nodes, those nodes
 * fanin at a time under level-1 nodes, and so on until one level plus participant 0
 * fits under the root. Arrival: add 1 to your node's count; if that completes the node
 * (count == expected), reset it and carry the arrival to the parent; completing the
 * root publishes the generation. Nobody ever waits during arrival, so split-phase
 * arrive/wait is exact, and a participant that is descheduled holds up only its own
 * node. Participant 0 arrives straight at the root, which lets it gather (wait for
 * count == expected - 1 there) and then release by arriving last. */
#include "barrier_impl.h"

uint32_t ls_tree_build(lockstep_barrier_t *b, unsigned n, unsigned fanin)
{
    unsigned units = n - 1; /* participants 1..n-1, then nodes of the level below */
    uint32_t level_first = 0, nnodes = 0;
    int first_level = 1;
    while (units + 1 > fanin) {
        unsigned groups = (units + fanin - 1) / fanin;
        for (unsigned g = 0; g < groups; g++) {
            unsigned lo = g * fanin, hi = lo + fanin < units ? lo + fanin : units;
            if (b) {
                ls_node_t *nd = ls_node(b, nnodes + g);
                nd->expected = hi - lo;
                nd->parent = LS_NODE_NONE; /* set when the next level is made */
                for (unsigned u = lo; u < hi; u++) {
                    if (first_level)
                        ls_slot(b, u + 1)->leaf = nnodes + g;
                    else
                        ls_node(b, level_first + u)->parent = nnodes + g;
                }
            }
        }
        level_first = nnodes;
        nnodes += groups;
        units = groups;
        first_level = 0;
    }
    uint32_t root = nnodes++;
    if (b) {
        ls_node_t *r = ls_node(b, root);
        r->expected = units + 1;
        r->parent = LS_NODE_NONE;
        for (unsigned u = 0; u < units; u++) {
            if (first_level)
                ls_slot(b, u + 1)->leaf = root;
            else
                ls_node(b, level_first + u)->parent = root;
        }
        ls_slot(b, 0)->leaf = root;
    }
    return nnodes;
}

void ls_tree_arrive(lockstep_barrier_t *b, unsigned tid)
{
    ls_slot_t *s = ls_slot(b, tid);
    uint32_t ep = ++s->ep;
    ls_node_t *nd = ls_node(b, s->leaf);
    for (;;) {
        LS_PERTURB();
        /* seq_cst RMW: acquire+release along the climb, ordered before the wake check */
        uint32_t old = ls_fetch_add(&nd->count.value, 1u, __ATOMIC_SEQ_CST);
        if (old + 1 < nd->expected) {
            if (nd->parent == LS_NODE_NONE && old + 2 == nd->expected)
                lockstep_wait_wake(&b->cfg.wait, &nd->count); /* primary may gather */
            return;
        }
        ls_store_relaxed(&nd->count.value, 0u); /* ordered by the final publish */
        if (nd->parent == LS_NODE_NONE) {
            lockstep_wait_publish(&b->cfg.wait, &b->release.gen, ep);
            return;
        }
        nd = ls_node(b, nd->parent);
    }
}

int ls_tree_wait(lockstep_barrier_t *b, unsigned tid, uint64_t deadline_ns)
{
    return lockstep_wait_until(&b->cfg.wait, &b->release.gen, ls_slot(b, tid)->ep, deadline_ns);
}

int ls_tree_gather(lockstep_barrier_t *b, uint64_t deadline_ns)
{
    ls_node_t *root = ls_node(b, b->cfg.nnodes - 1);
    return lockstep_wait_until(&b->cfg.wait, &root->count, root->expected - 1, deadline_ns);
}
