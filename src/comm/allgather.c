/* Allgather: every rank's block of `bytes` into every rank's recv, in rank order, with a
 * choice of peer order and of who copies (PULL: each rank copies every peer's block
 * out of the peer's slot; PUSH: each rank writes its block into every peer's slot).
 * Routes (tuning.h):
 *   small (PULL: a block up to small_bytes; PUSH: all blocks): the blocks travel with
 *     the announcement, in small[s & 1] or inside it up to LS_INLINE_BYTES; from the
 *     kernel-copy window's least block a rank that offers a kernel copy holds its copy
 *     back, and if some rank did not offer, copies late, with one step more;
 *   chunked: through chunk[j & 1], one step per chunk; a chunk slot is rewritten two
 *     chunks later, after every rank has passed the step that follows its reads;
 *   zero-copy, past the small path: PUSH, when every rank's recv lies in its
 *     lockstep_comm_buffer, each rank copies its block straight into every peer's
 *     recv; PULL, when every rank's send does, each rank copies every peer's block
 *     straight out of the peer's send (a kernel copy out of shared memory costs a page
 *     lookup per 4 KiB, which private memory in huge pages spares); one step ends it;
 *   kernel copy (LS_KCOPY_ALLGATHER_PUSH, _PULL, small or not): PULL reads each
 *     peer's block from its send, PUSH writes mine into each peer's recv; one step
 *     ends the call. */
#include <errno.h>
#include <string.h>

#include "gather.h"

/* An allgather on the small path: my block into the small slots b (PULL my own,
 * PUSH every peer's) */
static void copy_to_small(lockstep_comm_t *c, const char *in, size_t bytes, lockstep_xfer_t xfer, const int *peers,
                          int np, unsigned b)
{
    if (xfer == LOCKSTEP_XFER_PULL)
        memcpy(ls_small(c, c->rank, b), in, bytes);
    else
        for (int i = 0; i < np; i++)
            memcpy(ls_small(c, peers[i], b) + (size_t)c->rank * bytes, in, bytes);
}

/* An allgather by kernel copy, every rank having posted its send and recv: every
 * block from its send straight into every recv (PULL: I read each peer's, PUSH: I
 * write mine into each peer's); one step ends the call, when every recv is complete
 * and no send is read any more */
static int allgather_kernel_copy(lockstep_comm_t *c, const char *in, char *out, size_t bytes, lockstep_xfer_t xfer,
                                 const int *peers, int np)
{
    int me = c->rank, rc;
    for (int i = 0; i < np; i++) {
        int k = peers[i];
        rc = xfer == LOCKSTEP_XFER_PULL ? ls_kcopy_read(c, k, out + (size_t)k * bytes, 0, bytes)
                                   : ls_kcopy_write(c, k, in, (size_t)me * bytes, bytes);
        if (rc)
            return rc;
    }
    if (in != out + (size_t)me * bytes)
        ls_comm_copy(c, out + (size_t)me * bytes, in, bytes);
    return ls_comm_step(c, ls_comm_deadline(c));
}

