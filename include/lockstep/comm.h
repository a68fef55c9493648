/* lockstep/comm.h — collectives between processes on one node, through shared memory.
 *
 * A communicator joins `size` processes (ranks) of one job. Rank 0 creates a POSIX
 * shared-memory segment named after the job; the others map it; the segment is
 * unlinked as soon as every rank has mapped it, so nothing is left in /dev/shm however
 * the job ends afterwards. The segment holds no pointers, only offsets.
 *
 * Every collective call is numbered. Each rank announces (call kind, op, dtype, count,
 * root, and the caller's tag: lockstep_comm_tag) before touching peers' data and
 * checks every peer's announcement; if any disagree the call fails on every rank with
 * -LOCKSTEP_EMISMATCH, never with mixed-up data. (Eager broadcasts,
 * params.broadcast_eager_bytes, trade part of this for speed: their root does not
 * wait, and learns of a disagreement in a later call.) Every wait
 * has a deadline (params.timeout_ms) and, between short slices, checks that peers are
 * alive: a rank that died makes the call fail on the others with -LOCKSTEP_EPEERDIED,
 * a rank that is late past the deadline with -ETIMEDOUT, a wait abandoned through
 * params.cancel (Ctrl-C, say) with -ECANCELED. A rank that exits once it has done its
 * part of the call (an eager root, the last rank to reach a barrier) is no failure: a
 * wait counts what it noticed only if it has not ended. After any such failure the
 * communicator is broken on every rank (later calls return the same error); free it
 * and create a new one.
 *
 * Invalid arguments: a collective that finds its own arguments invalid (-EINVAL) on a
 * communicator of several ranks still takes its turn, as a refused call: it waits
 * until every rank has announced that call, so that the others' calls end at once
 * with -LOCKSTEP_EPEERINVAL instead of waiting out the deadline. The call does
 * nothing on any rank, and the communicator goes on (every rank's next call is the
 * next one): ranks that all pass the same bad arguments all get -EINVAL. Two cases
 * break it, as a mismatch: peers that wait in a barrier while others are in another
 * call (the barrier cannot end), and peers in an eager broadcast (which never wait for
 * the refuser). Bindings that check arguments of their own before calling in refuse
 * with lockstep_comm_refuse.
 *
 * Reductions run in rank order on every rank (or, for large messages, once per
 * element range by one rank in rank order and then copied), so every rank gets a
 * bit-identical result. f16 and bf16 are accumulated in f32 and rounded once.
 *
 * A communicator of one rank touches no shared memory: allreduce and allgather copy
 * send to recv, bit for bit (nothing in place), broadcast and barrier return at once.
 *
 * Threading: one thread at a time may call into a communicator. A call made while
 * another thread's call on it runs returns -EBUSY at once and touches nothing; the
 * call in flight goes on. lockstep_comm_free and lockstep_comm_peers are not checked:
 * free a communicator only once every call on it has returned.
 *
 * Liveness: every rank holds a lock on its byte of the segment's file (an open file
 * description lock) from before it claims its rank until it frees the communicator or
 * its process ends, and its pid is checked too. So a peer's death is noticed across
 * PID namespaces (containers that share /dev/shm: docker --ipc=host, a pod's memory
 * volume) and whatever became of its pid; there, the single-copy paths, which need
 * the peers' pids, stay off. A rank that freed its communicator has not died: a call
 * it never makes meets the deadline (-ETIMEDOUT), as for a rank that never comes.
 *
 * Placement: while ranks outnumber CPUs (auto wait policy), the scheduler often puts
 * more ranks on one CPU than on another and keeps them there (4 ranks on 2 CPUs, 3 on
 * one: a 4-byte allreduce took 1.8x the time of 2 on each). Every so often the ranks
 * compare where they run, and a rank past its CPU's share moves to a CPU that had
 * fewer and that they had to themselves (never to one that ran other work meanwhile),
 * by binding its thread to that CPU and at once giving it back its CPU set: its
 * affinity is unchanged. Not with a pool, nor past 64 ranks; LOCKSTEP_NO_SPREAD=1
 * turns it off (and the spread start of pool workers, pool.h).
 *
 * fork(): a child's copy of a communicator is not a rank. Its collectives return
 * -LOCKSTEP_EFORKED and touch nothing, so the parent's rank and its peers go on
 * undisturbed; lockstep_comm_free in the child only unmaps the copy. A child that
 * needs collectives creates its own communicator (a job of its own). */
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
    LOCKSTEP_F32 = 0,
    LOCKSTEP_F16 = 1,
    LOCKSTEP_BF16 = 2,
    LOCKSTEP_I32 = 3
} lockstep_dtype_t;

