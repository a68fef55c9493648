/* Broadcast and allgather, with a choice of peer order and of who copies:
 *   PULL — the data stays in its owner's slot and each receiver copies it out;
 *   PUSH — the owner writes it into every receiver's own slot, in the given order,
 *          and receivers copy from their own slot.
 * Small payloads travel with the announcement (small[s & 1]); those of up to
 * LS_INLINE_BYTES ride in it (ann.data), whatever the transfer, as the tiny
 * allreduce's do: the line that shows the sender's arrival brings the data too (2
 * ranks, 64 B broadcast: see CHANGELOG).
 * A large broadcast is a pipeline through a ring of pieces over both chunk slots: the
 * root writes piece j and publishes its step word (base + j + 1); each receiver waits
 * for that word on the root alone, copies the piece and publishes its own word. The
 * root waits for the receivers only before it overwrites a piece of the ring, so a
 * receiver copies piece j while the root writes piece j + 1, and no receiver waits for
 * another. Every rank ends the call with the same step count, and the next call's
 * announcement (which waits for all ranks) orders the receivers' last reads before the
 * root writes the ring again.
 * A large allgather goes in chunks through chunk[j & 1], one step per chunk: a chunk
 * slot is rewritten two chunks later, after every rank has passed the step that
 * follows its reads.
 *
 * Zero-copy PUSH, when every receiver's buffer lies in its lockstep_comm_buffer (each
 * at any offset, which its announcement carries): a broadcast past small_bytes (or from
 * SMALL_ZERO_COPY_MIN for all receivers together, when the root's buf lies in its
 * buffer too), or an allgather past the small path. The sender copies straight into
 * each receiver's buffer, in the order, and one step tells that all copies are done.
 * Per receiver one copy, from the sender's cache, and none through the slots. A
 * broadcast of RELAY_MIN or more among 3 or more ranks is relayed instead: one step per
 * piece, each receiver passing the piece on to the next in the root's order. A
 * broadcast whose root's buf lies in its buffer too is shared otherwise: with 2 ranks
 * the receiver copies half of it from the root's buf while the root copies the other
 * half, with more (under RELAY_MIN) each receiver copies it all; then the root waits
 * until every receiver has its copy (split_broadcast). Otherwise every rank takes the
 * copying path, as they all see the same announcements. PULL has no zero-copy form: the
 * receivers reading the sender's buffer themselves was no faster than the slots with
 * fresh data each call (the pipelined broadcast won at 4 ranks by up to 1.8x, the
 * allgather tied; see CHANGELOG).
 * Single copy, broadcasts of BCAST_CMA_LOW to BCAST_CMA_HIGH, small or not, or of
 * BCAST_CMA_MIN or more, between 2 ranks that fit the CPUs (and not zero-copy): the
 * root writes the first half into the receiver's buf while the receiver reads the
 * second half from the root's, each a single copy (split_broadcast). Past
 * BCAST_CMA_HIGH where that is not the fixed way (below BCAST_CMA_MIN, or kernel
 * copies slow), and from BCAST_SMALL_PICK_MIN below BCAST_CMA_LOW, the receiver picks
 * between it and the slots by timing both (pick.h).
 * Single copy, allgathers of ALLGATHER_CMA_MIN or more while ranks fit the CPUs (PUSH:
 * ALLGATHER_CMA_MIN_PUSH, or ALLGATHER_CMA_MIN_PUSH_OVERSUBSCRIBED when ranks outnumber
 * them) and every rank can reach its peers (and not zero-copy PUSH): with PULL each
 * rank reads every peer's block straight from its send into recv, with PUSH it writes
 * its block into every peer's recv; one step ends the call. Where kernel copies are
 * slow, past PUSH's window and from ALLGATHER_PICK_MIN_PULL for PULL, rank 0 picks
 * between it and the slots by timing both (pick.h), and so it does on the small path
 * from ALLGATHER_SMALL_PICK_MIN (whatever the kernel's copy speed): there a rank holds
 * its copy into the slots back while rank 0's last choice was single copy, and if the
 * call goes through the slots after all, those that held copy after announcing, and
 * one step more.
 * The transfer is part of the call (the descriptor's op field): ranks that disagree on
 * it fail with LOCKSTEP_EMISMATCH, as they would copy from slots no one wrote. */
#include <errno.h>
#include <string.h>

#include "comm_impl.h"

static int bad_order(lockstep_order_t order, lockstep_xfer_t xfer)
{
    return (unsigned)order > LOCKSTEP_ORDER_TOPOLOGY || (unsigned)xfer > LOCKSTEP_PUSH;
}

