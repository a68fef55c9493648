/* The comm family's tuned constants, each with the reason for its value. What they
 * cost and gain is measured by `lockstep bench comm`; docs/performance.md has the
 * figures. A route is chosen from these by size (and dtype), and by how far apart the
 * ranks sit (a probe of the machine's state, distance.c): no call times one way
 * against another, and no rank moves itself between CPUs.
 *
 * Routes per collective (comm.h has the table a user reads):
 *   allreduce       inline or small slots | chunked reduce-scatter + allgather |
 *                   zero-copy from the shared buffers | kernel copy
 *   reduce-scatter  inline or small slots | chunked | zero-copy | kernel copy
 *   all-to-all      inline or small slots | chunked | zero-copy | kernel copy
 *   broadcast       inline or small slots | pipelined pieces | zero-copy (push,
 *                   relay, shared halves, pull) | kernel copy (2 ranks, halves)
 *   allgather       inline or small slots | chunked | zero-copy push or pull | kernel copy
 * Eager broadcasts (params.broadcast_eager_bytes) are the caller's choice, not a route. */
#ifndef LOCKSTEP_COMM_TUNING_H
#define LOCKSTEP_COMM_TUNING_H

#include <stddef.h>
#include <stdint.h>

/* ---- the small path ------------------------------------------------------------- */

/* allreduce_small_bytes = 0: the allreduce's switch to the chunked path. While ranks
 * fit the CPUs, LS_SMALL_FITS / (size - 1), at least LS_SMALL_FITS_MIN: the small
 * path reads every peer's whole message, the chunked one 1/size of it. When ranks
 * outnumber the CPUs, LS_SMALL_OVERSUBSCRIBED: the chunked path's steps each cost
 * process switches. The reduce-scatter and all-to-all switch at the minimum (their
 * small path copies every block twice). */
#define LS_SMALL_FITS ((size_t)32 * 1024)
#define LS_SMALL_FITS_MIN ((size_t)512)
#define LS_SMALL_OVERSUBSCRIBED ((size_t)8 * 1024)

/* The small allreduce with 3 or more ranks prefetches every peer's slot before it
 * reduces, while all of them together are at most this: the misses overlap instead of
 * coming one input at a time; past it the prefetches evict what they fetched. */
#define LS_PREFETCH_MAX ((size_t)8 * 1024)

/* Below this, an allreduce or block exchange whose buffers all lie in the shared
 * buffers still takes the small path: one synchronisation against zero-copy's two.
 * The allreduce multiplies it by the ranks per CPU, since each synchronisation costs
 * process switches when ranks outnumber the CPUs. */
#define LS_ZERO_COPY_MIN ((size_t)1024)

/* A PUSH broadcast up to small_bytes goes zero-copy only when the root would copy at
 * least this into the receivers' slots: below it the slots win, since their root
 * returns once it has announced, while a zero-copy root waits for the receivers. */
#define LS_SMALL_ZERO_COPY_MIN ((size_t)576 * 1024)

/* ---- the chunked and pipelined paths -------------------------------------------- */

/* The large allreduce's step when ranks outnumber the CPUs: two ranks' working sets
 * then share one core's caches (chunk_bytes, 1 MiB by default, is the step otherwise) */
#define LS_OVERSUBSCRIBED_STEP ((size_t)512 * 1024)

/* A large broadcast's pieces: small enough that the receivers start soon after the
 * root, large enough that a step per piece costs little */
#define LS_BCAST_PIECE ((size_t)64 * 1024)

/* A zero-copy PUSH broadcast among 3 or more ranks from LS_RELAY_MIN is relayed along
 * the root's order in LS_RELAY_PIECE pieces: up to `size` copies run at once instead
 * of the root making size - 1. Below it there are too few pieces to overlap. */
#define LS_RELAY_MIN ((size_t)1024 * 1024)
/* (params' relay_bytes, zero_copy_min_bytes and prefetch_max_bytes, and their
 * LOCKSTEP_COMM_* variables, replace LS_RELAY_MIN, LS_ZERO_COPY_MIN and LS_PREFETCH_MAX
 * for experiments) */
#define LS_RELAY_PIECE ((size_t)32 * 1024)

/* ---- kernel copies (process_vm_readv/writev, kcopy.c) ---------------------------- */

/* A block moved by kernel copy is copied once, through the kernel; through the slots it
 * is copied twice, by two CPUs in turn, each line crossing between them. Where the
 * ranks sit close (a cache line's round trip under LS_FAR_NS, distance.c) the slots'
 * transfers are cheap and the kernel's copy, several times slower than memcpy on some
 * virtual machines, wins only in the windows below; where they sit far apart (other
 * sockets or core complexes, or vCPUs the host has moved apart) every line the slots
 * move costs a far transfer twice over, and the kernel copy wins from far_min up.
 * LOCKSTEP_KERNEL_COPY_WIDE (params.kernel_copy) lifts the close windows' upper limits
 * for machines whose kernel copies are as fast as memcpy. A route is taken only when
 * every rank can reach its peers (probed at create) and offers it. */