static int allgather(lockstep_comm_t *c, const void *send, void *recv, size_t bytes, lockstep_order_t order,
                     lockstep_xfer_t xfer)
{
    if ((bytes && (!send || !recv)) || ls_bad_order(order, xfer) ||
        bytes > SIZE_MAX / (size_t)c->size)
        return -EINVAL;
    int N = c->size, me = c->rank, rc, peers[LOCKSTEP_COMM_MAX_RANKS];
    char *out = recv, *mine = out + (size_t)me * bytes;
    const char *in = send;
    size_t total = (size_t)N * bytes;
    if (in != mine && bytes && in < out + total && out < in + bytes)
        return -EINVAL; /* overlapping, and not the in-place layout */
    if (N == 1) /* recv is send */
        return ls_comm_alone(c, out, in, bytes);
    if ((rc = ls_comm_settle(c)) != 0)
        return rc;
    ls_comm_order(c, order, peers);
    int np = N - 1;
    size_t small = c->hdr->small_bytes;

    static const struct ls_kcopy_window pull = LS_KCOPY_ALLGATHER_PULL, push = LS_KCOPY_ALLGATHER_PUSH;
    struct ls_kcopy_window window = xfer == LOCKSTEP_XFER_PULL ? pull : push;
    if (xfer == LOCKSTEP_XFER_PULL ? bytes <= small : total <= small) {
        unsigned b = (c->seq + 1) & 1;
        int inl = bytes <= LS_INLINE_BYTES;
        size_t at = ls_inline_at(bytes);
        /* from the window's least block (the same on every rank, as bytes) every rank
         * posts whether it offers a kernel copy, and one that offers copies nothing
         * into the slots before announcing */
        int kc_posts = bytes >= ls_kcopy_least(window);
        int offer = kc_posts && ls_kcopy_offer(c, window, bytes);
        if (inl) {
            if (bytes)
                memcpy(ls_ctl(c, me)->ann[b].data + at, in, bytes);
        } else if (!offer) {
            copy_to_small(c, in, bytes, xfer, peers, np, b);
        }
        if (kc_posts) {
            ls_kcopy_post(c, offer ? in : NULL, out);
            ls_kcopy_post_early(c, !offer);
        }
        c->route = inl ? LOCKSTEP_ROUTE_INLINE : LOCKSTEP_ROUTE_SMALL;
        rc = ls_gather_announce(c, LS_CALL_ALLGATHER, xfer, 0, bytes);
        if (rc || !bytes)
            return rc;
        if (kc_posts && ls_kcopy_count(c) == N) {
            c->route = LOCKSTEP_ROUTE_KERNEL_COPY;
            return allgather_kernel_copy(c, in, out, bytes, xfer, peers, np);
        }
        if (kc_posts && (offer || !ls_kcopy_early_peers(c))) { /* some rank held its copy back */
            if (offer)
                copy_to_small(c, in, bytes, xfer, peers, np, b);
            if ((rc = ls_comm_step(c, ls_comm_deadline(c))) != 0) /* every rank's copy is in */
                return rc;
        }
        if (in != mine)
            memcpy(mine, in, bytes);
        for (int i = 0; i < np; i++) {
            int k = peers[i];
            const char *from = inl                      ? (const char *)ls_ctl(c, k)->ann[b].data + at
                               : xfer == LOCKSTEP_XFER_PULL ? ls_small(c, k, b)
                                                       : ls_small(c, me, b) + (size_t)k * bytes;
            memcpy(out + (size_t)k * bytes, from, bytes);
        }
        return 0;
    }

    ls_post_gather(c, xfer, in, bytes, out, total);
    /* every rank posts, so that every rank counts the same (bytes is the same on all) */
    int offer = ls_kcopy_offer(c, window, bytes);
    ls_kcopy_post(c, offer ? in : NULL, out);
    if ((rc = ls_gather_announce(c, LS_CALL_ALLGATHER, xfer, 0, bytes)) != 0)
        return rc;
    uint64_t deadline = ls_comm_deadline(c);
    int zero_copy = ls_all_posted(c, xfer, -1), kcopy = ls_kcopy_count(c) == N;
    c->route = zero_copy ? LOCKSTEP_ROUTE_ZERO_COPY : kcopy ? LOCKSTEP_ROUTE_KERNEL_COPY : LOCKSTEP_ROUTE_CHUNKED;
    if (zero_copy) {
        if (in != mine)
            ls_comm_copy(c, mine, in, bytes);
        if (xfer == LOCKSTEP_XFER_PUSH)
            ls_push_zero_copy(c, in, bytes, (size_t)me * bytes, peers, np);
        else
            for (int i = 0; i < np; i++)
                ls_comm_copy(c, out + (size_t)peers[i] * bytes, ls_buf(c, peers[i]) + ls_zc_announced(c, peers[i]).send,
                             bytes);
        return ls_comm_step(c, deadline); /* PUSH: every recv is complete; PULL: no one reads my send */
    }
    if (kcopy)
        return allgather_kernel_copy(c, in, out, bytes, xfer, peers, np);
    size_t piece = xfer == LOCKSTEP_XFER_PULL ? c->hdr->chunk_bytes : c->hdr->chunk_bytes / (size_t)N;
    unsigned j = 0;
    for (size_t off = 0; off < bytes; off += piece, j++) {
        size_t q = bytes - off < piece ? bytes - off : piece;
        unsigned b = j & 1;
        if (xfer == LOCKSTEP_XFER_PULL)
            ls_comm_copy(c, ls_chunk(c, me, b), in + off, q);
        else
            for (int i = 0; i < np; i++)
                memcpy(ls_chunk(c, peers[i], b) + (size_t)me * q, in + off, q);
        if ((rc = ls_comm_step(c, deadline)) != 0)
            return rc;
        if (in != mine)
            ls_comm_copy(c, mine + off, in + off, q);
        for (int i = 0; i < np; i++) {
            int k = peers[i];
            const char *from = xfer == LOCKSTEP_XFER_PULL ? ls_chunk(c, k, b) : ls_chunk(c, me, b) + (size_t)k * q;
            ls_comm_copy(c, out + (size_t)k * bytes + off, from, q);
        }
        c->busy = (int)b;
    }
    return 0;
}

int lockstep_comm_allgather(lockstep_comm_t *c, const void *send, void *recv, size_t bytes,
                            lockstep_order_t order, lockstep_xfer_t xfer)
{
    int rc = ls_comm_enter(c);
    if (rc)
        return rc;
    uint32_t s = c->seq;
    return ls_comm_end(c, s, allgather(c, send, recv, bytes, order, xfer));
}
