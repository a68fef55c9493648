/* lockstep/comm_mpi.h — collectives past one node: shared memory inside each node,
 * MPI between nodes. Link lockstep::lockstep_mpi (built when CMake finds MPI).
 *
 * A lockstep_mpi_comm_t spans the processes of an MPI communicator. The ranks of each
 * node share one lockstep_comm_t (lockstep/comm.h); the lowest rank of each node is its
 * leader, and only the leaders talk MPI (but in the all-to-all, where every rank does),
 * with non-blocking collectives polled against the same deadline as the node's waits.
 * A call:
 *
 *   allreduce  node allreduce; leaders reduce the node results to the first leader in
 *              node order (MPI_Ireduce with a non-commutative user op, so MPI keeps
 *              that order) and broadcast it back (MPI_Ibcast); node broadcast.
 *   broadcast  node broadcast in the root's node; leaders MPI_Ibcast; node broadcast
 *              in the other nodes.
 *   allgather  node allgather into recv; leaders MPI_Iallgatherv of the node
 *              blocks (in the scratch, below), then (when nodes interleave in rank
 *              order) reorder them in place; node broadcast of the whole result.
 *   barrier    node barrier; leaders MPI_Ibarrier; node broadcast of the outcome.
 *   reduce_scatter  node allreduce of the whole vector (into a scratch); leaders
 *              MPI_Ireduce_scatter of it, each node's blocks (in node order) to its
 *              leader, with the same non-commutative ops (past a piece: MPI_Ireduce
 *              to each leader in turn); node broadcast of the node's blocks, each
 *              rank keeping its own.
 *   alltoall   every rank, not only leaders: MPI_Ialltoallv of the blocks to and
 *              from the ranks of other nodes, and meanwhile the node's all-to-all of
 *              the blocks inside it; a node allreduce of the worst outcome.
 *
 * Between leaders a message larger than params.piece_bytes goes in pieces, one MPI
 * call each (an allgather's or all-to-all's piece k of every block at once), so no
 * size is too large for an MPI count.
 *
 * After the leaders' step every leader broadcasts its outcome to its node first, so
 * that an MPI failure or timeout on a leader fails the call on its whole node at once
 * instead of leaving the others to their deadline. Every rank gets bit-identical
 * results; an f16 or bf16 allreduce is rounded once per node and once more between
 * nodes. Errors: those of lockstep/comm.h, and -LOCKSTEP_EMPI when an MPI call
 * returns an error (the MPI communicators here are set to return errors, not abort).
 * Unlike comm.h's, a call that fails may leave part of the result in recv (its node's,
 * when the leaders find the failure after the node's step: a mismatch between nodes,
 * say); only a rank's own -EINVAL, and calls that every rank refused alike, leave
 * everything as it was. The sends are never written.
 * Each call a collective makes on a node's communicator is tagged with the collective
 * and its step (lockstep_comm_tag), so that a rank at another step, or in another
 * collective, than the rest of its node fails with -LOCKSTEP_EMISMATCH instead of
 * being paired with a call that looks alike.
 * What MPI cannot give: mismatched calls are detected inside each node only (unless
 * params.check_calls, at one more small MPI allreduce per call), and a
 * node whose leader never reaches MPI makes the other leaders wait out their deadline
 * (-ETIMEDOUT); the pending MPI request is then abandoned, and the communicator is
 * broken (free it; later calls return the same error). With params.check_calls, a
 * call that fails inside one node (its ranks' calls differ, a peer died, a cancel)
 * still has that node's leader take its turn among the leaders, so the other nodes
 * fail at once with the same error instead of at their deadline (not after a
 * timeout). So that every node's ranks have compared their calls before the leaders
 * do, with check_calls a broadcast's nodes other than the root's, and every node in
 * an all-to-all, compare root and count in one more small node allreduce first.
 * MPI cannot cancel a collective,
 * so an abandoned request may still read or write its buffers until MPI_Finalize:
 * MPI is never given the caller's buffers, only copies in a scratch the communicator
 * keeps (grown to the largest call: on leaders the message, size * bytes for
 * allgather; see reduce_scatter and alltoall), which a broken communicator never
 * frees, nor the arrays MPI reads. Without the memory for it a leader fails its node
 * with -ENOMEM (-LOCKSTEP_EMISMATCH on the node's other ranks), and the other leaders
 * wait out their deadline; with params.check_calls they fail at once with
 * -LOCKSTEP_EMISMATCH. Invalid arguments on
 * one rank (-EINVAL there) end the call on its node at once, with
 * -LOCKSTEP_EPEERINVAL on the others (comm.h: "Invalid arguments"); with one node the
 * communicator goes on, with more it is broken on that node and the other nodes' ranks
 * wait out their deadline; with params.check_calls they fail at once instead, with
 * -LOCKSTEP_EPEERINVAL (their buffers then hold what a failed call leaves: recv
 * possibly their node's part of the result), and the communicator is broken on every
 * rank except the one with invalid arguments when it does not lead its node (it
 * cannot know whether every other rank refused too; free the communicator there as
 * well). Ranks that all pass the same invalid arguments all get -EINVAL, and the
 * communicator goes on.
 *
 * Threading: one thread at a time per communicator; MPI must be initialised with at
 * least MPI_THREAD_SERIALIZED if several threads use lockstep_mpi communicators. */
