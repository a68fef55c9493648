/* lockstep/comm.h — collectives between processes on one node, through shared memory.
 *
 * A communicator joins `size` processes (ranks) of one job. Rank 0 creates a POSIX
 * shared-memory segment named after the job; the others map it; the segment is
 * unlinked as soon as every rank has mapped it, so nothing is left in /dev/shm however
 * the job ends. The segment holds offsets, never pointers.
 *
 * Calls. Every collective call is numbered. Each rank announces its call (kind, op,
 * dtype, count, root, transfer, tag) before it touches a peer's data and compares
 * every peer's announcement with its own; if any differ the call fails on every rank
 * with -LOCKSTEP_EMISMATCH, never with mixed-up data. Every wait has a deadline
 * (params.timeout_ms) and, between short slices, checks that the peers live. After a
 * failure (a peer died, the deadline passed, a mismatch, a cancel) the communicator is
 * broken on every rank: later calls return the same error; free it and create a new
 * one. A call whose own arguments are invalid returns -EINVAL and still takes its
 * turn as a refused call, so the peers' call ends at once with -LOCKSTEP_EPEERINVAL and
 * the communicator goes on.
 *
 * Results. Reductions run in rank order on every rank, so every rank gets the same
 * bits. f16 and bf16 are accumulated in f32 and rounded once.
 *
 * Routes. Each collective moves its data one of at most four ways, chosen from the
 * message size (and dtype) and the ranks' distance (lockstep_comm_distance) by
 * constants in src/comm/tuning.h; lockstep_comm_route tells which one a call took.
 * The slots are per-rank areas of the segment (params.small_bytes and chunk_bytes);
 * the buffers are lockstep_comm_buffer's; a kernel copy is process_vm_readv/writev
 * straight between the ranks' private memory, taken only when every rank offers it
 * (lockstep_comm_kernel_copy).
 *
 *   call            small: one sync  large                 zero-copy          kernel copy:
 *                                                                             close | far
 *   allreduce       <= allreduce_    chunked reduce-       send and recv in   64-256 | from
 *                   small_bytes      scatter + allgather   every rank's       KiB,   | 64 KiB;
 *                   (auto: 32 KiB /  through the chunk     buffer, from 1 KiB 4-byte | 256 KiB+
 *                   (size-1), 8 KiB  slots, a step per     (x ranks per CPU)  elems. | over-
 *                   oversubscribed)  chunk                                          | subscribed
 *   reduce-scatter  total <= 512 B   chunked               in buffers, 1 KiB  blocks of 64-
 *                   (8 KiB over.)                          blocks             128 KiB | 32 KiB+
 *   all-to-all      as reduce-       chunked               in buffers, 1 KiB  blocks of 32-160
 *                   scatter                                blocks             KiB, 4 MiB+ |
 *                                                                             16 KiB+; oversub.
 *                                                                             512 KiB+ | 32 KiB+
 *   broadcast       <= small_bytes   pipelined 64 KiB      PUSH, receivers'   2 ranks, half
 *                                    pieces                bufs in buffers;   each: 64-512 KiB,
 *                                                          PULL, the root's   16 MiB+ | 16 KiB+
 *   allgather       PULL: block,     chunked               PUSH, every recv   PUSH blocks of
 *                   PUSH: total      through the chunk     in its buffer;     128-384 KiB, PULL
 *                   <= small_bytes   slots                 PULL, every send   64-128 KiB, 16 MiB+
 *                                                                             | 16 KiB+; PUSH
 *                                                                             64 KiB+ oversub.
 *
 * "Close" and "far": the ranks' distance, a cache line's round trip between rank 0 and
 * a peer, measured at create, every 1024 calls, and in large calls 50 ms after the
 * last measurement (lockstep_comm_distance): far apart, every line the slots move
 * costs a far transfer twice, and the kernel's one copy wins.
 * "Oversubscribed": more ranks (or params.cpu_sharers) than CPUs. The oversubscribed
 * windows hold there whatever the distance, but for the allreduce's, which holds far
 * apart only, and for 4-byte and wider elements (f16/bf16 keep the slots), and the
 * all-to-all's, which starts at 512 KiB close and 32 KiB far apart. Tiny
 * payloads (up to 100 bytes) ride inside the announcement itself.
 * LOCKSTEP_KERNEL_COPY_WIDE lifts the close windows' upper limits (allreduce from
 * 64 KiB, f16/bf16 512 KiB; reduce-scatter 64 KiB), for machines whose kernel copies
 * are as fast as memcpy (lockstep does not time them). Eager broadcasts
 * (params.broadcast_eager_bytes) are the caller's choice, not a route.
 *
 * Ordering. A collective is a full barrier between the ranks for the memory it names:
 * every write a rank made to its send (or buf) before its call happens-before the
 * peers' reads of it inside the call, and every write the call makes to a rank's recv
 * happens-before that rank's return. lockstep_comm_barrier orders all memory: every
 * write any rank made before entering it, including writes into any rank's shared
 * buffer (lockstep_comm_buffer), happens-before every read any rank makes after
 * leaving it. A zero-copy call reads and writes the peers' buffers directly: a rank
 * may write its buffer again once its call has returned, and must not touch the
 * regions a call names while the call runs. (Eager broadcasts: the root's return
 * orders nothing on the receivers; see broadcast_eager_bytes.)
 *
 * Thread safety:
 *   function                              may run at once with
 *   lockstep_comm_params_*, _env_error    anything (env_error: as getenv)
 *   lockstep_comm_create                  anything; each rank once per job
 *   collectives, _barrier, _refuse, _tag  calls on other communicators; on the same one,
 *                                         a second thread's call returns -EBUSY and
 *                                         touches nothing
 *   lockstep_comm_rank/_size/_kernel_copy any call (they read what create fixed)
 *   lockstep_comm_buffer, _peers          any call (_peers: not with ORDER_RANDOM)
 *   lockstep_comm_free                    nothing on the same communicator
 *   lockstep_reduce, _reduce_isa          anything
 *
 * Liveness: every rank holds a lock on its byte of the segment's file from before it
 * claims its rank until it frees the communicator or its process ends, and its pid is
 * checked too, so a peer's death is noticed across PID namespaces (containers that
 * share /dev/shm). There kernel copies, which need the peers' pids, stay off. A rank
 * that freed its communicator has not died: a call it never makes meets the deadline.
 *
 * fork(): a child's copy of a communicator is not a rank. Its calls return
 * -LOCKSTEP_EFORKED and touch nothing; lockstep_comm_free in the child only unmaps the
 * copy. A child that needs collectives creates its own communicator. */