typedef enum lockstep_op {
    LOCKSTEP_SUM = 0,
    LOCKSTEP_MAX = 1,
    LOCKSTEP_MIN = 2
} lockstep_op_t;

/* The order in which a rank visits its peers in broadcast and allgather. */
typedef enum lockstep_order {
    LOCKSTEP_ORDER_LINEAR = 0,   /* 0, 1, ..., N-1 */
    LOCKSTEP_ORDER_ROTATED = 1,  /* r+1, r+2, ... wrapping ("pass up") */
    LOCKSTEP_ORDER_RANDOM = 2,   /* a per-call shuffle */
    LOCKSTEP_ORDER_TOPOLOGY = 3  /* nearest first: SMT siblings, same L3, same NUMA node */
} lockstep_order_t;

/* Who copies in broadcast and allgather. Which to choose: PULL, unless the receivers'
 * buffers lie in their lockstep_comm_buffer (then PUSH runs zero-copy, see there).
 * Copying through the slots, PUSH writes every block twice (into the receiver's slot,
 * then out of it) and puts a broadcast's copies on the root alone; PULL writes each
 * once, on the receivers, in parallel. `lockstep bench comm` on 2 CPUs, fresh data
 * each call: at 4 to 16 ranks PULL was as fast or faster (broadcast 256 KiB: 4 ranks
 * 0.64x PUSH's time, 16 ranks 0.21x, where PUSH took 1.3x OpenMPI's time); at 2 ranks
 * the two were within 10% of each other, except allgathers of 256 KiB (PULL 0.64x
 * PUSH's time) and 4 MiB (PUSH 0.92x PULL's). */
typedef enum lockstep_xfer {
    LOCKSTEP_PULL = 0, /* each receiver copies from the sender's slot */
    LOCKSTEP_PUSH = 1  /* the sender writes into each receiver's slot */
} lockstep_xfer_t;

#define LOCKSTEP_COMM_MAX_RANKS 256
#define LOCKSTEP_COMM_JOB_MAX 200

typedef struct lockstep_comm_params {
    char job[LOCKSTEP_COMM_JOB_MAX + 1]; /* names the segment; same on every rank, unique per job */
    int rank;
    int size;
    uint32_t timeout_ms;                 /* deadline of every wait; 0 = none; default 60000 */
    lockstep_wait_policy_t wait_policy;  /* auto with more ranks (or cpu_sharers) than
                                            CPUs: a rank yields
                                            at once, unless every rank it still waits for
                                            last ran on another CPU: then it spins up to
                                            5 us first */
    size_t small_bytes;                  /* per-rank announce slot (x2): broadcasts and
                                            allgathers up to this size go through it, with
                                            one synchronisation; 256..1 GiB, a multiple of 64 */
    size_t allreduce_small_bytes;        /* allreduces up to this size (and up to
                                            small_bytes) take the small path; 256..1 GiB,
                                            or 0 (default): rank 0 picks 32 KiB /
                                            (size - 1), at least 512 B, while ranks fit
                                            its CPUs, 8 KiB when they outnumber them,
                                            and the others take its choice. Set, it
                                            is the reduce-scatter's and all-to-all's
                                            switch too (their own automatic one: 512 B
                                            or 8 KiB) */
    size_t chunk_bytes;                  /* per-rank chunk slot (x2) for large messages; with
                                            more ranks than CPUs (on rank 0), a large
                                            allreduce uses at most 512 KiB of it per step */
    lockstep_pool_t *pool;               /* optional, not owned: large allreduces' and
                                            allgathers' copies and reductions are split
                                            across its threads (each element is still
                                            reduced once, in rank order, so results stay
                                            bit-identical); a large broadcast pipelines
                                            64 KiB pieces on the calling thread instead.
                                            The pool must not be running a region during
                                            comm calls. */
    int (*cancel)(void *arg);            /* optional: asked at least every 10 ms while a call
                                            (or create) waits for peers; nonzero abandons
                                            the wait: the call returns -ECANCELED and the
                                            communicator is broken on every rank (their
                                            calls fail with -ECANCELED too). For Ctrl-C:
                                            the Python package checks its signal handlers
                                            here. Runs on the calling thread. */
    void *cancel_arg;
    size_t buffer_bytes;                 /* this many bytes of shared memory per rank for
                                            zero-copy allreduces (lockstep_comm_buffer);
                                            0 = none (the default); same on every rank;
                                            at most 2**40, rounded up to 4 KiB */
    int cpu_sharers;                     /* how many processes keep these CPUs busy during
                                            calls, this communicator's ranks included:
                                            with more of them than CPUs, the auto wait
                                            policy yields instead of spinning (which
                                            would take the CPU from a process the call
                                            waits for) and a large allreduce takes the
                                            shorter step, as with more ranks than CPUs.
                                            For several communicators, or other busy
                                            jobs, on one machine. 0 (default): size;
                                            else at least size (rank 0's decides the
                                            step for everyone) */
    size_t broadcast_eager_bytes;        /* 0 (default), or up to 65536: broadcasts of at
                                            most this many bytes are eager. The root
                                            copies the payload into shared memory and
                                            returns without waiting (up to 16 calls
                                            ahead of the slowest rank); each receiver
                                            waits for the root alone. The price: the
                                            root learns nothing in the call itself. A
                                            receiver that disagrees with it (count,
                                            root, transfer, or another call) fails with
                                            -LOCKSTEP_EMISMATCH and breaks the
                                            communicator; the root, and receivers that
                                            agreed, fail in their next call. A receiver
                                            that dies is noticed by the root's next call
                                            that waits. The order and push/pull play no
                                            part. The first other call after eager
                                            broadcasts waits until every rank has
                                            finished them. Same on every rank. */
} lockstep_comm_params_t;