/* The smallest blocks an allgather moves straight between the ranks' own memory
 * (cma.c): PULL reads each peer's block from its send (process_vm_readv), only while
 * ranks fit the CPUs; PUSH writes mine into each peer's recv (process_vm_writev), at
 * any rank count. Each block is copied once instead of twice through the slots (PUSH:
 * N - 1 copies per rank instead of 2 * (N - 1)). Against the slots, in the same
 * processes (median of 7-9 paired batches), new data in send before every call:
 *   2 ranks, PULL: blocks of 320 KiB 1.21x the time, 512 KiB 1.06x (on the first
 *   machine 1.07-1.15x), 1-8 MiB 0.88-0.90x (unchanged data: 0.49-0.58x from 320
 *   KiB); PUSH: 160-224 KiB 0.60-0.65x, 320-512 KiB 0.57-0.58x (unchanged data
 *   0.45-0.60x): the writer's copy is the cheaper one (see LS_CMA_MIN). At 2 ranks
 *   PUSH blocks up to 128 KiB take the small path (see params_default).
 *   Ranks outnumbering CPUs, PUSH: 3 ranks on 2 CPUs, blocks of 96 KiB 0.97x, 128
 *   KiB 0.55-0.68x, 256 KiB-4 MiB 0.72-0.74x (unchanged data 0.62-0.88x); 4 ranks,
 *   80 KiB-1 MiB 0.71-0.80x, 4 MiB 0.90x (unchanged 0.53-0.90x); 8 ranks, 64 KiB-1
 *   MiB 0.74-0.85x (unchanged 0.57-0.69x). Smaller blocks take the small path there
 *   (total up to small_bytes: 4 ranks up to 64 KiB blocks, 8 ranks 32 KiB).
 *   PULL lost at 4 ranks on 2 CPUs: 1 MiB blocks a tie, 4 MiB 1.12-1.16x. */
#define ALLGATHER_CMA_MIN ((size_t)1024 * 1024)
#define ALLGATHER_CMA_MIN_PUSH ((size_t)128 * 1024)
#define ALLGATHER_CMA_MIN_PUSH_OVERSUBSCRIBED ((size_t)64 * 1024)
/* Where kernel copies are slow and ranks fit the CPUs (ls_cma_slow), PUSH blocks from
 * ALLGATHER_CMA_MIN_PUSH up to this, and no PULL. AMD EPYC with 2 vCPUs, 2 ranks, new
 * data before every call, the same comparison: PUSH blocks of 160-256 KiB 0.60-0.69x
 * the time (one run of four 0.98-1.20x), 320 KiB 0.77-0.78x, 384 KiB 0.83-0.93x, 448
 * KiB 1.02-1.05x, 512 KiB 1.11-1.14x, 1-4 MiB 1.42-1.53x; PULL 1 MiB 1.68-1.75x, 4 MiB
 * 1.07-1.08x. Ranks outnumbering the CPUs keep the limits above: 4 ranks on the 2
 * vCPUs, PUSH 128 KiB-1 MiB 0.32-0.60x, 4 MiB 0.65-0.70x. */
#define ALLGATHER_CMA_MAX_PUSH_SLOW ((size_t)384 * 1024)
/* Past those limits where kernel copies are slow, and PULL blocks from
 * ALLGATHER_PICK_MIN_PULL (past the small path), rank 0 picks between the slots and
 * single copy by timing both as the job runs (pick.h), for which wins changes while a
 * job runs: on the same machine, in stretches where a cache line took 490-520 ns from
 * one vCPU to the other and back instead of 106-120 (the host had moved them apart),
 * the slots took 1.9-6.6x their usual time and 1.6-4.4x single copy's. 2 ranks,
 * new data before every call, in the same processes (a throwaway harness; median of 7
 * calls per way and round, the order rotated; median over rounds, in us):
 *                 37 usual rounds: slots, single, MPI    23 rounds apart
 *   PULL  1 MiB   83, 118, 108                            499, 199, 199
 *         4 MiB   554, 558, 550                           2129, 908, 893
 *        16 MiB   4257, 5123, 4907                        7984, 5139, 4850
 *   PUSH  1 MiB   83, 109, 105                            548, 130, 204
 *         4 MiB   612, 710, 553                           2304, 523, 901
 *        16 MiB   4469, 5287, 4912                        9186, 4574, 4786
 * With the pick (another 17 usual and 33 apart rounds): PULL 1 MiB 78 and 180 (slots
 * 76 and 498), 4 MiB 491 and 844 (519, 2073); PUSH 1 MiB 86 and 115 (82, 552), 4 MiB
 * 679 and 522 (648, 2313). */
#define ALLGATHER_PICK_MIN_PULL ((size_t)256 * 1024)

/* On the small path, blocks from this size: rank 0 picks between the slots and single
 * copy by timing both (pick.h), at any kernel copy speed, while ranks fit the CPUs.
 * On the 2-vCPU AMD EPYC, in stretches where its host had moved the vCPUs apart (a
 * cache line's round trip 493-560 ns), the small path's slots lost to MPI_Allgather
 * (which reads the peer's send with CMA) by 1.3-3x: 2 ranks, new data before every
 * call, median of 7 calls per round over 8 rounds, in us: PULL 16 KiB 9.26 against
 * 7.29, 64 KiB 36.7 against 16.9, 256 KiB 167 against 55; PUSH 16 KiB 9.29 against
 * 7.46, 64 KiB 37.2 against 17.3 (single copy's PUSH from 128 KiB took 27.5 at 256
 * KiB, MPI 55.9). Below 16 KiB lockstep's slots took 0.53-0.65x MPI's time there.
 * With the pick (17 rounds apart, 15 usual, same harness), apart: PULL 16 KiB 6.64
 * (MPI 7.39), 64 KiB 15.9 (16.8), 256 KiB 52.8 (54.5); PUSH 16 KiB 4.71 (7.40), 64 KiB
 * 8.95 (16.8); usual: PULL 16 KiB 2.70 (4.36), 64 KiB 10.6 (9.19; the slots alone
 * took 10-11 against 9), 256 KiB 32.0 (30.4); PUSH 64 KiB 7.78 (9.22; the slots 10-11). */