#ifndef LOCKSTEP_COMM_H
#define LOCKSTEP_COMM_H

#include <stddef.h>
#include <stdint.h>
#include "lockstep/wait.h"
#include "lockstep/pool.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct lockstep_comm lockstep_comm_t;

typedef enum lockstep_dtype {
    LOCKSTEP_DTYPE_F32 = 0,
    LOCKSTEP_DTYPE_F16 = 1,
    LOCKSTEP_DTYPE_BF16 = 2,
    LOCKSTEP_DTYPE_I32 = 3
} lockstep_dtype_t;

typedef enum lockstep_op {
    LOCKSTEP_OP_SUM = 0,
    LOCKSTEP_OP_MAX = 1, /* max and min give the first operand where either is NaN */
    LOCKSTEP_OP_MIN = 2
} lockstep_op_t;

/* The order in which a rank visits its peers in broadcast and allgather. */
typedef enum lockstep_order {
    LOCKSTEP_ORDER_LINEAR = 0,   /* 0, 1, ..., N-1 */
    LOCKSTEP_ORDER_ROTATED = 1,  /* r+1, r+2, ... wrapping ("pass up") */
    LOCKSTEP_ORDER_RANDOM = 2,   /* a per-call shuffle */
    LOCKSTEP_ORDER_TOPOLOGY = 3  /* nearest first: SMT siblings, same L3, same NUMA node */
} lockstep_order_t;

/* Who copies in broadcast and allgather through the slots. PULL writes each block once,
 * on the receivers, in parallel; PUSH writes it twice (into the receiver's slot, then
 * out) and puts a broadcast's copies on the root. Choose PULL, unless the receivers'
 * buffers lie in their lockstep_comm_buffer and the senders' do not: then PUSH runs
 * zero-copy. Past small_bytes, PULL runs zero-copy where the senders' buffers lie there
 * (allgather: every send; broadcast: the root's buf). */
typedef enum lockstep_xfer {
    LOCKSTEP_XFER_PULL = 0, /* each receiver copies from the sender's slot */
    LOCKSTEP_XFER_PUSH = 1  /* the sender writes into each receiver's slot */
} lockstep_xfer_t;

