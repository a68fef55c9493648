/* Block exchanges: send holds size blocks, block d for rank d, and each rank gets
 * block `rank` of every rank's send.
 *   reduce-scatter: recv = those blocks reduced in rank order (half an allreduce: each
 *                   rank reads only what it reduces, and nothing is gathered back);
 *   all-to-all:     recv block k = rank k's (bytes, no reduction).
 * Both move data alike, below; they differ in what a rank does with the blocks it
 * reads (finish()).
 *
 * Tiny (all of send within LS_INLINE_BYTES): send rides in the announcement, as the
 * tiny allreduce's payload. Small (all of send within exchange_small: the
 * allreduce's switch when the caller set one, else LS_SMALL_FITS_MIN while ranks fit
 * the CPUs and LS_SMALL_OVERSUBSCRIBED when they outnumber them): copy all of send into
 * small[s & 1] before announcing; then finish block `rank` of every rank's slot, my
 * own block from send. One synchronisation, as the small allreduce.
 *
 * Large, per chunk of `piece` elements of every block (step_bytes / size each),
 * double-buffered: copy piece j of every block but mine into its part of my chunk
 * slot (part d for rank d), step, then finish part `rank` of every peer's slot, with
 * my own block read straight from send. One step per chunk: a rank publishes chunk
 * j + 1's step only after it has finished chunk j, so a slot rewritten for chunk j + 2
 * is no longer read. Chunk 0 goes in before the announcement when no peer can still be
 * reading its slot (c->busy), as in the large allreduce.
 *
 * Zero-copy (send and recv in the caller's lockstep_comm_buffer on every rank, blocks
 * of zero_copy_min_bytes or more, LS_ZERO_COPY_MIN by default): each rank finishes its block straight from every
 * rank's send, and one step ends the call (no peer reads my send any more).
 *
 * Kernel copy (blocks in LS_KCOPY_ALLTOALL's or LS_KCOPY_REDUCE_SCATTER's window, when
 * no rank passed buffers and every rank offers it: kcopy.c): in an all-to-all each
 * rank writes block k of its send straight into rank k's recv with process_vm_writev;
 * in a reduce-scatter each reads block `rank` of every peer's send with
 * process_vm_readv and reduces (ls_kcopy_reduce); one step ends the call. Through the
 * slots every block is copied twice. */
#include <errno.h>
#include <string.h>

#include "comm_impl.h"

/* Copy piece [off, off + n) of every block but mine into my slot, part d at d * piece */
struct xchg {
    enum ls_call call;        /* LS_CALL_REDUCE_SCATTER or LS_CALL_ALLTOALL */
    lockstep_dtype_t dtype;   /* reduce-scatter's; all-to-all moves bytes */
    lockstep_op_t op;
    size_t count, es;         /* elements per block, bytes per element */
};

/* in[k]: n elements of rank k's block for me, from element off of the block. Small
 * calls reduce with ls_reduce and copy with memcpy; the chunked ones split the work
 * across the pool. */
static void finish(lockstep_comm_t *c, const struct xchg *x, const void *const *in, char *out, size_t off,
                   size_t n, int chunked)
{
    if (x->call == LS_CALL_REDUCE_SCATTER) {
        if (chunked)
            ls_comm_reduce(c, x->dtype, x->op, out + off * x->es, NULL, 0, in, c->size, n);
        else
            ls_reduce(x->dtype, x->op, out + off * x->es, NULL, 0, in, c->size, n);
        return;
    }
    for (int k = 0; k < c->size; k++) {
        char *to = out + ((size_t)k * x->count + off) * x->es;
        if (chunked)
            ls_comm_copy(c, to, in[k], n * x->es);
        else if (n)
            memcpy(to, in[k], n * x->es);
    }
}

static void copy_parts(lockstep_comm_t *c, const char *send, size_t count, size_t off, size_t n, size_t piece,
                       size_t es, char *slot)
{
    for (int d = 0; d < c->size; d++)
        if (d != c->rank)
            ls_comm_copy(c, slot + (size_t)d * piece * es, send + ((size_t)d * count + off) * es, n * es);
}

