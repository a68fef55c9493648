/* What the files of lockstep_mpi share: the communicator, the calls' tags, and the
 * protocol between the node and its leader (protocol.c). create.c makes and frees a
 * communicator; calls.c has the collectives. */
#ifndef LOCKSTEP_MPI_IMPL_H
#define LOCKSTEP_MPI_IMPL_H

#include "lockstep/comm_mpi.h"
#include "../comm/args.h"

struct lockstep_mpi_comm {
    MPI_Comm all, node_mpi, leaders; /* leaders: MPI_COMM_NULL except on leaders */
    lockstep_comm_t *node;
    int rank, size, local, local_size, nodes, node_index;
    int *node_of, *local_of;        /* per rank of all */
    int *node_first, *node_ranks;   /* per node: its first slot in node order, its size */
    int *counts, *displs;           /* per node, bytes, for the leaders' allgather in one call */
    int *a2a_counts, *a2a_displs;   /* per rank, for the all-to-all between nodes: one block
                                       to each rank of another node, none inside mine */
    char *scratch;                  /* reduce-scatter's whole vector, all-to-all's copies
                                       of send and recv (and of the node's blocks when
                                       out of rank order); grown to the most */
    size_t scratch_bytes;           /* a call has needed */
    int64_t *agree;                 /* leaders_agree's fields and result (AGREE_WORDS) */
    int ordered;                    /* node blocks lie in rank order (rank r at slot r) */
    unsigned char *cycle_head;      /* per slot, when not ordered: 1 at the lowest slot of
                                       each cycle of the permutation to rank order
                                       (where reorder starts it), 2 elsewhere */
    uint64_t timeout_ns;
    size_t piece;                   /* params.piece_bytes, INT_MAX for 0 */
    int check_calls;                /* params.check_calls */
    int (*cancel)(void *arg);
    void *cancel_arg;
    int broken;                     /* the first error (negative), 0 while healthy */
};

/* Every call of a collective on the node's communicator is tagged (lockstep_comm_tag)
 * with the collective and its step, so that a rank at another step, or in another
 * collective, meets a mismatch there instead of being paired with a call that only
 * looks alike: a rank that thinks a broadcast's 4 bytes come from its leader would
 * otherwise take the leader's outcome (STEP_OUTCOME, 4 bytes from the leader too) for
 * them, and an allreduce of count * size would pair with a reduce-scatter's first
 * step. */
enum { CALL_ALLREDUCE = 1, CALL_BROADCAST, CALL_ALLGATHER, CALL_BARRIER, CALL_REDUCE_SCATTER, CALL_ALLTOALL };
enum {
    STEP_FIRST,   /* the node's part of the collective, before the leaders' */
    STEP_CHECK,   /* node_agree */
    STEP_OUTCOME, /* share_outcome */
    STEP_RESULT,  /* the leader's result to the node */
    STEP_WORST,   /* the all-to-all's worst outcome */
    STEPS = 8
};

int ls_mpi_wait(lockstep_mpi_comm_t *c, MPI_Request *req, int mpi_rc);
int ls_mpi_fail(lockstep_mpi_comm_t *c, int rc);
lockstep_comm_t *ls_mpi_node_step(lockstep_mpi_comm_t *c, int call, int step);
int ls_mpi_share_outcome(lockstep_mpi_comm_t *c, int call, int rc);
int ls_mpi_node_agree(lockstep_mpi_comm_t *c, int call, int root, uint64_t count);
int ls_mpi_leaders_agree(lockstep_mpi_comm_t *c, int call, int op, int dtype, int root, size_t count);
int ls_mpi_refused(lockstep_mpi_comm_t *c);
int ls_mpi_ends_in_node(lockstep_mpi_comm_t *c, int *rc);
int ls_mpi_slot_of(const lockstep_mpi_comm_t *c, int r);
void ls_mpi_reorder(const lockstep_mpi_comm_t *c, char *out, size_t bytes, int to_rank);
int ls_mpi_scratch(lockstep_mpi_comm_t *c, size_t bytes);

enum { AGREE_FIELDS = 7, AGREE_WORDS = 4 * AGREE_FIELDS, AGREE_VOID = 5, AGREE_FAILED = 6 };
/* the leaders' types and ops per lockstep_dtype_t and lockstep_op_t, once
 * ls_mpi_ops_ready has made them (1; 0 if MPI could not) */
extern MPI_Datatype ls_mpi_type[4];
extern MPI_Op ls_mpi_op[3];
int ls_mpi_ops_ready(void);

#endif