struct ls_kcopy_window {
    size_t fits_min, fits_max; /* ranks fit the CPUs, close: blocks in [min, max] */
    size_t fits_again;         /* ranks fit, close: and from here up */
    size_t wide_min;           /* ranks fit, LOCKSTEP_KERNEL_COPY_WIDE: from here up */
    size_t far_min;            /* ranks fit, far apart: from here up */
    size_t over_min;           /* ranks outnumber the CPUs, close: from here up */
    size_t over_far_min, over_far_max; /* ranks outnumber the CPUs, far apart */
};
#define LS_KCOPY_NEVER SIZE_MAX
#define LS_KCOPY_ANY SIZE_MAX /* no upper limit */
#define LS_KIB ((size_t)1024)

/* allreduce: the chunked path reduces while it copies; close, f32/i32 kernel copies
 * win from 64 KiB to 256 KiB (2 ranks: 0.84-0.98x the chunked path; at 1 MiB 1.2-1.5x,
 * where the chunked path's copies and reductions overlap), f16/bf16 never (they
 * reduce more slowly and start later); far apart, from 64 KiB (apart: 13 us against
 * the slots' 35.5 at 64 KiB).
 * Ranks outnumbering the CPUs far apart: from 256 KiB (4 ranks on 2 CPUs: 1 MiB
 * 256-300 us against the slots' 321-327, 16 MiB 9.5-11.8 ms against 14.6-17.5, each
 * with the CPUs apart by its own round trip; at 64 KiB 23 against 18) */
#define LS_KCOPY_ALLREDUCE                                                              \
    {64 * LS_KIB, 256 * LS_KIB, LS_KCOPY_NEVER, 64 * LS_KIB, 64 * LS_KIB, LS_KCOPY_NEVER, 256 * LS_KIB, \
     LS_KCOPY_ANY}
#define LS_KCOPY_ALLREDUCE_HALF                                                         \
    {LS_KCOPY_NEVER, 0, LS_KCOPY_NEVER, 512 * LS_KIB, 64 * LS_KIB, LS_KCOPY_NEVER, LS_KCOPY_NEVER, 0}
/* reduce-scatter, per block: each rank reads its block of every peer's send, the
 * slots' second copy saved; close, 64-128 KiB blocks (2 ranks, 64 KiB: 0.83-0.89x the
 * slots, in the main job's tables and by hand; from 256 KiB the slots' chunked steps
 * overlap, and the main job's tables and `bench comm`'s rows had them 0.6-0.7x the
 * kernel copy) */
#define LS_KCOPY_REDUCE_SCATTER \
    {64 * LS_KIB, 128 * LS_KIB, LS_KCOPY_NEVER, 64 * LS_KIB, 32 * LS_KIB, LS_KCOPY_NEVER, LS_KCOPY_NEVER, \
     LS_KCOPY_ANY}
/* all-to-all, per block: the writer's copy is cheap (its source is in its cache);
 * close, blocks of 32-160 KiB and again from 4 MiB (2 ranks: 4-16 MiB 0.64-0.86x the
 * slots; 1-2 MiB 1.12-1.29x, where the slots' chunked steps overlap); far apart from
 * 16 KiB (2 ranks: 3.5 us against the slots' 4.6; at 8 KiB alike). With ranks
 * outnumbering CPUs the slots' steps wait for ranks to be scheduled: far apart from
 * 32 KiB (4 ranks on 2 CPUs, 64 KiB: 76 us against the slots' 165), close from 512 KiB
 * (64 KiB: 36-43 us against 56-68, 256 KiB 130-172 against 157-205; 1 MiB 1.2-1.5x) */
#define LS_KCOPY_ALLTOALL \
    {32 * LS_KIB, 160 * LS_KIB, 4096 * LS_KIB, 8 * LS_KIB, 16 * LS_KIB, 512 * LS_KIB, 32 * LS_KIB, \
     LS_KCOPY_ANY}
/* allgather PUSH, per block: as the all-to-all's writes */
#define LS_KCOPY_ALLGATHER_PUSH \
    {128 * LS_KIB, 384 * LS_KIB, LS_KCOPY_NEVER, 128 * LS_KIB, 16 * LS_KIB, 64 * LS_KIB, 64 * LS_KIB, \
     LS_KCOPY_ANY}
/* allgather PULL (the default): a kernel read of each peer's block is one copy where
 * the slots make two; close, 64-128 KiB blocks and again from 16 MiB (2 ranks: 64 KiB
 * 0.69-0.91x the slots and 16 MiB 0.75-0.91x in two main jobs' tables; 256 KiB-4 MiB
 * 1.0-1.6x, where the slots' chunked steps overlap; 16 KiB 1.23-1.29x) */