#define ALLGATHER_SMALL_PICK_MIN ((size_t)16 * 1024)

/* The smallest broadcasts 2 ranks move by single copy, half each (cma.c), while they
 * fit the CPUs. Against the pipelined slots, same processes (median of 9 paired
 * batches), new data in buf before every call: 2 MiB 0.77x the time, 4 MiB 0.71-0.72x,
 * 16 MiB 0.72x (PUSH and PULL alike); 512 KiB a tie and 1 MiB 1.01-1.06x. Unchanged
 * data: 0.30-0.35x at 512 KiB-1 MiB, 0.56x at 4 MiB, 0.61x at 16 MiB. More ranks than 2
 * fit no CPU count here, so they were not measured and keep the slots. Not where
 * kernel copies are slow (ls_cma_slow): AMD EPYC with 2 vCPUs, new data, 2 MiB
 * 1.34-1.92x the slots' time, 4 MiB 1.43x, 8 MiB 0.91-1.47x, 16 MiB 1.02-1.17x;
 * unchanged data 1.24-1.60x at 2-16 MiB. There, and from BCAST_CMA_HIGH up to this
 * anywhere, the receiver picks between the two by timing both (pick.h): on that
 * machine, in stretches where its host had moved the vCPUs apart (as for the
 * allgather, ALLGATHER_PICK_MIN_PULL), the slots took 1.2-12x their usual time, in us:
 * 1 MiB 415 against 35, 4 MiB 1725 against 141, 16 MiB 2157 against 1744, where
 * single copy took 333 at 4 MiB and 1553 at 16 MiB (MPI_Bcast 647 and 3062). With the
 * pick: 1 MiB 35 usual and 71 apart (slots 35 and 430), 4 MiB 139 and 308 (141,
 * 1685). */
#define BCAST_CMA_MIN ((size_t)2 * 1024 * 1024)

/* Single copy between 2 ranks that fit the CPUs also from BCAST_CMA_LOW up to
 * BCAST_CMA_HIGH, most of it on the small path, whose root otherwise copies into its
 * slot before announcing (there every rank posts whether it can, and a root that can
 * copies nothing first; if the receiver cannot, the root copies into the slots after
 * announcing, one step more: late_copy). Against the slots in the same processes (2
 * ranks, AMD EPYC with 2 vCPUs, median of 9 alternating batches, PULL and PUSH alike),
 * unchanged data: 32 KiB 0.74-1.00x the time, 64 KiB 0.53x, 96-384 KiB 0.36-0.47x,
 * 512 KiB 0.44x, 768 KiB 0.94-0.98x; new data before every call: 32-64 KiB 0.97-1.00x,
 * 96-384 KiB 0.91-0.97x, 512 KiB 1.17-1.24x, 768 KiB 1.05x. OpenMPI's MPI_Bcast, which
 * reads the root's buf with CMA, took 0.70-0.92x the slots' time at 64-512 KiB with
 * unchanged data; single copy takes 0.48-0.63x MPI_Bcast's there (with new data
 * 0.54-0.59x, the slots 0.48-0.61x), so 512 KiB stays in. There kernel copies are
 * slow (LS_KCOPY_SLOW), so this window holds wherever they are faster too. */
#define BCAST_CMA_LOW ((size_t)64 * 1024)
#define BCAST_CMA_HIGH ((size_t)512 * 1024)

/* Below BCAST_CMA_LOW, from this size, on the small path: the receiver of a broadcast
 * between 2 ranks that fit the CPUs picks between the slots and single copy by timing
 * both (pick.h), at any kernel copy speed, as it picks past BCAST_CMA_HIGH. The root
 * posts single copy in every such call and holds its copy into the slot back while the
 * receiver's last choice (in the state line) was single copy; each posts whether it
 * copied in before announcing, and a call through the slots whose root held back copies
 * late (late_copy), untimed. On the 2-vCPU AMD EPYC (a throwaway harness: per round,
 * the round trip between the ranks, then the median of 5 batches of 100 calls back to
 * back per way, the slowest rank's mean, PULL; in us, the slots / single copy /
 * MPI_Bcast): in a stretch where the host had moved the vCPUs apart (round trip 243-263
 * ns), unchanged data, 16 KiB 7.0-8.7 / 3.2-4.6 / 4.0-4.3, 32 KiB 14.7-19.0 / 3.9-4.6 /
 * 5.1-5.3, 48 KiB 22-29 / 4.4-5.3 / 6.2-6.4; new data before every call (216-217 ns),
 * 16 KiB 7.1-7.2 / 7.5-7.9 / 10.5-11.1, 32 KiB 15.0-15.1 / 12.5-12.8 / 22.3-22.5, 48 KiB
 * 22.4-23.0 / 17.5-17.7 / 31.9-32.8. In the usual stretches (64-66 ns), unchanged data:
 * 16 KiB 1.7-2.3 / 2.4-3.3 / 3.3, 32 KiB 3.8-4.9 / 3.1-3.9 / 4.3-4.5; new data: 16 KiB
 * 1.9 / 3.4-4.4 / 4.7-5.8, 32 KiB 4.1 / 5.0-6.2 / 8.2-9.3 (8 KiB and less: single copy
 * 3-8x the slots' time in both). With the pick (the same harness; the pick / the slots
 * / MPI_Bcast), apart (247-255 ns), unchanged data: 16 KiB 4.0-5.0 / 8.8-8.9 / 4.1-4.3,
 * 32 KiB 4.7 / 18.4 / 5.2-5.3, 48 KiB 5.5-5.6 / 27.4-28.0 / 6.6; in 8 usual runs (61-69
 * ns, unchanged and new data): 16 KiB 1.02-1.31x the slots' time (the looks at single
 * copy, and the late copy in the call after each), 32 KiB 0.74-1.10x, 48 KiB
 * 0.61-1.05x; 2 runs at 27-28 ns: 1.06-1.15x. */
