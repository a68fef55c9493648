/* Allreduce. Routes (tuning.h):
 *
 * Small (count * size <= allreduce_small_bytes, capped at small_bytes): copy in to
 * small[s & 1] (up to LS_INLINE_BYTES: into the announcement itself), announce (which
 * publishes the payload), then reduce every rank's copy, in rank order, straight into
 * recv (my own input read from send). One synchronisation per call; no closing
 * barrier, because a slot is only rewritten two calls later (segment.h).
 *
 * Chunked: per chunk of step_bytes, double-buffered:
 *   1. copy my chunk, except my own 1/N of it, into my chunk slot; step (all chunks
 *      are in). For chunk 0 the announcement is that step when no peer can still be
 *      reading the slot it goes to (c->busy): chunk 0 is copied in before announcing;
 *   2. reduce-scatter: reduce my 1/N of the chunk over all ranks, in rank order, into
 *      recv (my own input read straight from send, which may be recv itself) and, in
 *      the same pass, into my slot's part; step (all parts are reduced);
 *   3. allgather: copy every other rank's reduced part into recv.
 * Each element is reduced once, by one rank, in rank order, so all ranks hold the same
 * bits.
 *
 * Zero-copy (send and recv inside the caller's lockstep_comm_buffer on every rank, and
 * at least zero_copy_min_bytes, LS_ZERO_COPY_MIN by default): each rank posts its offsets in its announcement;
 * once all have announced, each rank reduces its 1/N of the elements from every rank's
 * send straight into every rank's recv, and one step ends the call. Only rank me ever
 * touches elements [lo, hi) of any rank's buffers, so in place is safe. If only some
 * ranks pass buffers, every rank sees that from the announcements and all take the
 * copying path; the ranks with buffers copy in after announcing, and one step more
 * tells the others it is there.
 *
 * Kernel copy (LS_KCOPY_ALLREDUCE: far apart, or LOCKSTEP_KERNEL_COPY_WIDE): as
 * zero-copy, but each rank reads its 1/N of every peer's private send with
 * process_vm_readv and writes the result into every peer's recv with
 * process_vm_writev (ls_kcopy_reduce). */
#include <errno.h>
#include <string.h>

#include "comm_impl.h"

/* Copy the parts of an n-element chunk that the others reduce into my slot; mine is
 * read straight from send. */
static void copy_in(lockstep_comm_t *c, const char *src, size_t n, size_t es, char *slot)
{
    size_t lo = n * (size_t)c->rank / (size_t)c->size, hi = n * (size_t)(c->rank + 1) / (size_t)c->size;
    ls_comm_copy(c, slot, src, lo * es);
    ls_comm_copy(c, slot + hi * es, src + hi * es, (n - hi) * es);
}

/* The small path with 3 or more ranks asks for every peer's slot before reducing
 * (prefetch_max_bytes, LS_PREFETCH_MAX by default) */
static void prefetch_peers(const void *const *in, int N, int me, size_t bytes)
{
    for (int k = 0; k < N; k++)
        for (size_t at = 0; k != me && at < bytes; at += 64)
            __builtin_prefetch((const char *)in[k] + at);
}

/* After the announcement: every rank reduces its 1/N from all sends into all recvs. */
static int allreduce_zero_copy(lockstep_comm_t *c, size_t count, size_t es, lockstep_dtype_t dtype,
                               lockstep_op_t op)
{
    int N = c->size, me = c->rank;
    size_t lo = count * (size_t)me / (size_t)N, hi = count * (size_t)(me + 1) / (size_t)N;
    const void *in[LOCKSTEP_COMM_MAX_RANKS];
    void *out[LOCKSTEP_COMM_MAX_RANKS];
    for (int k = 0; k < N; k++) {
        struct ls_zc_offsets o = ls_zc_announced(c, k);
        in[k] = ls_buf(c, k) + o.send + lo * es;
        out[k] = ls_buf(c, k) + o.recv + lo * es;
    }
    /* out[0] is rank 0's recv: in place it is in[0], otherwise no input */
    ls_comm_reduce(c, dtype, op, out[0], out + 1, N - 1, in, N, hi - lo);
    return ls_comm_step(c, ls_comm_deadline(c));
}

/* Piece by piece, so that each piece stays in the cache between the read, the
 * reduction and the writes. The chunk slots hold the pieces read: no peer reads them
 * in this call, nor still from my last once all have announced. */