#ifndef LOCKSTEP_COMM_MPI_H
#define LOCKSTEP_COMM_MPI_H

#include <mpi.h>
#include "lockstep/lockstep.h"
#include "lockstep/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct lockstep_mpi_comm lockstep_mpi_comm_t;

typedef struct lockstep_mpi_params {
    lockstep_comm_params_t node; /* each node's communicator: timeout_ms (also the
                                    leaders' MPI deadline), wait_policy, sizes, pool,
                                    cancel, buffer_bytes, cpu_sharers (0: every
                                    rank on the machine, which differs from the
                                    node's size with ranks_per_node); job, rank
                                    and size are filled in here, and
                                    broadcast_eager_bytes is 0 there (a node's
                                    broadcasts carry outcomes that every rank
                                    must learn in the call) */
    int ranks_per_node;          /* 0 (default): a node is the ranks that share memory
                                    (MPI_COMM_TYPE_SHARED); n > 0: those are further
                                    split into ceil(ranks / n) groups, dealt round-
                                    robin by rank (as a by-node mapping places ranks;
                                    see consecutive), each taking the part of a
                                    node: runs the multi-node path on one machine */
    size_t piece_bytes;          /* the most bytes one MPI call between leaders
                                    carries: larger messages go in pieces, one
                                    after the other. 0 (default): INT_MAX, the
                                    most an MPI count can say; 1 to INT_MAX */
    int check_calls;             /* nonzero: before any data moves between nodes, the
                                    leaders compare the call (which collective, op,
                                    dtype, root, count) in one small MPI allreduce
                                    (in a broadcast's nodes without its root and in
                                    an all-to-all, after the node's ranks compare
                                    root and count in one small node allreduce),
                                    so calls that differ between nodes fail with
                                    -LOCKSTEP_EMISMATCH on every rank instead of
                                    being undefined in MPI, and a call one node
                                    refused (invalid arguments) or failed inside
                                    it (its ranks' calls differ, say) fails the
                                    others at once. 0 (default): compared inside
                                    each node only */
    int consecutive;             /* with ranks_per_node: nonzero, each group takes
                                    consecutive ranks (0 to n-1, n to 2n-1, ...), as
                                    a by-slot or by-core mapping places them, so
                                    that every node's ranks lie in rank order; 0
                                    (default): dealt round-robin. ranks_per_node
                                    and consecutive must be the same on every rank */
} lockstep_mpi_params_t;

