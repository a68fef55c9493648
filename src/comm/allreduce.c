/* Allreduce.
 *
 * Small (count * size <= allreduce_small_bytes, capped at small_bytes): copy in to
 * small[s & 1] (up to 100 bytes: into the announcement itself), announce (which
 * publishes the payload), then reduce every rank's copy, in rank order, straight into
 * recv (my own input read from send, not from my slot or announcement: see
 * lockstep_comm in comm_impl.h). One synchronisation per call; no closing barrier,
 * because a slot is only rewritten two calls later (see comm_impl.h).
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
 * bits.
 *
 * Zero-copy (send and recv inside the caller's lockstep_comm_buffer on every rank, and
 * at least ZERO_COPY_MIN bytes): each rank puts its offsets in its announcement
 * (ann.data, which only the tiny path uses otherwise); once all have announced, each
 * rank reduces its 1/N of the elements from every rank's send straight into every
 * rank's recv, and one step ends the call (every recv is complete, and no one still
 * reads a send). Only rank me ever touches elements [lo, hi) of any rank's buffers, so
 * in place is safe. Per rank, the message is read once and written once, against about
 * 2.5 reads and 2 writes of it on the copying path at 4 ranks. If only some ranks pass
 * buffers, every rank sees that from the announcements and all take the copying path;
 * the ranks with buffers copy in after announcing (small: into small[s & 1], large:
 * chunk 0), and one step more tells the others it is there. */
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

/* The small path with 3 or more ranks: every peer's slot is asked for before the
 * reduction starts, so that its misses overlap instead of coming one input at a time
 * (the reduction reads the inputs one after the other), as long as all of them
 * together are at most PREFETCH_MAX bytes. Against not asking, same processes (median
 * of 7-9 paired batches, both orders): 3 ranks on 2 CPUs, 256 B 0.90-0.98x the time,
 * 1 KiB 0.84-0.95x, 2 KiB 0.86-0.89x, 4 KiB 0.87-0.98x; 4 ranks, 256 B-1 KiB
 * 0.91-0.96x, 2 KiB 0.90-0.99x, but 4 KiB a tie and 8 KiB 1.08x; 8 ranks, 128 B-1
 * KiB 0.94-0.99x, 2 KiB a tie. With 2 ranks (one input, read in one pass anyway) it
 * lost: 4-8 KiB 1.14-1.19x. */
#define PREFETCH_MAX ((size_t)8 * 1024)

static void prefetch_peers(const void *const *in, int N, int me, size_t bytes)
{
    for (int k = 0; k < N; k++)
        for (size_t at = 0; k != me && at < bytes; at += 64)
            __builtin_prefetch((const char *)in[k] + at);
}

/* Below this an all-buffer call still takes the small path: its one synchronisation
 * beats zero-copy's two. 2 ranks: 512 B 0.7 against 0.9 us, 1 KiB 1.2 against 0.9
 * (scratch runs, median of 9 batches, both paths interleaved). When ranks outnumber
 * the CPUs, every synchronisation costs process switches and the small path wins
 * longer, so the bound is ZERO_COPY_MIN times the ranks per CPU (c->per_cpu), for
 * calls that take the small path at all. Against zero-copy from 1 KiB, same
 * processes, all buffers in the shared buffer (median of 7-9 paired batches, both
 * orders): 3 ranks on 2 CPUs, 1 KiB 0.61-0.66x the time, 1.5 KiB 0.85-0.94x; 4 ranks,
 * 1 KiB 0.61-0.75x, 1.5 KiB 0.87-0.96x; 8 ranks, 1 KiB 0.58-0.64x, 2-3 KiB
 * 0.82-0.92x. Past the bound zero-copy wins: 4 ranks, 2 KiB 0.85-0.91x the small
 * path's time, 4 KiB 0.80x, 6 KiB 0.65-0.70x; 8 ranks, 5 KiB 0.95x, 6 KiB
 * 0.85-0.87x (at 4 KiB the small path was still 0.94-0.98x). */
#define ZERO_COPY_MIN 1024


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