/* Where large blocks may move by kernel copy (see Routes above) */
typedef enum lockstep_kernel_copy {
    LOCKSTEP_KERNEL_COPY_AUTO = 0, /* within the route table's windows (the default) */
    LOCKSTEP_KERNEL_COPY_OFF = 1,  /* never */
    LOCKSTEP_KERNEL_COPY_WIDE = 2  /* past the windows' upper limits too */
} lockstep_kernel_copy_t;

/* How far apart the ranks sit, which decides between routes (see Routes above) */
typedef enum lockstep_distance {
    LOCKSTEP_DISTANCE_CLOSE = 0, /* a cache line's round trip under 120 ns: one die */
    LOCKSTEP_DISTANCE_FAR = 1,   /* slower: other sockets or core complexes, or vCPUs the
                                    host has placed apart */
    LOCKSTEP_DISTANCE_AUTO = 2   /* params.distance only: judge from the probe */
} lockstep_distance_t;

#define LOCKSTEP_COMM_MAX_RANKS 256
#define LOCKSTEP_COMM_JOB_MAX 200

typedef struct lockstep_comm_params {
    char job[LOCKSTEP_COMM_JOB_MAX + 1]; /* names the segment; the same on every rank,
                                            unique per job */
    int rank;
    int size;
    uint32_t timeout_ms;                /* deadline of every wait; 0 = none; default 60000 */
    lockstep_wait_policy_t wait_policy; /* auto, oversubscribed: a rank yields at once,
                                           unless every rank it waits for last ran on
                                           another CPU: then it spins briefly first */
    size_t small_bytes;                 /* per-rank small slot (x2): broadcasts and
                                           allgathers up to this size take one
                                           synchronisation; 256..2**30, a multiple of 64 */
    size_t allreduce_small_bytes;       /* allreduces up to this size (and small_bytes)
                                           take the small path; 256..2**30, or 0: the
                                           table's (rank 0 decides for all). Set, it is
                                           the reduce-scatter's and all-to-all's too */
    size_t chunk_bytes;                 /* per-rank chunk slot (x2) for large messages;
                                           4096..2**30, a multiple of 64 */
    lockstep_pool_t *pool;              /* optional, not owned: large copies and reductions
                                           are split across its threads (each element is
                                           still reduced once, in rank order). It must not
                                           run a region during comm calls. */
    int (*cancel)(void *arg);           /* optional: asked at least every 10 ms while a
                                           call (or create) waits; nonzero abandons the
                                           wait with -ECANCELED and breaks the
                                           communicator on every rank. Runs on the
                                           calling thread (Python: signal handlers). */
    void *cancel_arg;
    size_t buffer_bytes;                /* shared memory per rank for zero-copy calls
                                           (lockstep_comm_buffer); 0 = none; the same on
                                           every rank; at most 2**40, rounded up to 4 KiB */
    int cpu_sharers;                    /* processes that keep these CPUs busy during
                                           calls, these ranks included (several
                                           communicators or jobs on one machine): more
                                           than CPUs counts as oversubscribed. 0: size;
                                           else at least size */
    size_t broadcast_eager_bytes;       /* 0, or up to 65536: broadcasts up to this size
                                           are eager (see lockstep_comm_broadcast); the
                                           same on every rank */
    lockstep_kernel_copy_t kernel_copy; /* each rank's own; the environment variable
                                           LOCKSTEP_KERNEL_COPY (auto, off, wide)
                                           overrides it, for experiments */
    lockstep_distance_t distance;       /* AUTO (the default): routes follow the probe
                                           (lockstep_comm_distance); CLOSE or FAR fix
                                           them. Rank 0's counts; the environment
                                           variable LOCKSTEP_COMM_DISTANCE (auto, close,
                                           far) in rank 0 overrides it */
    /* Thresholds of the route table (Routes above), 0 for the table's own. Each has an
     * environment variable that overrides it, for experiments. */
    size_t relay_bytes;                 /* zero-copy PUSH broadcasts among 3 or more ranks
                                           from this size are relayed along the root's
                                           order; 0: 1 MiB; up to 2**31; rank 0's counts;
                                           LOCKSTEP_COMM_RELAY_BYTES */
    size_t zero_copy_min_bytes;         /* calls whose buffers all lie in the shared
                                           buffers run zero-copy from this size (the
                                           allreduce: times ranks per CPU); 0: 1 KiB; up
                                           to 2**30; each rank's own;
                                           LOCKSTEP_COMM_ZERO_COPY_MIN_BYTES */
    size_t prefetch_max_bytes;          /* the small allreduce among 3 or more ranks asks
                                           for every peer's slot first while all of them
                                           together are at most this; 0: 8 KiB; up to
                                           2**30; each rank's own;
                                           LOCKSTEP_COMM_PREFETCH_MAX_BYTES */
} lockstep_comm_params_t;