#define BCAST_SMALL_PICK_MIN ((size_t)16 * 1024)

/* Up to small_bytes, a PUSH broadcast goes zero-copy (shared, split_broadcast) only
 * when its root's buf lies in the root's buffer too and the root would copy at least
 * SMALL_ZERO_COPY_MIN into the receivers' slots ((size - 1) * bytes): then the root
 * copies nothing before it announces. The slots win below that: the root returns as
 * soon as it has announced, so its next call overlaps the receivers' copies, where a
 * zero-copy root waits for them. Against the slots, same processes (median of 7
 * paired batches, all buffers in the shared buffer), with new data in the root's buf
 * before every call: 2 ranks 8-16 KiB 1.12-1.22x the time, 64 KiB 0.78x, 128-256 KiB
 * 1.12-1.25x; 3 ranks 64-256 KiB 1.04-1.72x; 4 ranks 64-128 KiB 1.15-1.35x, 192 KiB
 * 0.83x, 256 KiB 0.76-0.79x; 8 ranks 64 KiB 0.87-0.93x, 96 KiB 0.72x, 128 KiB
 * 0.63-0.73x, 192-256 KiB 0.35-0.37x. With the same data every call, which leaves
 * the root's lines clean in the readers' caches, it won from 4 KiB at 2-8 ranks
 * (0.18-0.34x from 16 KiB). A root whose buf lies in its buffer while some receiver's
 * does not copies into the slots after announcing, and one step more. */
#define SMALL_ZERO_COPY_MIN ((size_t)576 * 1024)
_Static_assert(BCAST_CMA_HIGH < SMALL_ZERO_COPY_MIN, "a small 2-rank broadcast posts for one of the two at most");

/* Pieces small enough that the receivers start soon after the root; at 2 and 4 ranks,
 * 64 KiB beat 256 KiB and the old step per 1 MiB chunk (see CHANGELOG). */
#define BCAST_PIECE (64 * 1024)

/* A zero-copy PUSH broadcast of RELAY_MIN or more among 3 or more ranks is relayed
 * (relay_broadcast) in pieces of RELAY_PIECE, instead of the root copying into every
 * receiver alone. Against that, same processes (median of 9 paired batches, buffers
 * in the shared buffer), unchanged data: 3 ranks 0.45x the time at 1 MiB, 0.56x at
 * 4 MiB; 4 ranks 0.63x-0.96x at 1 MiB, 0.74x at 4 MiB; 8 ranks 0.69x and 0.63x; new
 * data each call, 4 ranks: 0.54x, 0.72x, 16 MiB 0.74x. At 256 KiB it tied (0.92-1.08x:
 * too few pieces to overlap). 32 KiB pieces beat 64 KiB at 1 MiB (4 ranks 0.63x
 * against 0.83-0.96x) and tied at 4 MiB; 256 KiB and 1 MiB pieces lost at 1-4 MiB. */
#define RELAY_MIN ((size_t)1024 * 1024)
#define RELAY_PIECE ((size_t)32 * 1024)

static int announce(lockstep_comm_t *c, enum ls_call call, lockstep_xfer_t xfer, int root, size_t bytes)
{
    return ls_comm_announce(c, call, (lockstep_op_t)xfer, 0, root, bytes, 1);
}

/* Before a large call's announcement: where my recv lies in my buffer, for PUSH. After
 * it: whether every rank but skip (-1: none) posted one, so the call runs zero-copy. */
static void post_recv(lockstep_comm_t *c, lockstep_xfer_t xfer, const void *recv, size_t bytes)
{
    ls_zc_post(c, LS_NO_OFFSET, xfer == LOCKSTEP_PUSH ? ls_buffer_offset(c, recv, bytes) : LS_NO_OFFSET);
}

static int all_posted(const lockstep_comm_t *c, lockstep_xfer_t xfer, int skip)
{
    if (xfer != LOCKSTEP_PUSH)
        return 0;
    for (int k = 0; k < c->size; k++)
        if (k != skip && ls_zc_announced(c, k).recv == LS_NO_OFFSET)
            return 0;
    return 1;
}

