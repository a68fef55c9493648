/* Broadcast, with a choice of peer order and of who copies:
 *   PULL — the data stays in the root's slot and each receiver copies it out;
 *   PUSH — the root writes it into every receiver's own slot, in the given order, and
 *          receivers copy from their own slot.
 * Routes (tuning.h):
 *   small (up to small_bytes): the payload travels with the announcement, in
 *     small[s & 1], or inside it up to LS_INLINE_BYTES whatever the transfer: the line
 *     that shows the root's arrival brings the data too;
 *   pipelined: the root writes piece j into a ring of LS_BCAST_PIECE pieces over both
 *     chunk slots and publishes its step word (base + j + 1); each receiver waits for
 *     that word on the root alone, copies the piece and publishes its own word. The
 *     root waits for the receivers only before it overwrites a piece of the ring, so a
 *     receiver copies piece j while the root writes piece j + 1. Every rank ends the
 *     call with the same step count, and the next call's announcement orders the
 *     receivers' last reads before the root writes the ring again;
 *   zero-copy PUSH, when every receiver's buf lies in its lockstep_comm_buffer: the root
 *     copies straight into each receiver's buffer and one step tells that all copies
 *     are done; from relay_bytes (LS_RELAY_MIN) among 3+ ranks relayed along the root's order
 *     instead; with the root's buf in its buffer too, shared (split_broadcast);
 *   zero-copy PULL, past the small path, when the root's buf lies in its buffer: shared
 *     (split_broadcast), the receivers reading the root's buffer;
 *   kernel copy between 2 ranks (LS_KCOPY_BROADCAST), small or not: each moves half. */
#include <errno.h>
#include <string.h>

#include "gather.h"

/* The relay: pieces pass along the root's order, root -> chain[0] -> chain[1] ..., each
 * rank copying a piece from its own buf into the next rank's as soon as the rank
 * before it has published that piece's step, so up to size copies run at once instead
 * of size - 1 on the root. Every rank has finished its part when it returns: the last
 * piece has reached it, and it has passed every piece on (its buf is the source). */
static int relay_broadcast(lockstep_comm_t *c, char *buf, size_t bytes, int root, const unsigned char *chain,
                           uint64_t deadline)
{
    int me = c->rank, np = c->size - 1, pos = -1; /* my place in the chain; the root's is -1 */
    if (me != root)
        for (pos = 0; pos < np - 1 && chain[pos] != me; pos++) {
        }
    int from = pos <= 0 ? root : chain[pos - 1], to = pos + 1 < np ? chain[pos + 1] : -1;
    char *next = to >= 0 ? ls_buf(c, to) + ls_zc_announced(c, to).recv : NULL;
    size_t pieces = (bytes + LS_RELAY_PIECE - 1) / LS_RELAY_PIECE;
    uint32_t base = c->step;
    for (size_t j = 0; j < pieces; j++) {
        size_t off = j * LS_RELAY_PIECE, n = bytes - off < LS_RELAY_PIECE ? bytes - off : LS_RELAY_PIECE;
        uint32_t t = base + (uint32_t)j + 1;
        int rc;
        if (me != root && (rc = ls_comm_wait_word(c, from, &ls_ctl(c, from)->own.step, t, deadline)) != 0)
            return rc;
        if (next)
            ls_comm_copy(c, next + off, buf + off, n);
        ls_comm_publish_step(c, t);
    }
    c->step = base + (uint32_t)pieces;
    return 0;
}

/* A broadcast in which the receivers read the root's buf and share the copying:
 *   shared (zero-copy, the root's buf in its buffer, not relayed): the receivers read
 *     it in the root's buffer; 2 ranks whose receiver's buf lies in its buffer too: the
 *     root copies the first half into it and the receiver the second half; else each
 *     receiver copies the whole of it and the root none;
 *   kernel copy (2 ranks, both offered it): the same halves, the root's written into
 *     the receiver's private buf (process_vm_writev) and the receiver's read from the
 *     root's (process_vm_readv).
 * The root returns once every receiver has published its step: they read its buf until
 * then. */
