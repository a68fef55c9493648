/* What the broadcast and the allgather share: the transfer (PULL or PUSH) rides in the
 * descriptor's op field, so ranks that disagree on it fail with LOCKSTEP_EMISMATCH
 * instead of copying from slots no one wrote; and zero-copy, where each rank posts where
 * its data lies in its shared buffer: PUSH the recv a writer copies into, PULL the send
 * a reader copies from. */
#ifndef LOCKSTEP_COMM_GATHER_H
#define LOCKSTEP_COMM_GATHER_H

#include "comm_impl.h"

static inline int ls_bad_order(lockstep_order_t order, lockstep_xfer_t xfer)
{
    return (unsigned)order > LOCKSTEP_ORDER_TOPOLOGY || (unsigned)xfer > LOCKSTEP_XFER_PUSH;
}

static inline int ls_gather_announce(lockstep_comm_t *c, enum ls_call call, lockstep_xfer_t xfer, int root,
                                     size_t bytes)
{
    return ls_comm_announce(c, call, (lockstep_op_t)xfer, 0, root, bytes, 1);
}

/* Before a large call's announcement: where my data lies in my buffer. PUSH posts the
 * recv (peers write into it), PULL the send (peers read from it); the broadcast, whose
 * buf is both, posts it as both. */
static inline void ls_post_gather(lockstep_comm_t *c, lockstep_xfer_t xfer, const void *send, size_t send_bytes,
                                  const void *recv, size_t recv_bytes)
{
    ls_zc_post(c, xfer == LOCKSTEP_XFER_PULL ? ls_buffer_offset(c, send, send_bytes) : LS_NO_OFFSET,
               xfer == LOCKSTEP_XFER_PUSH ? ls_buffer_offset(c, recv, recv_bytes) : LS_NO_OFFSET);
}

/* After it: whether every rank but skip (-1: none) posted what xfer needs (PUSH its
 * recv, PULL its send), so the call runs zero-copy */
static inline int ls_all_posted(const lockstep_comm_t *c, lockstep_xfer_t xfer, int skip)
{
    for (int k = 0; k < c->size; k++) {
        struct ls_zc_offsets o = ls_zc_announced(c, k);
        if (k != skip && (xfer == LOCKSTEP_XFER_PUSH ? o.recv : o.send) == LS_NO_OFFSET)
            return 0;
    }
    return 1;
}

/* my send into every peer's recv at block (every peer's buffer offset + at) */
static inline void ls_push_zero_copy(lockstep_comm_t *c, const void *send, size_t bytes, size_t at,
                                     const int *peers, int np)
{
    for (int i = 0; i < np; i++)
        ls_comm_copy(c, ls_buf(c, peers[i]) + ls_zc_announced(c, peers[i]).recv + at, send, bytes);
}

#endif