/* Single copy (every rank's c->cma, no pool, no shared buffers; with ranks that fit
 * the CPUs at least SINGLE_COPY_MIN bytes, SINGLE_COPY_MIN_HALF for f16 and bf16, or
 * from SINGLE_COPY_PICK_MIN when rank 0 picks it; with more ranks than CPUs, up to
 * PICK_PER_CPU_MAX per CPU, from SINGLE_COPY_PICK_MIN at any size when rank 0 picks
 * it): as
 * zero-copy, each rank reduces its 1/N of the elements over every rank's send into
 * every rank's recv, but through the kernel, from and to the peers' private memory:
 * process_vm_readv of its part of each peer's send into my chunk slots (free: no peer
 * reads them in this call, nor still from my last once all have announced), the
 * reduction into my recv, process_vm_writev of the result into each peer's recv.
 * Piece by piece, so that the pieces stay in the cache between the three. One step
 * ends the call, as zero-copy's. Only rank me touches elements [lo, hi) of any rank's
 * buffers, so in place is safe. */
/* 2 ranks, against the slots in the same processes (median of 9 paired batches), with
 * new data in send before every call, f32: 128-160 KiB 1.16-1.23x the time, 176 KiB a
 * tie, 192-384 KiB 0.93-0.97x, 512 KiB 0.93-0.97x, 1 MiB 0.82-0.85x, 4 MiB 0.82x (i32
 * alike: 256 KiB 0.94-0.97x); with the same data every call 0.55-0.66x from 128 KiB
 * (that flatters it, see LS_CMA_MIN). f16 and bf16 reduce more slowly, and the slots
 * overlap that better: new data, f16 256 KiB a tie, 512 KiB 0.99x, 1 MiB 0.91x; bf16
 * 256-384 KiB 1.07-1.13x, 512 KiB 1.10x, 1 MiB a tie, 4 MiB 0.88x; both keep 512 KiB,
 * where bf16 trades that 1.10x for 0.73x with the same data. On the first machine f32
 * tied at 256 KiB and won from 384 KiB.
 * With more ranks than CPUs it lost in the usual stretches (4 ranks on 2, unchanged
 * data: 128 KiB 1.45-1.6x, 16 MiB 1.16-1.29x; new data: 1 MiB 1.03-1.06x, 16 MiB
 * 1.21x; only 4 MiB won, 0.93x), but won where the host had moved the vCPUs apart
 * (see below: there the slots of 4 ranks on 2 CPUs took 12970 us at 16 MiB in one
 * benchmark run, 1.24x MPI_Allreduce's, against 4029 in the run before). So with more
 * ranks than CPUs (up to PICK_PER_CPU_MAX per CPU) rank 0 picks from
 * SINGLE_COPY_PICK_MIN up, at any size and kernel copy speed. 4 ranks, f32, new data every call, median of 7 calls per round, in us,
 * the pick (the slots alone, MPI): 8 apart rounds (round trip 212-259 ns), 1 MiB
 * 427-1308 (884-1105, 1461-1806), 4 MiB 2453-3904 (3867-4801, 4046-5158), 16 MiB
 * 10013-12462 (15661-18042, 13992-19505); 20 usual rounds (63-82 ns), within each
 * round's noise of the slots at 256 KiB, 1 MiB and 16 MiB (16 MiB: 6777-11935 against
 * 6711-14337).
 * Where kernel copies are slow (ls_cma_slow) it usually loses: on a later machine that
 * also showed itself as AMD EPYC with 2 vCPUs, but whose process_vm_readv took 3.6-4x
 * memcpy's time, 2 ranks, f32, new data: 256 KiB 1.58x, 512 KiB 2.00x, 1 MiB 1.91x,
 * 4-16 MiB 1.65-1.68x; unchanged data 1.03x at 256 KiB, 1.88-2.07x at 1-4 MiB. But
 * on the same machine, in stretches where its host had moved the vCPUs apart, the
 * slots took 2.4-4.7x their usual time and single copy won by 2.1-4.2x (pick.h). So
 * there rank 0 picks between the two by timing both: it offers single copy or not,
 * and the others offer it in every such call (their offer alone never decides), so
 * the call goes rank 0's way. They read rank 0's last choice for the class from the
 * state line only to know whether to copy chunk 0 before announcing (see `early`).
 * Rank 0 times from its decision to its return, less its wait in the announcement
 * (the others' late arrival is not the way's cost). */