static int split_broadcast(lockstep_comm_t *c, char *buf, size_t bytes, int root, const int *peers, int np,
                           int kcopy, uint64_t deadline)
{
    uint32_t t = ++c->step;
    /* the root's part: half between 2 ranks when it can write the receiver's buf; bytes
     * > 256, so h < bytes */
    int receiver = c->rank == root ? peers[0] : c->rank; /* with np == 1 */
    int halves = np == 1 && (kcopy || ls_zc_announced(c, receiver).recv != LS_NO_OFFSET);
    size_t h = halves ? (bytes / 2 + 63) / 64 * 64 : 0;
    int rc = 0;
    if (c->rank == root) {
        if (h && kcopy)
            rc = ls_kcopy_write(c, peers[0], buf, 0, h);
        else if (h)
            ls_comm_copy(c, ls_buf(c, peers[0]) + ls_zc_announced(c, peers[0]).recv, buf, h);
        if (rc)
            return rc;
        ls_comm_publish_step(c, t);
        return ls_comm_wait_steps(c, t, deadline);
    }
    if (kcopy)
        rc = ls_kcopy_read(c, root, buf + h, h, bytes - h);
    else
        ls_comm_copy(c, buf + h, ls_buf(c, root) + ls_zc_announced(c, root).send + h, bytes - h);
    if (rc || (h && (rc = ls_comm_wait_word(c, root, &ls_ctl(c, root)->own.step, t, deadline)) != 0))
        return rc;
    ls_comm_publish_step(c, t);
    return 0;
}

/* A small PUSH broadcast's root: buf into every receiver's small slot b */
static void copy_to_slots(lockstep_comm_t *c, const char *buf, size_t bytes, const int *peers, int np, unsigned b)
{
    for (int i = 0; i < np; i++)
        memcpy(ls_small(c, peers[i], b), buf, bytes);
}

/* The small route, after the announcement. The root copied into the slots before
 * announcing, and the receivers copy out (inside the announcement up to
 * LS_INLINE_BYTES) unless the root held its copy back (late: it hoped for a zero-copy
 * or kernel-copy call some rank could not take): then it copies in only now (PULL its
 * own slot, PUSH every receiver's), and one step tells the receivers it is there. */
static int small_route(lockstep_comm_t *c, char *buf, size_t bytes, int root, const int *peers, int np,
                       lockstep_xfer_t xfer, int late)
{
    unsigned b = c->seq & 1;
    int me = c->rank, rc;
    const char *from = bytes <= LS_INLINE_BYTES ? (const char *)ls_ctl(c, root)->ann[b].data + ls_inline_at(bytes)
                                                : ls_small(c, xfer == LOCKSTEP_XFER_PULL ? root : me, b);
    if (!late) {
        if (me != root && bytes)
            memcpy(buf, from, bytes);
        return 0;
    }
    uint32_t t = ++c->step;
    if (me == root && xfer == LOCKSTEP_XFER_PULL)
        memcpy(ls_small(c, root, b), buf, bytes);
    else if (me == root)
        copy_to_slots(c, buf, bytes, peers, np, b);
    else if ((rc = ls_comm_wait_word(c, root, &ls_ctl(c, root)->own.step, t, ls_comm_deadline(c))) != 0)
        return rc;
    else
        memcpy(buf, from, bytes);
    ls_comm_publish_step(c, t);
    return 0;
}

/* The zero-copy route (PUSH: every receiver's buf in its buffer; PULL: the root's), in
 * one of three forms: relayed along the root's chain (PUSH, relay_bytes and up, 3 ranks
 * or more), shared when the root's buf lies in its buffer (split_broadcast), else
 * pushed: the root copies into each receiver's buffer and one step says all copies
 * are done. */
static int zero_copy_route(lockstep_comm_t *c, char *buf, size_t bytes, int root, const int *peers, int np,
                           const unsigned char *chain, uint64_t deadline)
{
    if (chain)
        return relay_broadcast(c, buf, bytes, root, chain, deadline);
    if (ls_zc_announced(c, root).send != LS_NO_OFFSET)
        return split_broadcast(c, buf, bytes, root, peers, np, 0, deadline);
    uint32_t t = ++c->step;
    int rc;
    if (c->rank == root)
        ls_push_zero_copy(c, buf, bytes, 0, peers, np);
    else if ((rc = ls_comm_wait_word(c, root, &ls_ctl(c, root)->own.step, t, deadline)) != 0)
        return rc;
    ls_comm_publish_step(c, t); /* the root's says its copies are done */
    return 0;
}

/* The pipelined route: the root fills the ring of pieces over both chunk slots (see
 * the top); each receiver copies a piece out once the root's step says it is there */