static int exchange(lockstep_comm_t *c, const struct xchg *x, const void *send, void *recv)
{
    int N = c->size, me = c->rank, rc;
    size_t count = x->count, es = x->es, bytes = count * es, total = bytes * (size_t)N;
    const char *mine_in = (const char *)send + (size_t)me * bytes;
    if ((rc = ls_comm_settle(c)) != 0)
        return rc;
    const void *in[LOCKSTEP_COMM_MAX_RANKS];
    unsigned b = (c->seq + 1) & 1;

    if (total <= LS_INLINE_BYTES) { /* the payload rides in the announcement */
        size_t at = ls_inline_at(total);
        if (total)
            memcpy(ls_ctl(c, me)->ann[b].data + at, send, total);
        c->route = LOCKSTEP_ROUTE_INLINE;
        if ((rc = ls_comm_announce(c, x->call, x->op, x->dtype, 0, count, 1)) != 0)
            return rc;
        for (int k = 0; k < N; k++) /* mine from send: see lockstep_comm's desc */
            in[k] = k == me ? (const void *)mine_in
                            : (const void *)(ls_ctl(c, k)->ann[b].data + at + (size_t)me * bytes);
        finish(c, x, in, recv, 0, count, 0);
        return 0;
    }

    struct ls_zc_offsets zmine = {LS_NO_OFFSET, LS_NO_OFFSET};
    size_t recv_bytes = x->call == LS_CALL_ALLTOALL ? total : bytes;
    if (bytes >= c->zc_min && (zmine.recv = ls_buffer_offset(c, recv, recv_bytes)) != LS_NO_OFFSET)
        zmine.send = ls_buffer_offset(c, send, total);
    int zc_mine = zmine.send != LS_NO_OFFSET;
    /* Calls that never move by kernel copy (small ones, and blocks below the window's
     * least) neither post nor count it (the same on every rank, as bytes is): the post
     * ends in the announcement's second line, which each peer would fetch. In place (a
     * reduce-scatter's recv in send), peers read only blocks other than mine, so my
     * writes race none of their reads. */
    int small = total <= c->hdr->exchange_small;
    static const struct ls_kcopy_window a2a = LS_KCOPY_ALLTOALL, rs = LS_KCOPY_REDUCE_SCATTER;
    int alltoall = x->call == LS_CALL_ALLTOALL;
    struct ls_kcopy_window window = alltoall ? a2a : rs;
    int posts = !small && bytes >= ls_kcopy_least(window); /* the same on every rank */
    int offer = posts && !zc_mine && ls_kcopy_offer(c, window, bytes);

    size_t piece = c->hdr->step_bytes / es / (size_t)N;
    unsigned first = c->busy == 0 ? 1 : 0;
    int may_early = !small && c->busy != LS_BUSY_BOTH;
    int copied = !zc_mine && !offer && (small || may_early);
    if (copied && small)
        memcpy(ls_small(c, me, b), send, total);
    else if (copied)
        copy_parts(c, send, count, 0, count < piece ? count : piece, piece, es, ls_chunk(c, me, first));
    ls_zc_post(c, zmine.send, zmine.recv);
    if (posts) {
        ls_kcopy_post(c, offer ? send : NULL, recv);
        ls_kcopy_post_early(c, copied);
    }
    if ((rc = ls_comm_announce(c, x->call, x->op, x->dtype, 0, count, 1)) != 0)
        return rc;
    int zc = ls_zc_count(c); /* ranks with buffers */
    int kcopy = posts ? ls_kcopy_count(c) : 0; /* ranks that offered a kernel copy */
    uint64_t deadline = ls_comm_deadline(c);
    c->route = zc == N                  ? LOCKSTEP_ROUTE_ZERO_COPY
               : zc == 0 && kcopy == N ? LOCKSTEP_ROUTE_KERNEL_COPY
               : small                 ? LOCKSTEP_ROUTE_SMALL
                                       : LOCKSTEP_ROUTE_CHUNKED;

    if (zc == 0 && kcopy == N && !alltoall) { /* my block of every send, reduced */
        rc = ls_kcopy_reduce(c, x->dtype, x->op, mine_in, recv, (uint64_t)me * bytes, count, 0);
        return rc ? rc : ls_comm_step(c, deadline); /* nobody reads my send any more */
    }
    if (zc == 0 && kcopy == N) { /* each of my blocks into its rank's recv */
        const char *in_blocks = send;
        for (int i = 1; i < N; i++) {
            int k = (me + i) % N; /* rotated: ranks start on different peers */
            if ((rc = ls_kcopy_write(c, k, in_blocks + (size_t)k * bytes, (uint64_t)me * bytes, bytes)) != 0)
                return rc;
        }
        ls_comm_copy(c, (char *)recv + (size_t)me * bytes, mine_in, bytes);
        return ls_comm_step(c, deadline); /* every recv is complete, nobody writes into mine */
    }

    if (zc == N) {
        for (int k = 0; k < N; k++)
            in[k] = ls_buf(c, k) + ls_zc_announced(c, k).send + (size_t)me * bytes;
        finish(c, x, in, recv, 0, count, 1);
        return ls_comm_step(c, deadline); /* nobody reads my send after this */
    }

    if (small) {
        if (zc) { /* the ranks that did not copy in before announcing do now, and say so */
            if (!copied)
                memcpy(ls_small(c, me, b), send, total);
            if ((rc = ls_comm_step(c, deadline)) != 0)
                return rc;
        }
        for (int k = 0; k < N; k++)
            in[k] = k == me ? (const void *)mine_in : (const void *)(ls_small(c, k, b) + (size_t)me * bytes);
        finish(c, x, in, recv, 0, count, 0);
        return 0;
    }

    int early = copied && (posts ? ls_kcopy_early_peers(c) : zc == 0); /* every rank copied in
                                                                         chunk 0 early */
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
        finish(c, x, in, out, off, n, 1);
        c->busy = (int)cb; /* peers may still read this slot's parts after I return */
    }
    return 0;
}