/* job "", rank 0, size 1, timeout 60 s, default policy, small 256 KiB, allreduce small
 * 0 (the table's), chunk 1 MiB, no pool, no buffer, cpu_sharers 0, no eager
 * broadcasts, kernel copies AUTO, distance AUTO, the table's thresholds. */
lockstep_comm_params_t lockstep_comm_params_default(void);

/* Fill rank, size and job from the environment: torchrun's LOCAL_RANK and
 * LOCAL_WORLD_SIZE (job from MASTER_ADDR, MASTER_PORT, TORCHELASTIC_RUN_ID and the node,
 * GROUP_RANK), else OpenMPI's OMPI_COMM_WORLD_LOCAL_RANK / _LOCAL_SIZE (job from
 * OMPI_MCA_orte_ess_jobid or PMIX_NAMESPACE), else LOCKSTEP_RANK / LOCKSTEP_SIZE /
 * LOCKSTEP_JOB.
 * Errors: -ENOENT (no set present), -EINVAL (one malformed; lockstep_comm_env_error
 * names the variable). */
int lockstep_comm_params_from_env(lockstep_comm_params_t *p);

/* The variable lockstep_comm_params_from_env last found malformed or missing ("" if
 * none), for error messages. Concurrency: as getenv. */
const char *lockstep_comm_env_error(void);

/* 0 if lockstep_comm_create would accept params, else -EINVAL with a message naming
 * the field (or environment variable) to fix and its valid values in msg (len bytes;
 * msg may be NULL). */
int lockstep_comm_params_check(const lockstep_comm_params_t *params, char *msg, size_t len);

/* Join the job: every rank calls this with the same job and size; blocks until every
 * rank has mapped the segment. Each rank probes at create whether it can reach its
 * peers by kernel copy, and registers for membarrier's global expedited command
 * (LOCKSTEP_NO_MEMBARRIER=1 keeps a rank, and so its communicator, out).
 * Ordering: none beyond the rendezvous; the first collective orders the ranks' memory.
 * Errors: NULL with errno EINVAL (bad params), ETIMEDOUT (peers did not come),
 * LOCKSTEP_EMISMATCH (a rank's size, slots, buffer or eager sizes differ from rank
 * 0's: on every rank that reached create), ECANCELED, EPROTO (rank 0 runs another
 * build, whose segment this one cannot read), EEXIST (a live job uses the name), EBUSY
 * (another process holds this rank), ENOSPC (/dev/shm cannot hold the segment),
 * ENOMEM, or shm_open/mmap's errno. Nothing is left in /dev/shm on failure. */
lockstep_comm_t *lockstep_comm_create(const lockstep_comm_params_t *params);

/* Leave: unmap. NULL is a no-op. Concurrency: no call on comm may run, or follow. */
void lockstep_comm_free(lockstep_comm_t *comm);

/* This rank and the size; -EINVAL for NULL */
int lockstep_comm_rank(const lockstep_comm_t *comm);
int lockstep_comm_size(const lockstep_comm_t *comm);

/* Whether this rank offers kernel copies where the route table takes them: 1 yes, 0
 * no (a security module refused the probe at create, or params.kernel_copy or
 * LOCKSTEP_KERNEL_COPY is off), -EINVAL for NULL. */
int lockstep_comm_kernel_copy(const lockstep_comm_t *comm);

/* Bytes per element of dtype, or 0 if unknown. */
size_t lockstep_dtype_size(lockstep_dtype_t dtype);

/* recv[i] = op over ranks of send[i], i < count. send == recv is in place; otherwise
 * they must not overlap. count == 0 still takes its turn.
 * Ordering: as every collective (top). A peer still writing into this rank's recv by
 * kernel copy when this rank's call fails checks for the failure before each piece,
 * and this rank waits for a piece under way before it returns (2 s at most), so
 * nothing lands in recv after the return.
 * Concurrency: one call per communicator at a time (-EBUSY).
 * Errors: -EINVAL (NULL buffers with count > 0, bad dtype or op, overlap),
 * -LOCKSTEP_EPEERINVAL (another rank's were invalid), -LOCKSTEP_EMISMATCH,
 * -LOCKSTEP_EPEERDIED, -ETIMEDOUT, -ECANCELED, -EIO (a peer's buffer could not be
 * reached: a bad pointer on that rank), -EBUSY, -LOCKSTEP_EFORKED. The other
 * collectives return the same codes. */