/* job "", rank 0, size 1, timeout 60 s, default policy, small 256 KiB, allreduce small
 * 0 (rank 0 picks 32 KiB / (size - 1) or 8 KiB, see allreduce_small_bytes; the switch
 * points are measured, see comm.c), chunk 1 MiB, no buffer, cpu_sharers 0, no eager
 * broadcasts. */
lockstep_comm_params_t lockstep_comm_params_default(void);

/* Fill rank, size and job from the environment: torchrun's LOCAL_RANK and
 * LOCAL_WORLD_SIZE (job from MASTER_ADDR, MASTER_PORT, and TORCHELASTIC_RUN_ID and
 * GROUP_RANK, the node, when set: nodes emulated on one machine get jobs of their
 * own), else OpenMPI's OMPI_COMM_WORLD_LOCAL_RANK / _LOCAL_SIZE (job from
 * OMPI_MCA_orte_ess_jobid or PMIX_NAMESPACE), else LOCKSTEP_RANK / LOCKSTEP_SIZE /
 * LOCKSTEP_JOB. Returns 0, or -ENOENT when no set is present, -EINVAL when one is
 * malformed (the message names the variable in errno-less form: see
 * lockstep_comm_env_error). */
int lockstep_comm_params_from_env(lockstep_comm_params_t *p);

/* The variable lockstep_comm_params_from_env last found malformed or missing ("" if
 * none); for error messages. Thread-unsafe, like getenv. */
const char *lockstep_comm_env_error(void);

/* 0 if lockstep_comm_create would accept params' values, else -EINVAL with a message
 * naming the field to fix and its valid range in msg (len bytes; msg may be NULL). */
int lockstep_comm_params_check(const lockstep_comm_params_t *params, char *msg, size_t len);

/* Join the job: every rank calls this with the same job and size. Blocks until all
 * ranks have mapped the segment (or the deadline). Returns NULL with errno: EINVAL
 * (bad params), ETIMEDOUT (peers did not come), LOCKSTEP_EMISMATCH (on every rank
 * that reached create, when one rank's size, slot, buffer or eager sizes differ from
 * rank 0's), ECANCELED (params.cancel asked), EPROTO (rank 0 runs another build of
 * lockstep, whose shared segment this one cannot read),
 * EEXIST (a live job already uses the name), EBUSY (another process holds this rank
 * of the job: the job is left as it was), ENOSPC (/dev/shm cannot hold the
 * segment: slots and buffers of every rank, all allocated here), ENOMEM, or the
 * shm_open/mmap errno. Each rank registers its process for membarrier's global
 * expedited command; when every rank could, the calls publish with plain stores and a
 * rank about to sleep pays for the fence instead (see wait.h).
 * LOCKSTEP_NO_MEMBARRIER=1 keeps a rank out, and with it every rank of the
 * communicator. */
lockstep_comm_t *lockstep_comm_create(const lockstep_comm_params_t *params);

/* Leave: unmap. NULL is a no-op. */
void lockstep_comm_free(lockstep_comm_t *comm);

