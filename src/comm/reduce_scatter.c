/* Reduce-scatter: recv = block `rank` of send, reduced over all ranks in rank order.
 * send holds size blocks of count elements; block d is what this rank contributes to
 * rank d. Half an allreduce: each rank reads only what it reduces, and nothing is
 * gathered back.
 *
 * Tiny (all of send within LS_INLINE_BYTES): send rides in the announcement, as the
 * tiny allreduce's payload. Small (size * count elements within allreduce_small): copy
 * all of send into small[s & 1] before announcing; then reduce block `rank` of every rank's slot into
 * recv. One synchronisation, as the small allreduce.
 *
 * Large, per chunk of `piece` elements of every block (step_bytes / size each),
 * double-buffered: copy piece j of every block but mine into its part of my chunk
 * slot (part d for rank d), step, then reduce part `rank` of every peer's slot, with my
 * own block read straight from send, into recv. One step per chunk: a rank publishes
 * chunk j + 1's step only after it has reduced chunk j, so a slot rewritten for chunk
 * j + 2 is no longer read. Chunk 0 goes in before the announcement when no peer can
 * still be reading its slot (c->busy), as in the large allreduce.
 *
 * Zero-copy (send and recv in the caller's lockstep_comm_buffer on every rank, past
 * ZERO_COPY_MIN): each rank reduces its block straight from every rank's send into its
 * recv, and one step ends the call (no peer reads my send any more). */
#include <errno.h>
#include <string.h>

#include "comm_impl.h"

#define ZERO_COPY_MIN 1024 /* as the allreduce's */

/* Copy piece [off, off + n) of every block but mine into my slot, part d at d * piece */
static void copy_parts(lockstep_comm_t *c, const char *send, size_t count, size_t off, size_t n, size_t piece,
                       size_t es, char *slot)
{
    for (int d = 0; d < c->size; d++)
        if (d != c->rank)
            ls_comm_copy(c, slot + (size_t)d * piece * es, send + ((size_t)d * count + off) * es, n * es);
}

int lockstep_comm_reduce_scatter(lockstep_comm_t *c, const void *send, void *recv, size_t count,
                                 lockstep_dtype_t dtype, lockstep_op_t op)
{
    size_t es = lockstep_dtype_size(dtype);
    if (!c || !es || (unsigned)op > LOCKSTEP_MIN || (count && (!send || !recv)) ||
        count > SIZE_MAX / es / (size_t)c->size)
        return -EINVAL;
    int N = c->size, me = c->rank, rc;
    size_t bytes = count * es, total = bytes * (size_t)N;
    const char *in_all = send, *r = recv;
    const char *mine_in = in_all + (size_t)me * bytes;
    if (bytes && r != mine_in && r < in_all + total && in_all < r + bytes)
        return -EINVAL; /* overlapping, and not the in-place layout (recv = my block) */
    if (N == 1)
        return ls_comm_alone(c, recv, send, bytes);
    if ((rc = ls_comm_settle(c)) != 0)
        return rc;
    const void *in[LOCKSTEP_COMM_MAX_RANKS];
    unsigned b = (c->seq + 1) & 1;

    if (total <= LS_INLINE_BYTES) { /* the payload rides in the announcement */
        size_t at = ls_inline_at(total);
        if (total)
            memcpy(ls_ctl(c, me)->ann[b].data + at, send, total);
        if ((rc = ls_comm_announce(c, LS_CALL_REDUCE_SCATTER, op, dtype, 0, count, 1)) != 0)
            return rc;
        for (int k = 0; k < N; k++)
            in[k] = ls_ctl(c, k)->ann[b].data + at + (size_t)me * bytes;
        ls_reduce(dtype, op, recv, NULL, 0, in, N, count);
        return 0;
    }

    struct ls_zc_offsets zmine = {LS_NO_OFFSET, LS_NO_OFFSET};
    if (bytes >= ZERO_COPY_MIN && (zmine.recv = ls_buffer_offset(c, recv, bytes)) != LS_NO_OFFSET)
        zmine.send = ls_buffer_offset(c, send, total);
    int zc_mine = zmine.send != LS_NO_OFFSET;

    int small = total <= c->hdr->allreduce_small;
    size_t piece = c->hdr->step_bytes / es / (size_t)N;
    unsigned first = c->busy == 0 ? 1 : 0;
    int may_early = !small && c->busy != LS_BUSY_BOTH;
    int copied = !zc_mine && (small || may_early);
    if (copied && small)
        memcpy(ls_small(c, me, b), send, total);
    else if (copied)
        copy_parts(c, send, count, 0, count < piece ? count : piece, piece, es, ls_chunk(c, me, first));
    ls_zc_post(c, zmine.send, zmine.recv);
    if ((rc = ls_comm_announce(c, LS_CALL_REDUCE_SCATTER, op, dtype, 0, count, 1)) != 0)
        return rc;
    int zc = 0;
    for (int k = 0; k < N; k++)
        zc += ls_zc_announced(c, k).send != LS_NO_OFFSET;
    uint64_t deadline = ls_comm_deadline(c);

    if (zc == N) {
        for (int k = 0; k < N; k++)
            in[k] = ls_buf(c, k) + ls_zc_announced(c, k).send + (size_t)me * bytes;
        ls_comm_reduce(c, dtype, op, recv, NULL, 0, in, N, count);
        return ls_comm_step(c, deadline); /* nobody reads my send after this */
    }

    if (small) {
        if (zc) { /* some ranks passed buffers: they copy in now, and say so */
            if (!copied)
                memcpy(ls_small(c, me, b), send, total);
            if ((rc = ls_comm_step(c, deadline)) != 0)
                return rc;
        }
        for (int k = 0; k < N; k++)
            in[k] = ls_small(c, k, b) + (size_t)me * bytes;
        ls_reduce(dtype, op, recv, NULL, 0, in, N, count);
        return 0;
    }

    int early = may_early && zc == 0;
    char *out = recv;
    unsigned j = 0;
    for (size_t off = 0; off < count; off += piece, j++) {
        size_t n = count - off < piece ? count - off : piece;
        unsigned cb = (first + j) & 1;
        if (j > 0 || !early) {
            if (j > 0 || !copied)
                copy_parts(c, send, count, off, n, piece, es, ls_chunk(c, me, cb));
            if ((rc = ls_comm_step(c, deadline)) != 0)
                return rc;
        }
        for (int k = 0; k < N; k++)
            in[k] = k == me ? (const void *)(mine_in + off * es)
                            : (const void *)(ls_chunk(c, k, cb) + (size_t)me * piece * es);
        ls_comm_reduce(c, dtype, op, out + off * es, NULL, 0, in, N, n);
        c->busy = (int)cb; /* peers may still read this slot's parts after I return */
    }
    return 0;
}