#define LS_KCOPY_ALLGATHER_PULL \
    {64 * LS_KIB, 128 * LS_KIB, 16384 * LS_KIB, 64 * LS_KIB, 16 * LS_KIB, LS_KCOPY_NEVER, LS_KCOPY_NEVER, \
     LS_KCOPY_ANY}
/* broadcast between 2 ranks: each moves half, the root writing and the receiver
 * reading; close, 64-512 KiB and again from 16 MiB (2 ranks, 16 MiB: 0.57-1.0x the
 * pipelined pieces in two main jobs' tables; 1-4 MiB the pieces overlap the two
 * copies, 0.6-0.8x the kernel copy there); far apart from 16 KiB (apart: 32 KiB 4.7 us
 * against the slots' 18.4) */
#define LS_KCOPY_BROADCAST \
    {64 * LS_KIB, 512 * LS_KIB, 16384 * LS_KIB, 64 * LS_KIB, 16 * LS_KIB, LS_KCOPY_NEVER, LS_KCOPY_NEVER, \
     LS_KCOPY_ANY}

/* A kernel copy moves at most this per system call, each after a check that the call
 * has not failed, so that a failure stops a large copy soon */
#define LS_KCOPY_PIECE ((size_t)256 * 1024)

/* ---- the ranks' distance (distance.c) -------------------------------------------- */

/* Ranks whose cache line round trip (rank 0 to its partner and back) takes this long or
 * more sit far apart: CPUs sharing a cache answer in well under it, CPUs on other
 * sockets, core complexes or far-placed vCPUs in twice it or more */
#define LS_FAR_NS 120u

/* The probe: this many round trips, in groups of LS_PROBE_GROUP, judged by the
 * fastest group's mean, so that a preemption during one group does not count */
#define LS_PROBE_ROUNDS 16u
#define LS_PROBE_GROUP 4u

/* Where ranks outnumber the CPUs, rank 0 and its partner may share one (the partner's
 * CPU hint is from before the probe): a round trip then waits for process switches (a
 * microsecond or more each way), not a cache line (under half a microsecond however
 * far apart), and a best group this slow judges nothing */
#define LS_PROBE_SWITCH_NS 1000u

/* The ranks probe again every LS_PROBE_CALLS calls (a power of 2): at a call's worst
 * cost (16 far round trips, 8 us) a thousandth of a 1-KiB allreduce's time. Calls
 * whose route follows the distance probe again LS_PROBE_INTERVAL_NS after the last
 * probe too: 1024 of them can take seconds (16 MiB, 4 ranks: 5-17 s), and a judgement
 * that old chose the wrong route for whole stretches (the main job's 4 MiB row: 0.85x
 * OpenMPI; 0.35x judged afresh). A probe
 * whose partner does not answer within LS_PROBE_GIVE_UP_NS is dropped and the last
 * judgement stands; at create, where the partner may still be waking from the
 * rendezvous, it waits up to LS_PROBE_CREATE_NS. */
#define LS_PROBE_CALLS 1024u
#define LS_PROBE_INTERVAL_NS (50ull * 1000 * 1000)
#define LS_PROBE_GIVE_UP_NS (200ull * 1000)
#define LS_PROBE_CREATE_NS (100ull * 1000 * 1000)

/* ---- waiting ------------------------------------------------------------------- */

/* Liveness and the cancel callback are checked this often while a call waits */
#define LS_SLICE_NS (10ull * 1000 * 1000)

/* A failed rank waits at most this for a peer's kernel copy into it to end; only a
 * writer that cannot run (stopped) takes this long */
#define LS_DRAIN_NS (2000ull * 1000 * 1000)

/* ---- eager broadcasts and the reduction ---------------------------------------- */

/* Eager broadcasts a root may run ahead of the slowest receiver, and their largest
 * payload: the ring lies in every rank's data area */
#define LS_EAGER_DEPTH 16u
#define LS_EAGER_MAX ((size_t)64 * 1024)

/* Up to this many f32/i32 (bf16) elements the reduction runs plain loops instead of
 * its blocked kernels, whose indirect calls cost more than the arithmetic there */
#define LS_FEW_WORDS 32
#define LS_FEW_HALVES 64

/* The blocked kernels reduce this many elements at a time, so that a block of out
 * stays in L1 between the inputs (8 KiB of f32/i32; f16/bf16 go through f32) */
#define LS_WORD_BLOCK 2048
#define LS_HALF_BLOCK 1024

/* The pool (params.pool) splits copies and reductions from LS_PAR_MIN bytes, in
 * LS_PAR_BLOCK pieces: below it, waking the pool costs more than it saves */
#define LS_PAR_MIN ((size_t)256 * 1024)
#define LS_PAR_BLOCK ((size_t)64 * 1024)

#endif