static int pipelined_route(lockstep_comm_t *c, char *p, size_t bytes, int root, const int *peers, int np,
                           lockstep_xfer_t xfer, uint64_t deadline)
{
    int me = c->rank, rc;
    size_t piece = c->hdr->chunk_bytes < LS_BCAST_PIECE ? c->hdr->chunk_bytes : LS_BCAST_PIECE;
    size_t ring = 2 * c->hdr->chunk_bytes / piece, pieces = (bytes + piece - 1) / piece;
    uint32_t base = c->step;
    for (size_t j = 0; j < pieces; j++) {
        size_t off = j * piece, n = bytes - off < piece ? bytes - off : piece, at = (j % ring) * piece;
        uint32_t t = base + (uint32_t)j + 1;
        if (me == root) {
            /* every receiver has copied the piece this one overwrites */
            if (j >= ring && (rc = ls_comm_wait_steps(c, t - (uint32_t)ring, deadline)) != 0)
                return rc;
            if (xfer == LOCKSTEP_XFER_PULL)
                memcpy(ls_chunk(c, me, 0) + at, p + off, n);
            else
                for (int i = 0; i < np; i++)
                    memcpy(ls_chunk(c, peers[i], 0) + at, p + off, n);
        } else {
            if ((rc = ls_comm_wait_word(c, root, &ls_ctl(c, root)->own.step, t, deadline)) != 0)
                return rc;
            memcpy(p + off, ls_chunk(c, xfer == LOCKSTEP_XFER_PULL ? root : me, 0) + at, n);
        }
        ls_comm_publish_step(c, t);
    }
    c->step = base + (uint32_t)pieces;
    c->busy = LS_BUSY_BOTH; /* receivers may still be copying from the root's ring */
    return 0;
}

/* Before a small call's announcement, what each rank posts, and the root's copy into
 * the slots unless it holds it back (*later) for a zero-copy or kernel-copy call:
 *   a PUSH whose root would copy LS_SMALL_ZERO_COPY_MIN or more: where each buf lies in
 *     its buffer (*posts);
 *   2 ranks, from the kernel-copy window's least (the same on every rank, as bytes):
 *     whether each offers a kernel copy (*kc_posts). */
static void small_prepare(lockstep_comm_t *c, char *buf, size_t bytes, int root, const int *peers, int np,
                          lockstep_xfer_t xfer, int *posts, int *kc_posts, int *later)
{
    static const struct ls_kcopy_window window = LS_KCOPY_BROADCAST;
    int me = c->rank;
    unsigned b = (c->seq + 1) & 1;
    *posts = xfer == LOCKSTEP_XFER_PUSH && bytes * (size_t)np >= LS_SMALL_ZERO_COPY_MIN;
    uint64_t where = *posts ? ls_buffer_offset(c, buf, bytes) : LS_NO_OFFSET;
    *kc_posts = np == 1 && bytes >= ls_kcopy_least(window);
    int offer = *kc_posts && ls_kcopy_offer(c, window, bytes);
    *later = me == root && (where != LS_NO_OFFSET || offer);
    if (me == root && bytes && !*later) {
        if (bytes <= LS_INLINE_BYTES)
            memcpy(ls_ctl(c, me)->ann[b].data + ls_inline_at(bytes), buf, bytes);
        else if (xfer == LOCKSTEP_XFER_PULL)
            memcpy(ls_small(c, me, b), buf, bytes);
        else
            copy_to_slots(c, buf, bytes, peers, np, b);
    }
    if (*posts) /* after the copy, as for allreduce */
        ls_zc_post(c, where, where);
    if (*kc_posts) {
        ls_kcopy_post(c, offer ? buf : NULL, buf);
        ls_kcopy_post_early(c, !*later);
    }
}

/* Each call takes one of the routes of comm.h's table (small, pipelined, zero-copy,
 * kernel copy), chosen after the announcement from what every rank posted; eager
 * broadcasts are the caller's choice (eager.c). */