int lockstep_comm_rank(const lockstep_comm_t *comm);
int lockstep_comm_size(const lockstep_comm_t *comm);

/* How this rank's calls move large blocks straight between the ranks' own memory
 * (single copies, process_vm_readv/writev): "off" when this rank cannot (a security
 * module refused it at create, or LOCKSTEP_NO_CMA=1; no call uses them then, on any
 * rank), else "fast" or "slow", the same on every rank: rank 0 times the kernel's copy
 * against memcpy at create, and where it takes more than twice as long ("slow"), ranks
 * that fit the CPUs use single copies only where they still won on such a machine
 * (all-to-all blocks of 32-160 KiB, PUSH allgather blocks up to 384 KiB, 2-rank
 * broadcasts of 64-512 KiB), and the slots elsewhere, except in allreduces from 256
 * KiB (512 KiB for f16 and bf16), allgathers past the small path (PUSH: past 384 KiB),
 * all-to-all blocks past 160 KiB and 2-rank broadcasts past 512 KiB: there one rank
 * (rank 0; the broadcast's receiver) times both ways as the job runs and takes the
 * cheaper, per size class, looking at the other way now and then, because which wins
 * can change while a job runs (on a VM whose host moved its vCPUs apart, the slots
 * took 2-12x their usual time). So do, at any kernel copy speed, allreduces of 64-256
 * KiB (past the small path; f16 and bf16 up to 512 KiB), 2-rank broadcasts of 16-64
 * KiB and of 512 KiB to 2 MiB and allgathers of 16 KiB blocks or more on the small
 * path, and, where ranks outnumber the CPUs by up to 2 per CPU, allreduces from 64
 * KiB. LOCKSTEP_KERNEL_COPY=fast or slow on rank 0 skips the measure and decides (auto
 * or unset: measure; anything else: lockstep_comm_create fails with EINVAL,
 * lockstep_comm_params_check says why).
 * NULL with errno EINVAL for a NULL comm. */
const char *lockstep_comm_kernel_copy(const lockstep_comm_t *comm);

/* Bytes per element of dtype, or 0 if unknown. */
size_t lockstep_dtype_size(lockstep_dtype_t dtype);

/* recv[i] = op over ranks r of rank r's send[rank * count + i], i < count: send holds
 * size blocks of count elements, block d for rank d (MPI_Reduce_scatter_block). Each
 * element is reduced in rank order, as in allreduce. recv may be send + rank * count
 * elements (in place); no other overlap. Zero-copy when send and recv lie in the
 * buffer (lockstep_comm_buffer) on every rank. Returns the codes allreduce returns. */
int lockstep_comm_reduce_scatter(lockstep_comm_t *comm, const void *send, void *recv, size_t count,
                                 lockstep_dtype_t dtype, lockstep_op_t op);

/* recv[k * bytes .. (k+1) * bytes) = rank k's send[rank * bytes .. (rank+1) * bytes):
 * send and recv hold size blocks of bytes, block d of send for rank d (MPI_Alltoall).
 * send and recv must not overlap. Zero-copy when both lie in the buffer on every rank;
 * otherwise blocks of 8 KiB or more (32 KiB when ranks outnumber the CPUs) are written
 * into the peers' recv in one copy (process_vm_writev: same user, where the system
 * allows it; set LOCKSTEP_NO_CMA=1 to go through shared memory). Returns the codes
 * allreduce returns, and -EIO when a block cannot be moved (a bad pointer on some
 * rank). */
int lockstep_comm_alltoall(lockstep_comm_t *comm, const void *send, void *recv, size_t bytes);

/* recv[i] = op over ranks of send[i], i < count. send == recv is in place; otherwise
 * the buffers must not overlap. count == 0 still synchronises the call numbering.
 * From 256 KiB (512 KiB for f16 and bf16), while ranks fit the CPUs and no pool or
 * buffer is involved, each rank reads its part of the peers' sends and writes the
 * result into their recvs in one copy (process_vm_readv/writev; LOCKSTEP_NO_CMA=1
 * turns it off).
 * A peer still inside such a call when this rank's fails (its deadline, say) checks
 * for the failure before each piece it writes (256 KiB at most), and this rank waits
 * for a piece already under way before it returns the error, so nothing lands in recv
 * after the return. (It waits 2 s at most, for a writer that cannot run: stopped.)
 * Returns 0, -EINVAL (NULL buffers with count > 0, bad dtype or op, overlap: see
 * "Invalid arguments" at the top), -LOCKSTEP_EPEERINVAL (another rank's were invalid),
 * -LOCKSTEP_EMISMATCH, -LOCKSTEP_EPEERDIED, -ETIMEDOUT, -ECANCELED (this rank's or a
 * peer's params.cancel asked), -EIO (a peer's buffer could not be reached: a bad
 * pointer on that rank), -LOCKSTEP_EFORKED (called in a child forked after create).
 * Broadcast, allgather and barrier return the same codes. */