int lockstep_comm_allreduce(lockstep_comm_t *comm, const void *send, void *recv, size_t count,
                            lockstep_dtype_t dtype, lockstep_op_t op);

/* recv[i] = op over ranks r of rank r's send[rank * count + i], i < count: send holds
 * size blocks of count elements, block d for rank d (MPI_Reduce_scatter_block),
 * reduced in rank order. recv may be send + rank * count elements (in place); no other
 * overlap. Ordering, concurrency, errors: as allreduce. */
int lockstep_comm_reduce_scatter(lockstep_comm_t *comm, const void *send, void *recv, size_t count,
                                 lockstep_dtype_t dtype, lockstep_op_t op);

/* recv block k = rank k's send block `rank`: send and recv hold size blocks of bytes
 * (MPI_Alltoall); they must not overlap. Ordering, concurrency, errors: as allreduce. */
int lockstep_comm_alltoall(lockstep_comm_t *comm, const void *send, void *recv, size_t bytes);

/* Copy root's buf (bytes) into every other rank's buf. Every rank passes the same xfer
 * (else -LOCKSTEP_EMISMATCH); the order may differ.
 * Eager (bytes <= params.broadcast_eager_bytes): the root copies buf into shared memory
 * and returns without waiting, up to 16 calls ahead of the slowest receiver; each
 * receiver waits for the root alone.
 * Ordering: as every collective, except that an eager root's return orders nothing on
 * the receivers, and learns nothing of them: a receiver whose call differs fails with
 * -LOCKSTEP_EMISMATCH and breaks the communicator; the root fails in its next call that
 * waits. The first other call after eager broadcasts waits until every rank has
 * finished them.
 * Concurrency, errors: as allreduce. */
int lockstep_comm_broadcast(lockstep_comm_t *comm, void *buf, size_t bytes, int root,
                            lockstep_order_t order, lockstep_xfer_t xfer);

/* recv block r = rank r's send (bytes each), on every rank. recv holds size * bytes;
 * send may be recv + rank * bytes (in place). xfer as for broadcast.
 * Ordering, concurrency, errors: as allreduce. */
int lockstep_comm_allgather(lockstep_comm_t *comm, const void *send, void *recv, size_t bytes,
                            lockstep_order_t order, lockstep_xfer_t xfer);

/* The ranks' distance as last judged: rank 0 and a partner bounce a cache line at
 * create, every 1024 calls, and in a call whose size may move by kernel copy 50 ms or
 * more after the last probe (after the call's announcement), and every rank's routes
 * follow rank 0's judgement from its next call on. The partner is rank 1, or where
 * ranks outnumber the CPUs the first rank that was on another CPU than rank 0 at that
 * point (a partner sharing rank 0's CPU would time process switches). *round_trip_ns
 * (if not NULL) gets the round trip judged from, 0 while none was measured (one rank,
 * the partner did not answer, or, where ranks outnumber the CPUs, it had moved to rank
 * 0's CPU). Rank 0's params.distance or LOCKSTEP_COMM_DISTANCE (close or far)
 * overrides the judgement; the round trip is still measured.
 * Returns a lockstep_distance_t, or -EINVAL for NULL. Concurrency: any call. */
int lockstep_comm_distance(const lockstep_comm_t *comm, uint32_t *round_trip_ns);

/* The way this rank's last collective moved its data */
typedef enum lockstep_route {
    LOCKSTEP_ROUTE_NONE = 0,        /* no collective yet, one rank, or a barrier */
    LOCKSTEP_ROUTE_INLINE = 1,      /* inside the announcement */
    LOCKSTEP_ROUTE_SMALL = 2,       /* the small slots, one synchronisation */
    LOCKSTEP_ROUTE_CHUNKED = 3,     /* the chunk slots, step by step */
    LOCKSTEP_ROUTE_ZERO_COPY = 4,   /* straight between the shared buffers */
    LOCKSTEP_ROUTE_KERNEL_COPY = 5, /* process_vm_readv/writev between private memory */
    LOCKSTEP_ROUTE_EAGER = 6        /* an eager broadcast's ring */
} lockstep_route_t;