static int broadcast(lockstep_comm_t *c, void *buf, size_t bytes, int root, lockstep_order_t order,
                     lockstep_xfer_t xfer)
{
    if ((bytes && !buf) || root < 0 || root >= c->size || ls_bad_order(order, xfer))
        return -EINVAL;
    if (c->size == 1) /* alone: buf already holds the root's bytes */
        return ls_comm_failed(c);
    if (c->hdr->eager_bytes && bytes <= c->hdr->eager_bytes) {
        c->route = LOCKSTEP_ROUTE_EAGER;
        return ls_eager_broadcast(c, buf, bytes, root, xfer);
    }
    int me = c->rank, rc, peers[LOCKSTEP_COMM_MAX_RANKS];
    if ((rc = ls_comm_settle(c)) != 0)
        return rc;
    ls_comm_order(c, order, peers);
    int np = c->size - 1;

    if (bytes <= c->hdr->small_bytes) {
        int posts, kc_posts, later;
        small_prepare(c, buf, bytes, root, peers, np, xfer, &posts, &kc_posts, &later);
        if ((rc = ls_gather_announce(c, LS_CALL_BROADCAST, xfer, root, bytes)) != 0)
            return rc;
        /* zero-copy only when the root's buf lies in its buffer (its post) and every
         * receiver's does; a root that posted held its copy back either way */
        int root_posted = posts && ls_zc_announced(c, root).recv != LS_NO_OFFSET;
        int zero_copy = root_posted && ls_all_posted(c, LOCKSTEP_XFER_PUSH, root);
        int kcopy = !root_posted && kc_posts && ls_kcopy_count(c) == c->size;
        int late = root_posted || (kc_posts && (me == root ? later : !ls_kcopy_early_peers(c)));
        c->route = zero_copy ? LOCKSTEP_ROUTE_ZERO_COPY
                   : kcopy   ? LOCKSTEP_ROUTE_KERNEL_COPY
                   : bytes <= LS_INLINE_BYTES ? LOCKSTEP_ROUTE_INLINE
                                              : LOCKSTEP_ROUTE_SMALL;
        if (zero_copy)
            return zero_copy_route(c, buf, bytes, root, peers, np, NULL, ls_comm_deadline(c));
        if (kcopy)
            return split_broadcast(c, buf, bytes, root, peers, np, 1, ls_comm_deadline(c));
        return small_route(c, buf, bytes, root, peers, np, xfer, late);
    }

    static const struct ls_kcopy_window window = LS_KCOPY_BROADCAST;
    uint64_t where = ls_buffer_offset(c, buf, bytes);
    ls_zc_post(c, where, where); /* the root's buf is a send, the receivers' a recv */
    /* only 2 ranks offer a kernel copy; np is the same on every rank, so the others
     * need not count the offers after announcing */
    int offer = np == 1 && ls_kcopy_offer(c, window, bytes);
    ls_kcopy_post(c, offer ? buf : NULL, buf);
    /* the relay's chain, the root's order, goes in the root's small slot for this call
     * (large calls leave it unused; written before announcing, as a small payload is) */
    int relay = xfer == LOCKSTEP_XFER_PUSH && np >= 2 && bytes >= c->hdr->relay_bytes;
    unsigned char *chain = (unsigned char *)ls_small(c, root, (c->seq + 1) & 1);
    _Static_assert(LOCKSTEP_COMM_MAX_RANKS <= 256, "a rank fits a byte, the chain a small slot (256 B or more)");
    for (int i = 0; relay && me == root && i < np; i++)
        chain[i] = (unsigned char)peers[i];
    if ((rc = ls_gather_announce(c, LS_CALL_BROADCAST, xfer, root, bytes)) != 0)
        return rc;
    uint64_t deadline = ls_comm_deadline(c);
    int zero_copy = xfer == LOCKSTEP_XFER_PUSH ? ls_all_posted(c, xfer, root)
                                               : ls_zc_announced(c, root).send != LS_NO_OFFSET;
    int kcopy = !zero_copy && np == 1 && ls_kcopy_count(c) == c->size;
    c->route = zero_copy ? LOCKSTEP_ROUTE_ZERO_COPY : kcopy ? LOCKSTEP_ROUTE_KERNEL_COPY : LOCKSTEP_ROUTE_CHUNKED;
    if (zero_copy)
        return zero_copy_route(c, buf, bytes, root, peers, np, relay ? chain : NULL, deadline);
    if (kcopy)
        return split_broadcast(c, buf, bytes, root, peers, np, 1, deadline);
    return pipelined_route(c, buf, bytes, root, peers, np, xfer, deadline);
}

int lockstep_comm_broadcast(lockstep_comm_t *c, void *buf, size_t bytes, int root, lockstep_order_t order,
                            lockstep_xfer_t xfer)
{
    int rc = ls_comm_enter(c);
    if (rc)
        return rc;
    uint32_t s = c->seq;
    return ls_comm_end(c, s, broadcast(c, buf, bytes, root, order, xfer));
}