#define SINGLE_COPY_MIN ((size_t)256 * 1024)      /* f32, i32 */
#define SINGLE_COPY_MIN_HALF ((size_t)512 * 1024) /* f16, bf16 */

/* Below those, from this size (past the small path), rank 0 picks between the slots
 * and single copy by timing both at any kernel copy speed, as it does past them where
 * kernel copies are slow: on the same machine, in stretches where the host had moved
 * the vCPUs apart (a cache line's round trip 493-560 ns), the slots took 35.6 us at
 * 64 KiB, 0.78x MPI_Allreduce's 45.9 (usual stretches: 9-10 against 18), where 16 KiB
 * on the small path took 0.52x and 256 KiB, by single copy, 0.26x (2 ranks, f32, new
 * data every call, median of 7 calls per round over 8 rounds). With the pick (20
 * rounds apart, round trip 464-484 ns, and 20 usual, 113-128 ns; the same harness;
 * the slots alone, MPI): apart 64 KiB 13 (35.5, 45), 128 KiB 21 (69, 83), 256 KiB
 * 37.5 (120, 158); usual 12 (11, 18), 19 (18, 35), 32 (25, 61): in the usual rounds
 * that follow apart ones, single copy runs on until a look finds the slots cheaper
 * again (single copy took 31.5 at 256 KiB). */
#define SINGLE_COPY_PICK_MIN ((size_t)64 * 1024)

/* With more ranks than CPUs, rank 0 picks only up to this many ranks per CPU (4 ranks
 * on 2 CPUs); past it the slots stay the only way, as they were. At 8 ranks on the 2
 * vCPUs the pick went astray: the benchmark's lockstep row took 66.3 us at 64 KiB and
 * 674 at 1 MiB, against 39.8 and 395 for lockstep-mpi, the same calls on another
 * communicator whose record had kept to the slots (386 at 1 MiB before the pick). With
 * 4 ranks waiting per CPU, rank 0's wait for the others, which it counts there (see
 * ls_comm_announce), is most of what it times. */
#define PICK_PER_CPU_MAX 2

static int allreduce_single_copy(lockstep_comm_t *c, const void *send, void *recv, size_t count, size_t es,
                                 lockstep_dtype_t dtype, lockstep_op_t op)
{
    int N = c->size, me = c->rank, rc;
    size_t lo = count * (size_t)me / (size_t)N, hi = count * (size_t)(me + 1) / (size_t)N;
    size_t piece = 2 * c->hdr->chunk_bytes / (size_t)(N - 1); /* >= 8192 / 255 bytes */
    piece = (piece < LS_CMA_PIECE ? piece : LS_CMA_PIECE) / es;
    char *tmp = ls_chunk(c, me, 0), *out = recv; /* chunk slots 0 and 1 lie end to end */
    const void *in[LOCKSTEP_COMM_MAX_RANKS];
    for (size_t off = lo; off < hi; off += piece) {
        size_t n = hi - off < piece ? hi - off : piece;
        for (int i = 1; i < N; i++) {
            int k = (me + i) % N; /* rotated: ranks start on different peers */
            in[k] = tmp + (size_t)(i - 1) * piece * es;
            if ((rc = ls_cma_read(c, k, tmp + (size_t)(i - 1) * piece * es, off * es, n * es)) != 0)
                return rc;
        }
        in[me] = (const char *)send + off * es;
        ls_reduce(dtype, op, out + off * es, NULL, 0, in, N, n);
        for (int i = 1; i < N; i++)
            if ((rc = ls_cma_write(c, (me + i) % N, out + off * es, off * es, n * es)) != 0)
                return rc;
    }
    return ls_comm_step(c, ls_comm_deadline(c)); /* every recv is complete */
}