/* The route this rank's last call took (set once the call chose it, also when it then
 * failed): for benchmarks and tests that show which way a size goes.
 * Returns a lockstep_route_t, or -EINVAL for NULL. Concurrency: as lockstep_comm_rank. */
int lockstep_comm_route(const lockstep_comm_t *comm);

/* Barrier across the ranks.
 * Ordering: every write any rank made before entering, to private memory it then
 * publishes or to any rank's shared buffer, happens-before every read any rank makes
 * after leaving. No rank leaves before every rank has entered.
 * Concurrency, errors: as allreduce. */
int lockstep_comm_barrier(lockstep_comm_t *comm);

/* This rank's shared buffer (params.buffer_bytes, rounded up to 4 KiB; *bytes gets the
 * size when bytes is not NULL), page-aligned, zero-filled at create, valid until
 * lockstep_comm_free. Every rank maps every rank's buffer. A call whose buffers lie in
 * it on every rank (each rank at any offset) runs zero-copy (Routes, above); if only
 * some ranks' do, the call takes the copying path on every rank, with the same result.
 * Ordering: see the top: the peers read and write it during calls that name it, and
 * only then.
 * Errors: NULL with errno EINVAL (NULL comm) or ENOENT (buffer_bytes was 0). */
void *lockstep_comm_buffer(lockstep_comm_t *comm, size_t *bytes);

/* The peers this rank visits in a broadcast or allgather with `order`, written to
 * peers[0 .. size - 2]. RANDOM draws a fresh shuffle, as a call would; TOPOLOGY: this
 * rank's CPU first, then its SMT siblings, L3, NUMA node, the rest, from the CPUs the
 * ranks ran on at create. Errors: -EINVAL (NULL comm or peers, unknown order). */
int lockstep_comm_peers(lockstep_comm_t *comm, lockstep_order_t order, int *peers);

/* Take part in this rank's next collective only to refuse it, as a collective does
 * when its arguments are invalid: for bindings that reject arguments before they reach
 * lockstep, so that the peers' call ends with -LOCKSTEP_EPEERINVAL instead of at the
 * deadline. Waits until every rank has announced the call.
 * Errors: 0 (also alone), a failure the wait met (the communicator is then broken),
 * -EINVAL (NULL), -EBUSY, -LOCKSTEP_EFORKED. */
int lockstep_comm_refuse(lockstep_comm_t *comm);

/* Mark this rank's later calls with tag (0 to 255; 0 from create). The tag is part of
 * what each call announces and compares, so calls whose tags differ fail with
 * -LOCKSTEP_EMISMATCH: for layers that build one operation out of several calls
 * (lockstep/comm_mpi.h), so that a rank at another step is never paired with one whose
 * call happens to look alike. Local: nothing is announced or waited for.
 * Errors: -EINVAL (NULL comm, tag above 255), -EBUSY, -LOCKSTEP_EFORKED. */
int lockstep_comm_tag(lockstep_comm_t *comm, unsigned tag);

/* out[i] = a[i] op b[i], i < count, with the collectives' kernels (f16 and bf16 in f32,
 * rounded once). out may be a or b (the same start); no other overlap. For combining
 * partial results outside a communicator (lockstep/comm_mpi.h).
 * Errors: -EINVAL (bad dtype or op, NULL buffers with count > 0, overlap, count too
 * large, LOCKSTEP_ISA not known). */
int lockstep_reduce(lockstep_dtype_t dtype, lockstep_op_t op, void *out, const void *a, const void *b,
                    size_t count);

/* The instruction sets of the reduction kernels */
typedef enum lockstep_isa {
    LOCKSTEP_ISA_BASE = 0,
    LOCKSTEP_ISA_AVX2 = 1,
    LOCKSTEP_ISA_AVX512 = 2
} lockstep_isa_t;

/* The widest instruction set the reduction kernels use in this process, chosen once
 * from what the CPU supports, capped by LOCKSTEP_ISA (avx512, avx2 or base) when set.
 * Every choice gives the same bits. Returns a lockstep_isa_t, or -EINVAL while
 * LOCKSTEP_ISA holds anything else (then lockstep_reduce and lockstep_comm_create
 * refuse too; nothing is chosen until the variable is fixed). */
int lockstep_reduce_isa(void);

/* "base", "avx2" or "avx512" (the values LOCKSTEP_ISA takes), NULL for another value */
const char *lockstep_isa_name(lockstep_isa_t isa);

#ifdef __cplusplus
}
#endif

#endif