static int reduce_scatter(lockstep_comm_t *c, const void *send, void *recv, size_t count, lockstep_dtype_t dtype,
                          lockstep_op_t op)
{
    int rc = ls_reduce_scatter_args(send, recv, count, dtype, op, c->rank, c->size);
    if (rc)
        return rc;
    size_t es = lockstep_dtype_size(dtype), bytes = count * es;
    if (c->size == 1)
        return ls_comm_alone(c, recv, send, bytes);
    struct xchg x = {LS_CALL_REDUCE_SCATTER, dtype, op, count, es};
    return exchange(c, &x, send, recv);
}

static int alltoall(lockstep_comm_t *c, const void *send, void *recv, size_t bytes)
{
    if ((bytes && (!send || !recv)) || bytes > SIZE_MAX / (size_t)c->size)
        return -EINVAL;
    size_t total = bytes * (size_t)c->size;
    if (ls_overlap(send, recv, total))
        return -EINVAL;
    if (c->size == 1)
        return ls_comm_alone(c, recv, send, bytes);
    struct xchg x = {LS_CALL_ALLTOALL, LOCKSTEP_DTYPE_F32, LOCKSTEP_OP_SUM, bytes, 1};
    return exchange(c, &x, send, recv);
}

int lockstep_comm_reduce_scatter(lockstep_comm_t *c, const void *send, void *recv, size_t count,
                                 lockstep_dtype_t dtype, lockstep_op_t op)
{
    int rc = ls_comm_enter(c);
    if (rc)
        return rc;
    uint32_t s = c->seq;
    return ls_comm_end(c, s, reduce_scatter(c, send, recv, count, dtype, op));
}

int lockstep_comm_alltoall(lockstep_comm_t *c, const void *send, void *recv, size_t bytes)
{
    int rc = ls_comm_enter(c);
    if (rc)
        return rc;
    uint32_t s = c->seq;
    return ls_comm_end(c, s, alltoall(c, send, recv, bytes));
}