static int allreduce(lockstep_comm_t *c, const void *send, void *recv, size_t count, lockstep_dtype_t dtype,
                     lockstep_op_t op)
{
    size_t es = lockstep_dtype_size(dtype);
    if (!es || (unsigned)op > LOCKSTEP_MIN || (count && (!send || !recv)) ||
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
    if ((!small || bytes >= ZERO_COPY_MIN * c->per_cpu) &&
        (mine.recv = ls_buffer_offset(c, recv, bytes)) != LS_NO_OFFSET)
        mine.send = ls_buffer_offset(c, send, bytes);
    int zc_mine = mine.send != LS_NO_OFFSET; /* send alone in the buffer counts as none */

    /* Small: copy in to small[b]. Large: chunk j goes through chunk slot (first + j) & 1;
     * first avoids the slot peers may still be reading for my last call, and if both
     * may be (after a large broadcast), chunk 0 waits for the announcement as the
     * others wait for a step; else chunk 0 is copied in before announcing. Ranks with
     * buffers copy nothing before they know whether every rank has one. */
    size_t cma_min = es == 2 ? SINGLE_COPY_MIN_HALF : SINGLE_COPY_MIN;
    int cma_ok = !small && !zc_mine && c->cma && !c->pool && c->per_cpu <= PICK_PER_CPU_MAX;
    int cma_try = cma_ok && ls_fits(c) && bytes >= cma_min;
    int by_slots = !cma_try; /* the way this rank expects the call to go */
    if (cma_ok && bytes >= SINGLE_COPY_PICK_MIN && (bytes < cma_min || ls_cma_slow(c) || !ls_fits(c))) {
        /* rank 0 picks, by timing both ways (pick.h); the others offer single copy */
        int cls = LS_PICK_ALLREDUCE + (es == 2) * LS_PICK_SIZES + ls_pick_size(bytes, SINGLE_COPY_PICK_MIN), held;
        cma_try = ls_pick_offer(c, cls, bytes, 0, &held);
        by_slots = !held;
    }
    size_t per_chunk = c->hdr->step_bytes / es;
    unsigned first = c->busy == 0 ? 1 : 0;
    int may_early = !small && c->busy != LS_BUSY_BOTH; /* (the announcement resets c->busy) */
    int copied = !zc_mine && by_slots && (small || may_early);
    const char *src = send;
    char *dst = recv;
    if (copied && small)
        memcpy(ls_small(c, me, b), send, bytes);
    else if (copied)
        copy_in(c, src, count < per_chunk ? count : per_chunk, es, ls_chunk(c, me, first));
    /* The offsets go into the announcement after the copy, not before: peers poll that
     * line, and one that reads it while the copy runs takes it back, so the
     * announcement's own stores must fetch it again. 2 ranks, 256 B: 0.90x the time of
     * posting first (both libraries alternating in the same processes, median of 21
     * paired batches; 1 KiB 0.98x, 4 ranks 0.98x) */
    ls_zc_post(c, mine.send, mine.recv);
    if (!small) { /* every rank posts, so that every rank counts the same */
        ls_cma_post(c, cma_try ? send : NULL, recv);
        ls_cma_post_early(c, copied);
    }
    rc = ls_comm_announce(c, LS_CALL_ALLREDUCE, op, dtype, 0, count, 1);
    if (rc)
        return rc;
    int zc = ls_zc_count(c); /* ranks that passed buffers, as every rank sees it */
    if (zc == N)
        return allreduce_zero_copy(c, count, es, dtype, op);
    int cma = small ? 0 : ls_cma_count(c); /* ranks that may move data by single copy */
    ls_pick_way(c, cma == N ? 1 : cma_try ? -1 : ls_pick_slots(c, copied));
    if (cma == N)
        return allreduce_single_copy(c, send, recv, count, es, dtype, op);

    if (small) {
        if (zc) { /* some ranks passed buffers: they copy in now, and say so */
            if (!copied)
                memcpy(ls_small(c, me, b), send, bytes);
            if ((rc = ls_comm_step(c, ls_comm_deadline(c))) != 0)
                return rc;
        }
        for (int k = 0; k < N; k++)
            in[k] = k == me ? send : ls_small(c, k, b);
        if (N > 2 && bytes * (size_t)(N - 1) <= PREFETCH_MAX)
            prefetch_peers(in, N, me, bytes);
        ls_reduce(dtype, op, recv, NULL, 0, in, N, count);
        return 0;
    }

    int early = copied && !small && ls_cma_early_peers(c); /* every rank copied chunk 0
                                                               early: no step for it */
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