int ls_kcopy_reduce(lockstep_comm_t *c, lockstep_dtype_t dtype, lockstep_op_t op, const void *mine, void *out,
                    uint64_t at, size_t n, int write_back)
{
    int N = c->size, me = c->rank, rc;
    size_t es = lockstep_dtype_size(dtype);
    size_t piece = 2 * c->hdr->chunk_bytes / (size_t)(N - 1); /* >= 8192 / 255 bytes */
    piece = (piece < LS_KCOPY_PIECE ? piece : LS_KCOPY_PIECE) / es;
    char *tmp = ls_chunk(c, me, 0); /* chunk slots 0 and 1 lie end to end */
    const void *in[LOCKSTEP_COMM_MAX_RANKS];
    for (size_t off = 0; off < n; off += piece) {
        size_t m = n - off < piece ? n - off : piece;
        uint64_t from = at + off * es;
        for (int i = 1; i < N; i++) {
            int k = (me + i) % N; /* rotated: ranks start on different peers */
            in[k] = tmp + (size_t)(i - 1) * piece * es;
            if ((rc = ls_kcopy_read(c, k, tmp + (size_t)(i - 1) * piece * es, from, m * es)) != 0)
                return rc;
        }
        in[me] = (const char *)mine + off * es;
        char *to = (char *)out + off * es;
        ls_reduce(dtype, op, to, NULL, 0, in, N, m);
        for (int i = 1; write_back && i < N; i++)
            if ((rc = ls_kcopy_write(c, (me + i) % N, to, from, m * es)) != 0)
                return rc;
    }
    return 0;
}