/* my send into every peer's recv at block (every peer's buffer offset + at) */
static void push_zero_copy(lockstep_comm_t *c, const void *send, size_t bytes, size_t at, const int *peers, int np)
{
    for (int i = 0; i < np; i++)
        ls_comm_copy(c, ls_buf(c, peers[i]) + ls_zc_announced(c, peers[i]).recv + at, send, bytes);
}

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
    size_t pieces = (bytes + RELAY_PIECE - 1) / RELAY_PIECE;
    uint32_t base = c->step;
    for (size_t j = 0; j < pieces; j++) {
        size_t off = j * RELAY_PIECE, n = bytes - off < RELAY_PIECE ? bytes - off : RELAY_PIECE;
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
 *   shared (zero-copy PUSH, the root's buf in its buffer too, not relayed): the
 *     receivers read it in the root's buffer; 2 ranks: the root copies the first half
 *     into the receiver's buf and the receiver the second half; more: each receiver
 *     copies the whole of it and the root none. Against the root copying into every
 *     receiver alone, in the same processes (median of 9 paired batches, all buffers
 *     in the shared buffer), new data each call: 2 ranks 0.50-0.58x the time from 512
 *     KiB to 16 MiB; 3 ranks at 512 KiB 0.66x, 4 ranks 0.59-0.61x, 8 ranks 0.49x, and
 *     8 ranks at 1 MiB 0.68x; unchanged data: 2 ranks 1 MiB 0.34x, 4 MiB 0.41x, 4 ranks
 *     0.32-0.51x, 8 ranks 0.41-0.52x at 512-768 KiB. From RELAY_MIN, against the relay:
 *     new data a tie at 3-8 ranks from 4 MiB but 1.17x at 4 ranks and 1 MiB, so the
 *     relay stays.
 *   single copy (2 ranks posted for it, BCAST_CMA_MIN): the same halves, the root's
 *     written into the receiver's private buf (process_vm_writev) and the receiver's
 *     read from the root's (process_vm_readv).
 * The root returns once every receiver has published its step: they read its buf until
 * then. */
static int split_broadcast(lockstep_comm_t *c, char *buf, size_t bytes, int root, const int *peers, int np,
                           int single_copy, uint64_t deadline)
{
    uint32_t t = ++c->step;
    size_t h = np == 1 ? (bytes / 2 + 63) / 64 * 64 : 0; /* the root's part; bytes > 256, so h < bytes */
    int rc = 0;
    if (c->rank == root) {
        if (h && single_copy)
            rc = ls_cma_write(c, peers[0], buf, 0, h);
        else if (h)
            ls_comm_copy(c, ls_buf(c, peers[0]) + ls_zc_announced(c, peers[0]).recv, buf, h);
        if (rc)
            return rc;
        ls_comm_publish_step(c, t);
        return ls_comm_wait_steps(c, t, deadline);
    }
    if (single_copy)
        rc = ls_cma_read(c, root, buf + h, h, bytes - h);
    else
        ls_comm_copy(c, buf + h, ls_buf(c, root) + ls_zc_announced(c, root).recv + h, bytes - h);
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

/* A small broadcast whose root copied nothing before announcing, in the hope of a
 * zero-copy or single-copy call that some receiver could not take, after the
 * announcement: the root copies into the small slots only now (PULL its own, PUSH
 * every receiver's), and one step tells the receivers it is there. */
static int late_copy(lockstep_comm_t *c, char *buf, size_t bytes, int root, const int *peers, int np,
                     lockstep_xfer_t xfer)
{
    unsigned b = c->seq & 1;
    uint32_t t = ++c->step;
    int rc;
    if (c->rank == root && xfer == LOCKSTEP_PULL)
        memcpy(ls_small(c, root, b), buf, bytes);
    else if (c->rank == root)
        copy_to_slots(c, buf, bytes, peers, np, b);
    else if ((rc = ls_comm_wait_word(c, root, &ls_ctl(c, root)->own.step, t, ls_comm_deadline(c))) != 0)
        return rc;
    else
        memcpy(buf, ls_small(c, xfer == LOCKSTEP_PULL ? root : c->rank, b), bytes);
    ls_comm_publish_step(c, t);
    return 0;
}

/* A PUSH broadcast of SMALL_ZERO_COPY_MIN up to small_bytes whose root's buf lies in
 * its buffer, after the announcement: if every receiver's does too, zero-copy as a
 * larger one (split_broadcast), else through the slots, late. */
static int small_zero_copy(lockstep_comm_t *c, char *buf, size_t bytes, int root, const int *peers, int np)
{
    if (all_posted(c, LOCKSTEP_PUSH, root))
        return split_broadcast(c, buf, bytes, root, peers, np, 0, ls_comm_deadline(c));
    return late_copy(c, buf, bytes, root, peers, np, LOCKSTEP_PUSH);
}

/* 2 ranks that fit the CPUs: a broadcast of this size may move by single copy, from
 * the small path too (low) or from the large path only (any size past low: fixed from
 * BCAST_CMA_MIN where kernel copies are fast, else as the receiver picks) */
static int single_copy_low(size_t bytes)
{
    return bytes >= BCAST_CMA_LOW && bytes <= BCAST_CMA_HIGH;
}

/* ... or as the receiver picks, on the small path (BCAST_SMALL_PICK_MIN) */
static int single_copy_picked(size_t bytes)
{
    return bytes >= BCAST_SMALL_PICK_MIN && bytes < BCAST_CMA_LOW;
}

/* Its class: per root as well as per size, so that each choice in the state line is
 * one rank's (the root's peer), however the roots take turns. Two size classes. */
static int small_pick_class(size_t bytes, int root)
{
    _Static_assert(BCAST_CMA_LOW <= 4 * BCAST_SMALL_PICK_MIN, "two size classes per root");
    return LS_PICK_BROADCAST_SMALL + 2 * root + ls_pick_size(bytes, BCAST_SMALL_PICK_MIN);
}

static int broadcast(lockstep_comm_t *c, void *buf, size_t bytes, int root, lockstep_order_t order,
                     lockstep_xfer_t xfer)
{
    if ((bytes && !buf) || root < 0 || root >= c->size || bad_order(order, xfer))
        return -EINVAL;
    if (c->size == 1) /* alone: buf already holds the root's bytes */
        return ls_comm_failed(c);
    if (c->hdr->eager_bytes && bytes <= c->hdr->eager_bytes)
        return ls_eager_broadcast(c, buf, bytes, root, xfer);
    int me = c->rank, rc, peers[LOCKSTEP_COMM_MAX_RANKS];
    if ((rc = ls_comm_settle(c)) != 0)
        return rc;
    ls_comm_order(c, order, peers);
    int np = c->size - 1;

    if (bytes <= c->hdr->small_bytes) {
        unsigned b = (c->seq + 1) & 1;
        size_t at = ls_inline_at(bytes);
        /* a PUSH whose root would copy SMALL_ZERO_COPY_MIN or more: every rank posts
         * where its buf lies in its buffer; a root whose buf lies there copies nothing
         * before announcing */
        int posts = xfer == LOCKSTEP_PUSH && bytes * (size_t)np >= SMALL_ZERO_COPY_MIN;
        uint64_t where = posts ? ls_buffer_offset(c, buf, bytes) : LS_NO_OFFSET;
        /* 2 ranks (the same on every rank, as bytes): every rank posts whether it can
         * take a single copy, and a root that can copies nothing before announcing;
         * below the window, the receiver offers it as it picks, and the root holds its
         * copy back while the receiver's last choice was single copy */
        int picked = np == 1 && single_copy_picked(bytes);
        int cma_posts = np == 1 && (single_copy_low(bytes) || picked);
        int cma_mine = cma_posts && c->cma && ls_fits(c), held = cma_mine;
        if (picked && cma_mine) /* the receiver (1 - root) picks */
            cma_mine = ls_pick_offer(c, small_pick_class(bytes, root), bytes, 1 - root, &held);
        int later = me == root && (where != LS_NO_OFFSET || held);
        if (me == root && bytes && !later) {
            if (bytes <= LS_INLINE_BYTES)
                memcpy(ls_ctl(c, me)->ann[b].data + at, buf, bytes);
            else if (xfer == LOCKSTEP_PULL)
                memcpy(ls_small(c, me, b), buf, bytes);
            else
                copy_to_slots(c, buf, bytes, peers, np, b);
        }
        if (posts) /* after the copy, as for allreduce */
            ls_zc_post(c, LS_NO_OFFSET, where);
        if (cma_posts) {
            ls_cma_post(c, cma_mine ? buf : NULL, buf);
            ls_cma_post_early(c, !later);
        }
        if ((rc = announce(c, LS_CALL_BROADCAST, xfer, root, bytes)) != 0)
            return rc;
        if (posts && ls_zc_announced(c, root).recv != LS_NO_OFFSET)
            return small_zero_copy(c, buf, bytes, root, peers, np);
        int single = cma_posts && ls_cma_count(c) == c->size;
        /* the root held its copy back (as it posted) */
        int late = !single && cma_posts && (me == root ? later : !ls_cma_early_peers(c));
        if (picked && me != root) /* a call through the slots with a late copy is not timed */
            ls_pick_way(c, single ? 1 : cma_mine ? -1 : late ? -2 : 0);
        if (single)
            return split_broadcast(c, buf, bytes, root, peers, np, 1, ls_comm_deadline(c));
        if (late)
            return late_copy(c, buf, bytes, root, peers, np, xfer);
        if (me != root && bytes)
            memcpy(buf,
                   bytes <= LS_INLINE_BYTES ? (const void *)(ls_ctl(c, root)->ann[b].data + at)
                                            : (const void *)ls_small(c, xfer == LOCKSTEP_PULL ? root : me, b),
                   bytes);
        return 0;
    }

    post_recv(c, xfer, buf, bytes);
    /* only 2 ranks post for single copy; np is the same on every rank, so the others
     * need not count the posts after announcing */
    int cma_try = np == 1 && c->cma && ls_fits(c) && (single_copy_low(bytes) || bytes > BCAST_CMA_HIGH);
    /* past the window, where single copy is not the fixed way: the receiver picks the
     * way by timing both (pick.h); the root offers single copy (its offer alone never
     * decides). The receiver's time is the call's: the root of the slots' pipeline
     * returns before the receiver has copied the last pieces. */
    if (cma_try && bytes > BCAST_CMA_HIGH && (bytes < BCAST_CMA_MIN || ls_cma_slow(c)) && me != root)
        cma_try = ls_pick_start(c, LS_PICK_BROADCAST + ls_pick_size(bytes, BCAST_CMA_HIGH), bytes);
    ls_cma_post(c, cma_try ? buf : NULL, buf);
    /* the relay's chain, the root's order, goes in the root's small slot for this call
     * (large calls leave it unused; written before announcing, as a small payload is) */
    int relay = xfer == LOCKSTEP_PUSH && np >= 2 && bytes >= RELAY_MIN;
    unsigned char *chain = (unsigned char *)ls_small(c, root, (c->seq + 1) & 1);
    _Static_assert(LOCKSTEP_COMM_MAX_RANKS <= 256, "a rank fits a byte, the chain a small slot (256 B or more)");
    for (int i = 0; relay && me == root && i < np; i++)
        chain[i] = (unsigned char)peers[i];
    if ((rc = announce(c, LS_CALL_BROADCAST, xfer, root, bytes)) != 0)
        return rc;
    uint64_t deadline = ls_comm_deadline(c);
    int zero_copy = all_posted(c, xfer, root), cma = np == 1 && ls_cma_count(c) == c->size;
    ls_pick_way(c, zero_copy ? -2 : cma ? 1 : cma_try ? -1 : 0);
    if (zero_copy && relay)
        return relay_broadcast(c, buf, bytes, root, chain, deadline);
    if (zero_copy && ls_zc_announced(c, root).recv != LS_NO_OFFSET) /* the root's buf in its buffer too */
        return split_broadcast(c, buf, bytes, root, peers, np, 0, deadline);
    if (zero_copy) {
        uint32_t t = ++c->step;
        if (me == root)
            push_zero_copy(c, buf, bytes, 0, peers, np);
        else if ((rc = ls_comm_wait_word(c, root, &ls_ctl(c, root)->own.step, t, deadline)) != 0)
            return rc;
        ls_comm_publish_step(c, t); /* the root's says its copies are done */
        return 0;
    }
    if (cma)
        return split_broadcast(c, buf, bytes, root, peers, np, 1, deadline);
    size_t piece = c->hdr->chunk_bytes < BCAST_PIECE ? c->hdr->chunk_bytes : BCAST_PIECE;
    size_t ring = 2 * c->hdr->chunk_bytes / piece, pieces = (bytes + piece - 1) / piece;
    uint32_t base = c->step;
    char *p = buf;
    for (size_t j = 0; j < pieces; j++) {
        size_t off = j * piece, n = bytes - off < piece ? bytes - off : piece, at = (j % ring) * piece;
        uint32_t t = base + (uint32_t)j + 1;
        if (me == root) {
            /* every receiver has copied the piece this one overwrites */
            if (j >= ring && (rc = ls_comm_wait_steps(c, t - (uint32_t)ring, deadline)) != 0)
                return rc;
            if (xfer == LOCKSTEP_PULL)
                memcpy(ls_chunk(c, me, 0) + at, p + off, n);
            else
                for (int i = 0; i < np; i++)
                    memcpy(ls_chunk(c, peers[i], 0) + at, p + off, n);
        } else {
            if ((rc = ls_comm_wait_word(c, root, &ls_ctl(c, root)->own.step, t, deadline)) != 0)
                return rc;
            memcpy(p + off, ls_chunk(c, xfer == LOCKSTEP_PULL ? root : me, 0) + at, n);
        }
        ls_comm_publish_step(c, t);
    }
    c->step = base + (uint32_t)pieces;
    c->busy = LS_BUSY_BOTH; /* receivers may still be copying from the root's ring */
    return 0;
}

/* An allgather on the small path: my block into the small slots b (PULL my own,
 * PUSH every peer's) */
static void copy_to_small(lockstep_comm_t *c, const char *in, size_t bytes, lockstep_xfer_t xfer, const int *peers,
                          int np, unsigned b)
{
    if (xfer == LOCKSTEP_PULL)
        memcpy(ls_small(c, c->rank, b), in, bytes);
    else
        for (int i = 0; i < np; i++)
            memcpy(ls_small(c, peers[i], b) + (size_t)c->rank * bytes, in, bytes);
}

/* An allgather by single copy, every rank having posted its send and recv: every
 * block from its send straight into every recv (PULL: I read each peer's, PUSH: I
 * write mine into each peer's); one step ends the call, when every recv is complete
 * and no send is read any more */
static int allgather_single_copy(lockstep_comm_t *c, const char *in, char *out, size_t bytes, lockstep_xfer_t xfer,
                                 const int *peers, int np)
{
    int me = c->rank, rc;
    for (int i = 0; i < np; i++) {
        int k = peers[i];
        rc = xfer == LOCKSTEP_PULL ? ls_cma_read(c, k, out + (size_t)k * bytes, 0, bytes)
                                   : ls_cma_write(c, k, in, (size_t)me * bytes, bytes);
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
    if ((bytes && (!send || !recv)) || bad_order(order, xfer) ||
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

    if (xfer == LOCKSTEP_PULL ? bytes <= small : total <= small) {
        unsigned b = (c->seq + 1) & 1;
        int inl = bytes <= LS_INLINE_BYTES;
        size_t at = ls_inline_at(bytes);
        /* from ALLGATHER_SMALL_PICK_MIN (the same on every rank) every rank posts
         * whether it offers single copy and whether it copied into the slots before
         * announcing, and rank 0 picks (pick.h): the others offer single copy in every
         * such call, so that rank 0's offer decides, and hold their copy back when
         * rank 0's last choice for the class, in the state line, was single copy. Had
         * they offered only as they read that choice, then in calls back to back,
         * where a peer reads it before rank 0 has stored the new one, every look at
         * single copy would have found a peer not offering (2 ranks, 64 KiB: all 7
         * looks in 300 calls) and single copy would never have run. */
        int posts = bytes >= ALLGATHER_SMALL_PICK_MIN, offer = 0, held = 0;
        if (posts && c->cma && ls_fits(c)) {
            int cls = LS_PICK_ALLGATHER_SMALL + (int)xfer * LS_PICK_SIZES + ls_pick_size(bytes, ALLGATHER_SMALL_PICK_MIN);
            offer = ls_pick_offer(c, cls, bytes, 0, &held);
        }
        if (inl) {
            if (bytes)
                memcpy(ls_ctl(c, me)->ann[b].data + at, in, bytes);
        } else if (!held) {
            copy_to_small(c, in, bytes, xfer, peers, np, b);
        }
        if (posts) {
            ls_cma_post(c, offer ? in : NULL, out);
            ls_cma_post_early(c, !held);
        }
        rc = announce(c, LS_CALL_ALLGATHER, xfer, 0, bytes);
        if (rc || !bytes)
            return rc;
        if (posts) {
            int n = ls_cma_count(c);
            ls_pick_way(c, n == N ? 1 : offer ? -1 : ls_pick_slots(c, !held));
            if (n == N)
                return allgather_single_copy(c, in, out, bytes, xfer, peers, np);
            if (held || !ls_cma_early_peers(c)) { /* some ranks held their copy back:
                                                     they copy now, and one step */
                if (held)
                    copy_to_small(c, in, bytes, xfer, peers, np, b);
                if ((rc = ls_comm_step(c, ls_comm_deadline(c))) != 0)
                    return rc;
            }
        }
        if (in != mine)
            memcpy(mine, in, bytes);
        for (int i = 0; i < np; i++) {
            int k = peers[i];
            const char *from = inl                      ? (const char *)ls_ctl(c, k)->ann[b].data + at
                               : xfer == LOCKSTEP_PULL ? ls_small(c, k, b)
                                                       : ls_small(c, me, b) + (size_t)k * bytes;
            memcpy(out + (size_t)k * bytes, from, bytes);
        }
        return 0;
    }

    post_recv(c, xfer, out, total);
    /* every rank posts, so that every rank counts the same (bytes is the same on all) */
    size_t cma_min = xfer == LOCKSTEP_PULL ? ALLGATHER_CMA_MIN
                     : ls_fits(c)          ? ALLGATHER_CMA_MIN_PUSH
                                           : ALLGATHER_CMA_MIN_PUSH_OVERSUBSCRIBED;
    int cma_try = c->cma && (ls_fits(c) || xfer == LOCKSTEP_PUSH) && bytes >= cma_min;
    /* where kernel copies are slow, past PUSH's window: rank 0 picks the way by timing
     * both (pick.h), and the others offer single copy (their offer alone never decides) */
    size_t pick_min = xfer == LOCKSTEP_PULL ? ALLGATHER_PICK_MIN_PULL : ALLGATHER_CMA_MAX_PUSH_SLOW + 1;
    if (c->cma && ls_cma_slow(c) && bytes >= pick_min)
        cma_try = me != 0 || ls_pick_start(c, LS_PICK_ALLGATHER + (int)xfer * LS_PICK_SIZES +
                                                  ls_pick_size(bytes, pick_min), bytes);
    ls_cma_post(c, cma_try ? in : NULL, out);
    if ((rc = announce(c, LS_CALL_ALLGATHER, xfer, 0, bytes)) != 0)
        return rc;
    uint64_t deadline = ls_comm_deadline(c);
    int cma = ls_cma_count(c);
    ls_pick_way(c, all_posted(c, xfer, -1) ? -2 : cma == N ? 1 : cma_try ? -1 : 0);
    if (all_posted(c, xfer, -1)) {
        if (in != mine)
            ls_comm_copy(c, mine, in, bytes);
        push_zero_copy(c, in, bytes, (size_t)me * bytes, peers, np);
        return ls_comm_step(c, deadline); /* every recv is complete */
    }
    if (cma == N)
        return allgather_single_copy(c, in, out, bytes, xfer, peers, np);
    size_t piece = xfer == LOCKSTEP_PULL ? c->hdr->chunk_bytes : c->hdr->chunk_bytes / (size_t)N;
    unsigned j = 0;
    for (size_t off = 0; off < bytes; off += piece, j++) {
        size_t q = bytes - off < piece ? bytes - off : piece;
        unsigned b = j & 1;
        if (xfer == LOCKSTEP_PULL)
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
            const char *from = xfer == LOCKSTEP_PULL ? ls_chunk(c, k, b) : ls_chunk(c, me, b) + (size_t)k * q;
            ls_comm_copy(c, out + (size_t)k * bytes + off, from, q);
        }
        c->busy = (int)b;
    }
    return 0;
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

int lockstep_comm_allgather(lockstep_comm_t *c, const void *send, void *recv, size_t bytes,
                            lockstep_order_t order, lockstep_xfer_t xfer)
{
    int rc = ls_comm_enter(c);
    if (rc)
        return rc;
    uint32_t s = c->seq;
    return ls_comm_end(c, s, allgather(c, send, recv, bytes, order, xfer));
}