lockstep_mpi_params_t lockstep_mpi_params_default(void);

/* Collective over comm (MPI must be initialised). NULL with errno set: EINVAL (bad
 * params on any rank, ranks that differ in ranks_per_node or consecutive, or comm is
 * MPI_COMM_NULL), ENOMEM, the errors of
 * lockstep_comm_create, or LOCKSTEP_EMPI; every rank of comm fails alike. */
lockstep_mpi_comm_t *lockstep_mpi_comm_create(MPI_Comm comm, const lockstep_mpi_params_t *params);
void lockstep_mpi_comm_free(lockstep_mpi_comm_t *c);

int lockstep_mpi_comm_rank(const lockstep_mpi_comm_t *c);  /* rank in comm */
int lockstep_mpi_comm_size(const lockstep_mpi_comm_t *c);
int lockstep_mpi_comm_nodes(const lockstep_mpi_comm_t *c); /* number of nodes */
lockstep_comm_t *lockstep_mpi_comm_node(lockstep_mpi_comm_t *c); /* this node's */

/* The collectives, over every rank of comm.
 * Ordering: as comm.h's collectives: every write a rank made to its send (or buf)
 * before its call happens-before every other rank's reads of it in the call, and the
 * call's writes to a rank's recv happen-before that rank's return.
 * Concurrency: one call at a time per communicator (the node's communicator refuses a
 * second with -EBUSY); calls on different communicators may run at once only as far
 * as the MPI library's thread level allows.
 * Errors: comm.h's, and -LOCKSTEP_EMPI; a failed call may leave part of the result in
 * recv (see the top).
 *
 * Thread safety:
 *   function                               may run at once with
 *   lockstep_mpi_params_default            anything
 *   lockstep_mpi_comm_create, _free        nothing on the same MPI communicator (MPI's
 *                                          collective rules)
 *   lockstep_mpi_comm_rank/_size/_nodes/_node  anything on the same communicator
 *   collectives                            see Concurrency above */

/* As lockstep_comm_allreduce, over every rank of comm. */
int lockstep_mpi_allreduce(lockstep_mpi_comm_t *c, const void *send, void *recv, size_t count,
                           lockstep_dtype_t dtype, lockstep_op_t op);
/* Copy root's buf (bytes; root is a rank of comm) to every rank. */
int lockstep_mpi_broadcast(lockstep_mpi_comm_t *c, void *buf, size_t bytes, int root);
/* recv[r * bytes .. (r+1) * bytes) = rank r's send (ranks of comm); send may be
 * recv + rank * bytes. */
int lockstep_mpi_allgather(lockstep_mpi_comm_t *c, const void *send, void *recv, size_t bytes);
int lockstep_mpi_barrier(lockstep_mpi_comm_t *c);
/* As lockstep_comm_reduce_scatter, over every rank of comm: send holds size blocks of
 * count elements, block d for rank d; recv = block rank reduced over every rank. recv
 * may be send + rank * count elements. Keeps a scratch of size * count elements (grown
 * to the largest call, freed with the communicator); -ENOMEM on a rank that cannot
 * grow it (its node then fails with -LOCKSTEP_EMISMATCH). */
int lockstep_mpi_reduce_scatter(lockstep_mpi_comm_t *c, const void *send, void *recv, size_t count,
                                lockstep_dtype_t dtype, lockstep_op_t op);
/* As lockstep_comm_alltoall, over every rank of comm (ranks of comm, blocks of bytes;
 * send and recv must not overlap). Keeps a scratch, as reduce-scatter does, of 2 *
 * size * bytes (MPI moves the blocks between copies of them there), and 2 * node size
 * * bytes more when a node's ranks are not consecutive in comm. */
int lockstep_mpi_alltoall(lockstep_mpi_comm_t *c, const void *send, void *recv, size_t bytes);

#ifdef __cplusplus
}
#endif

#endif