int lockstep_comm_allreduce(lockstep_comm_t *comm, const void *send, void *recv, size_t count,
                            lockstep_dtype_t dtype, lockstep_op_t op);

/* out[i] = a[i] op b[i], i < count, with the kernels the collectives use (f16 and bf16
 * computed in f32 and rounded once; max and min give a where either side is NaN).
 * out may be a or b (the same start); no other overlap. For combining partial results
 * outside a communicator, as lockstep/comm_mpi.h does between nodes. Returns 0 or
 * -EINVAL (bad dtype or op, NULL buffers with count > 0, count too large, overlap,
 * LOCKSTEP_ISA not known: see lockstep_reduce_isa). */
int lockstep_reduce(lockstep_dtype_t dtype, lockstep_op_t op, void *out, const void *a, const void *b,
                    size_t count);

/* The widest instruction set the reduction kernels use in this process: "avx512",
 * "avx2" or "base". They are chosen once, at the first communicator, lockstep_reduce
 * or lockstep_reduce_isa call, from what the CPU supports, capped by the environment
 * variable LOCKSTEP_ISA (avx512, avx2 or base; unset or empty: no cap) when it is set.
 * Every choice gives the same bits. NULL with errno EINVAL while LOCKSTEP_ISA holds
 * anything else; lockstep_reduce then returns -EINVAL and lockstep_comm_create (and
 * lockstep_comm_params_check, with a message) refuse too. Nothing is chosen then: the
 * first call after the variable is fixed chooses. */
const char *lockstep_reduce_isa(void);

/* This rank's shared buffer (params.buffer_bytes of it, rounded up to 4 KiB; *bytes
 * receives the size when bytes is not NULL), page-aligned and zero-filled at create,
 * valid until lockstep_comm_free. Every rank's buffer is mapped by every rank. An
 * allreduce of at least 1 KiB times the ranks per CPU (1 while ranks fit the CPUs; 4
 * ranks on 2 CPUs: 2 KiB), or of more than allreduce_small_bytes if that is less,
 * whose send and recv lie inside the caller's buffer on every rank (each rank at any
 * offset, in place or not) runs zero-copy: each rank reduces 1/size of the elements
 * straight from every rank's send into every rank's recv, and one synchronisation
 * more ends the call (smaller ones take the small path, whose one synchronisation is
 * faster there). No copies through the slots:
 * each rank reads and writes the message once, against 2-2.5 reads and 2 writes on
 * the copying path (`lockstep bench comm`, lockstep-buffer rows). If only some ranks
 * pass buffers from here, the call takes the copying path everywhere; the result is
 * the same bits either way.
 * PUSH broadcasts past params.small_bytes and PUSH allgathers past the small path
 * run zero-copy too when every receiver's buf (broadcast) or every rank's recv
 * (allgather) lies in its rank's buffer: the sender copies straight into them, one
 * copy per receiver. Such a broadcast of 1 MiB or more among 3 or more ranks is
 * relayed: its pieces pass along the root's order, each receiver copying each piece
 * on into the next receiver's buf once it has it, so the copies run at once instead
 * of all on the root. Below that, or with 2 ranks, a broadcast whose root's buf lies
 * in the root's buffer too is shared: the receivers copy from the root's buf (with 2
 * ranks, half of it each with the root), and the root returns once they all have.
 * That shared form also runs up to small_bytes when the root's buf lies in its buffer
 * and (size - 1) * bytes is 576 KiB or more (else the small slots carry it); if some
 * receiver's buf does not, the root copies into the slots after announcing, one
 * synchronisation more.
 * PULL has no zero-copy form (it was no faster).
 * NULL with errno EINVAL (no communicator) or ENOENT (params.buffer_bytes was 0). */
void *lockstep_comm_buffer(lockstep_comm_t *comm, size_t *bytes);