static int allreduce(lockstep_comm_t *c, const void *send, void *recv, size_t count, lockstep_dtype_t dtype,
                     lockstep_op_t op)
{
    size_t es = lockstep_dtype_size(dtype);
    if (!es || (unsigned)op > LOCKSTEP_OP_MIN || (count && (!send || !recv)) ||
        count > SIZE_MAX / es)
        return -EINVAL;
    size_t bytes = count * es;
    if (send != recv && ls_overlap(send, recv, bytes))
        return -EINVAL;
    int N = c->size, me = c->rank, rc;
    if (N == 1) /* the result is the input, bit for bit */
        return ls_comm_alone(c, recv, send, bytes);
    if ((rc = ls_comm_settle(c)) != 0)
        return rc;
    const void *in[LOCKSTEP_COMM_MAX_RANKS];
    unsigned b = (c->seq + 1) & 1; /* this call's announcement and small slot */

    if (bytes <= LS_INLINE_BYTES) { /* the payload rides in the announcement */
        size_t at = ls_inline_at(bytes);
        if (bytes)
            memcpy(ls_ctl(c, me)->ann[b].data + at, send, bytes);
        c->route = LOCKSTEP_ROUTE_INLINE;
        rc = ls_comm_announce(c, LS_CALL_ALLREDUCE, op, dtype, 0, count, 1);
        if (rc)
            return rc;
        for (int k = 0; k < N; k++)
            in[k] = k == me ? send : (const void *)(ls_ctl(c, k)->ann[b].data + at);
        ls_reduce(dtype, op, recv, NULL, 0, in, N, count);
        return 0;
    }

    int small = bytes <= c->hdr->allreduce_small;
    struct ls_zc_offsets mine = {LS_NO_OFFSET, LS_NO_OFFSET};
    if ((!small || bytes >= c->zc_min * c->per_cpu) &&
        (mine.recv = ls_buffer_offset(c, recv, bytes)) != LS_NO_OFFSET)
        mine.send = ls_buffer_offset(c, send, bytes);
    int zc_mine = mine.send != LS_NO_OFFSET; /* send alone in the buffer counts as none */

    /* Small: copy in to small[b]. Large: chunk j goes through chunk slot (first + j) & 1;
     * first avoids the slot peers may still be reading for my last call, and if both
     * may be (after a large broadcast), chunk 0 waits for the announcement as the
     * others wait for a step; else chunk 0 is copied in before announcing. Ranks with
     * buffers copy nothing before they know whether every rank has one. */
    static const struct ls_kcopy_window words = LS_KCOPY_ALLREDUCE, halves = LS_KCOPY_ALLREDUCE_HALF;
    int offer = !small && !zc_mine && !c->pool && ls_kcopy_offer(c, es == 2 ? halves : words, bytes);
    size_t per_chunk = c->hdr->step_bytes / es;
    unsigned first = c->busy == 0 ? 1 : 0;
    int may_early = !small && c->busy != LS_BUSY_BOTH; /* (the announcement resets c->busy) */
    int copied = !zc_mine && !offer && (small || may_early);
    const char *src = send;
    char *dst = recv;
    if (copied && small)
        memcpy(ls_small(c, me, b), send, bytes);
    else if (copied)
        copy_in(c, src, count < per_chunk ? count : per_chunk, es, ls_chunk(c, me, first));
    /* The offsets go into the announcement after the copy, not before: peers poll that
     * line, and one that reads it while the copy runs takes it back, so the
     * announcement's own stores would have to fetch it again. */
    ls_zc_post(c, mine.send, mine.recv);
    if (!small) { /* every rank posts, so that every rank counts the same */
        ls_kcopy_post(c, offer ? send : NULL, recv);
        ls_kcopy_post_early(c, copied);
    }
    rc = ls_comm_announce(c, LS_CALL_ALLREDUCE, op, dtype, 0, count, 1);
    if (rc)
        return rc;
    int zc = ls_zc_count(c); /* ranks that passed buffers, as every rank sees it */
    c->route = zc == N ? LOCKSTEP_ROUTE_ZERO_COPY : small ? LOCKSTEP_ROUTE_SMALL : LOCKSTEP_ROUTE_CHUNKED;
    if (zc == N)
        return allreduce_zero_copy(c, count, es, dtype, op);
    if (!small && ls_kcopy_count(c) == N) { /* my 1/N from every send into every recv */
        c->route = LOCKSTEP_ROUTE_KERNEL_COPY;
        size_t lo = count * (size_t)me / (size_t)N, hi = count * (size_t)(me + 1) / (size_t)N;
        rc = ls_kcopy_reduce(c, dtype, op, (const char *)send + lo * es, (char *)recv + lo * es, lo * es, hi - lo, 1);
        return rc ? rc : ls_comm_step(c, ls_comm_deadline(c)); /* every recv is complete */
    }

    if (small) {
        if (zc) { /* some ranks passed buffers: they copy in now, and say so */
            if (!copied)
                memcpy(ls_small(c, me, b), send, bytes);
            if ((rc = ls_comm_step(c, ls_comm_deadline(c))) != 0)
                return rc;
        }
        for (int k = 0; k < N; k++)
            in[k] = k == me ? send : ls_small(c, k, b);
        if (N > 2 && bytes * (size_t)(N - 1) <= c->prefetch_max)
            prefetch_peers(in, N, me, bytes);
        ls_reduce(dtype, op, recv, NULL, 0, in, N, count);
        return 0;
    }

    int early = copied && ls_kcopy_early_peers(c); /* every rank copied chunk 0 early:
                                                     no step for it */
    uint64_t deadline = ls_comm_deadline(c);
    unsigned j = 0;
    for (size_t off = 0; off < count; off += per_chunk, j++) {
        size_t n = count - off < per_chunk ? count - off : per_chunk;
        unsigned cb = (first + j) & 1;
        size_t lo = n * (size_t)me / (size_t)N, hi = n * (size_t)(me + 1) / (size_t)N;
        if (j > 0 || !early) {
            if (j > 0 || !copied)
                copy_in(c, src + off * es, n, es, ls_chunk(c, me, cb));
            if ((rc = ls_comm_step(c, deadline)) != 0)
                return rc;
        }
        for (int k = 0; k < N; k++)
            in[k] = k == me ? (const void *)(src + (off + lo) * es) : (const void *)(ls_chunk(c, k, cb) + lo * es);
        void *also = ls_chunk(c, me, cb) + lo * es;
        ls_comm_reduce(c, dtype, op, dst + (off + lo) * es, &also, 1, in, N, hi - lo);
        if ((rc = ls_comm_step(c, deadline)) != 0)
            return rc;
        for (int i = 1; i < N; i++) {
            int k = (me + i) % N; /* rotated: ranks start on different peers */
            size_t klo = n * (size_t)k / (size_t)N, khi = n * (size_t)(k + 1) / (size_t)N;
            ls_comm_copy(c, dst + (off + klo) * es, ls_chunk(c, k, cb) + klo * es, (khi - klo) * es);
        }
        c->busy = (int)cb;
    }
    return 0;
}

int lockstep_comm_allreduce(lockstep_comm_t *c, const void *send, void *recv, size_t count,
                            lockstep_dtype_t dtype, lockstep_op_t op)
{
    int rc = ls_comm_enter(c);
    if (rc)
        return rc;
    uint32_t s = c->seq;
    return ls_comm_end(c, s, allreduce(c, send, recv, count, dtype, op));
}
