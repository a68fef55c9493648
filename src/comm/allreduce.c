/* Allreduce.
 *
 * Small (count * size <= allreduce_small_bytes, capped at small_bytes): copy in to
 * small[s & 1] (up to 100 bytes: into the announcement itself), announce (which
 * publishes the payload), then reduce every rank's copy, in rank order, straight into
 * recv. One synchronisation per call; no closing barrier, because a slot is only
 * rewritten two calls later (see comm_impl.h).
 *
 * Large: per chunk of step_bytes (chunk_bytes, smaller when oversubscribed; see
 * comm.c), double-buffered:
 *   1. copy my chunk, except my own 1/N of it, into my chunk slot; step (all chunks
 *      are in). For chunk 0 the announcement is that step: when no peer can still be
 *      reading the slot it goes to (c->busy), chunk 0 is copied in before announcing.
 *      2 ranks, 64 KiB: 15 us instead of 22; 4 ranks on 2 CPUs: 32-36 us instead of
 *      43-50;
 *   2. reduce-scatter: reduce my 1/N of the chunk over all ranks, in rank order, into
 *      recv (my own input read straight from send, which may be recv itself) and, in
 *      the same pass, into my slot's part; step (all parts are reduced);
 *   3. allgather: copy every other rank's reduced part into recv.
 * Each element is reduced once, by one rank, in rank order, so all ranks hold the same
 * bits. */
#include <errno.h>
#include <string.h>

#include "comm_impl.h"

static int overlap(const void *a, const void *b, size_t n)
{
    const char *x = a, *y = b;
    return n && x < y + n && y < x + n;
}

/* Copy the parts of an n-element chunk that the others reduce into my slot; mine is
 * read straight from send. */
static void copy_in(lockstep_comm_t *c, const char *src, size_t n, size_t es, char *slot)
{
    size_t lo = n * (size_t)c->rank / (size_t)c->size, hi = n * (size_t)(c->rank + 1) / (size_t)c->size;
    ls_comm_copy(c, slot, src, lo * es);
    ls_comm_copy(c, slot + hi * es, src + hi * es, (n - hi) * es);
}

int lockstep_comm_allreduce(lockstep_comm_t *c, const void *send, void *recv, size_t count,
                            lockstep_dtype_t dtype, lockstep_op_t op)
{
    size_t es = lockstep_dtype_size(dtype);
    if (!c || !es || (unsigned)op > LOCKSTEP_MIN || (count && (!send || !recv)) ||
        count > SIZE_MAX / es)
        return -EINVAL;
    size_t bytes = count * es;
    if (send != recv && overlap(send, recv, bytes))
        return -EINVAL;
    int N = c->size, me = c->rank, rc;
    const void *in[LOCKSTEP_COMM_MAX_RANKS];

    if (bytes <= c->hdr->allreduce_small) {
        unsigned b = (c->seq + 1) & 1;
        int tiny = bytes <= LS_INLINE_BYTES; /* the payload rides in the announcement */
        if (bytes)
            memcpy(tiny ? ls_ctl(c, me)->ann[b].data : (unsigned char *)ls_small(c, me, b), send, bytes);
        rc = ls_comm_announce(c, LS_CALL_ALLREDUCE, op, dtype, 0, count, 1);
        if (rc)
            return rc;
        for (int k = 0; k < N; k++)
            in[k] = tiny ? (const void *)ls_ctl(c, k)->ann[b].data : (const void *)ls_small(c, k, b);
        ls_reduce(dtype, op, recv, NULL, in, N, count);
        return 0;
    }

    /* chunk j goes through chunk slot (first + j) & 1; first avoids the slot peers may
     * still be reading for my last call, and if both may be (after a large broadcast),
     * chunk 0 waits for the announcement as the others wait for a step */
    size_t per_chunk = c->hdr->step_bytes / es;
    unsigned first = c->busy == 0 ? 1 : 0;
    int early = c->busy != LS_BUSY_BOTH;
    const char *src = send;
    char *dst = recv;
    if (early)
        copy_in(c, src, count < per_chunk ? count : per_chunk, es, ls_chunk(c, me, first));
    rc = ls_comm_announce(c, LS_CALL_ALLREDUCE, op, dtype, 0, count, 1);
    if (rc)
        return rc;
    uint64_t deadline = ls_comm_deadline(c);
    unsigned j = 0;
    for (size_t off = 0; off < count; off += per_chunk, j++) {
        size_t n = count - off < per_chunk ? count - off : per_chunk;
        unsigned b = (first + j) & 1;
        size_t lo = n * (size_t)me / (size_t)N, hi = n * (size_t)(me + 1) / (size_t)N;
        if (j > 0 || !early) {
            copy_in(c, src + off * es, n, es, ls_chunk(c, me, b));
            if ((rc = ls_comm_step(c, deadline)) != 0)
                return rc;
        }
        for (int k = 0; k < N; k++)
            in[k] = k == me ? (const void *)(src + (off + lo) * es) : (const void *)(ls_chunk(c, k, b) + lo * es);
        ls_comm_reduce(c, dtype, op, dst + (off + lo) * es, ls_chunk(c, me, b) + lo * es, in, N, hi - lo);
        if ((rc = ls_comm_step(c, deadline)) != 0)
            return rc;
        for (int i = 1; i < N; i++) {
            int k = (me + i) % N; /* rotated: ranks start on different peers */
            size_t klo = n * (size_t)k / (size_t)N, khi = n * (size_t)(k + 1) / (size_t)N;
            ls_comm_copy(c, dst + (off + klo) * es, ls_chunk(c, k, b) + klo * es, (khi - klo) * es);
        }
        c->busy = (int)b;
    }
    return 0;
}