/* The peers this rank visits in a broadcast or allgather with `order`, in that
 * order: the other size - 1 ranks, written to peers[0 .. size - 2]. LINEAR: 0, 1, ...;
 * ROTATED: rank + 1, rank + 2, ... wrapping; RANDOM: a fresh shuffle, drawn as a call
 * draws it; TOPOLOGY: ranks on this rank's CPU first, then its SMT siblings, its L3,
 * its NUMA node, the rest (ties in ROTATED order), from the CPUs the ranks ran on
 * when they created the communicator. Returns 0, or -EINVAL (NULL comm or peers, an
 * unknown order). */
int lockstep_comm_peers(lockstep_comm_t *comm, lockstep_order_t order, int *peers);

/* Copy root's buf (bytes) into every other rank's buf. order and xfer are
 * lockstep_order_t and lockstep_xfer_t; every rank must pass the same xfer (else
 * -LOCKSTEP_EMISMATCH), the order may differ. Between 2 ranks that fit the CPUs, from
 * 64 KiB to 512 KiB and from 2 MiB (and not zero-copy), the root writes half of buf
 * into the receiver's and the receiver reads the other half from the root's, one copy
 * each (process_vm_writev/readv; LOCKSTEP_NO_CMA=1 turns it off); the root then
 * returns once the receiver has its copy. From 512 KiB to 2 MiB, and past 512 KiB
 * where kernel copies are slow (lockstep_comm_kernel_copy), the receiver takes that
 * way or the slots, whichever its timing finds cheaper. */
int lockstep_comm_broadcast(lockstep_comm_t *comm, void *buf, size_t bytes, int root,
                            lockstep_order_t order, lockstep_xfer_t xfer);

/* recv[r * bytes .. (r+1) * bytes) = rank r's send, on every rank. recv holds
 * size * bytes; send may be recv + rank * bytes (in place). xfer as for broadcast.
 * Past the small path (and not zero-copy), blocks move in one copy between the
 * ranks' own memory: with PULL, blocks of 1 MiB or more while ranks fit the CPUs, each
 * rank reads the peers' sends (process_vm_readv); with PUSH, blocks of 128 KiB or more
 * (64 KiB when ranks outnumber the CPUs), each rank writes its block into the peers'
 * recvs (process_vm_writev, in pieces of 256 KiB at most, as the allreduce's).
 * Where kernel copies are slow (lockstep_comm_kernel_copy), PUSH blocks of 128-384 KiB
 * move so, and past that, and PULL blocks past the small path, take that way or the
 * slots, whichever rank 0's timing finds cheaper; so do blocks of 16 KiB or more on
 * the small path (total up to small_bytes; PULL: each block up to it), at any kernel
 * copy speed, while ranks fit the CPUs. LOCKSTEP_NO_CMA=1 turns it off. */
int lockstep_comm_allgather(lockstep_comm_t *comm, const void *send, void *recv, size_t bytes,
                            lockstep_order_t order, lockstep_xfer_t xfer);

/* Barrier across the ranks, with the same deadline and liveness checks. */
int lockstep_comm_barrier(lockstep_comm_t *comm);

/* Take part in this rank's next collective only to refuse it, as a collective does
 * when its arguments are invalid (see "Invalid arguments" at the top): for bindings
 * that reject a call's arguments before they reach lockstep (Python's buffer checks),
 * so that the peers' call ends with -LOCKSTEP_EPEERINVAL instead of at the deadline.
 * Waits until every rank has announced the call. Returns 0 (also alone), or the
 * failure the wait met (-LOCKSTEP_EPEERDIED, -ETIMEDOUT, ...: the communicator is then
 * broken), or -EINVAL for a NULL comm, -EBUSY and -LOCKSTEP_EFORKED as any call. */
int lockstep_comm_refuse(lockstep_comm_t *comm);

/* Mark this rank's later calls on comm with tag (0 to 255; 0 from create) until it is
 * set again. The tag is part of what each call announces and compares, so calls
 * whose tags differ fail with -LOCKSTEP_EMISMATCH, as calls that differ in anything
 * else do. For layers that build one operation out of several calls on a
 * communicator (lockstep/comm_mpi.h): with each step tagged, a rank at another step,
 * or in another operation, is never paired with it because the two calls happen to
 * look alike (two 4-byte broadcasts from rank 0, say). Local: nothing is announced
 * or waited for. Returns 0, -EINVAL (NULL comm, tag above 255), or -EBUSY and
 * -LOCKSTEP_EFORKED as any call. */
int lockstep_comm_tag(lockstep_comm_t *comm, unsigned tag);

#ifdef __cplusplus
}
#endif

#endif
