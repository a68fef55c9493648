/* The collectives past one node: the node's part through lockstep, the leaders' part
 * through MPI, each step tagged (mpi_impl.h). The call structure is in
 * lockstep/comm_mpi.h. */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mpi_impl.h"

/* ---- collectives -------------------------------------------------------------------- */

/* The end of a call: the leader's result (bytes in its scratch) to buf on every rank
 * of the node. */
static int from_leader(lockstep_mpi_comm_t *c, int call, void *buf, size_t bytes)
{
    int rc = lockstep_comm_broadcast(ls_mpi_node_step(c, call, STEP_RESULT), c->local == 0 ? c->scratch : buf, bytes, 0,
                                     LOCKSTEP_ORDER_LINEAR, LOCKSTEP_XFER_PULL);
    if (!rc && c->local == 0 && bytes)
        memcpy(buf, c->scratch, bytes);
    return ls_mpi_fail(c, rc);
}

int lockstep_mpi_allreduce(lockstep_mpi_comm_t *c, const void *send, void *recv, size_t count,
                           lockstep_dtype_t dtype, lockstep_op_t op)
{
    if (!c)
        return -EINVAL;
    if (c->broken)
        return c->broken;
    /* MPI works on a copy in the scratch, never on the caller's buffers, here and in
     * every call: MPI cannot cancel a collective, so a request abandoned at the
     * deadline may still read or write its buffers until MPI_Finalize (the scratch of
     * a broken communicator is never freed). A leader's node allreduce goes straight
     * into the scratch; one without the memory names no count in it, so that its node
     * fails at once. */
    size_t es = lockstep_dtype_size(dtype), bytes = es && count <= SIZE_MAX / es ? count * es : 0;
    if ((count && (!send || !recv)) || (send != recv && ls_overlap(send, recv, bytes)))
        return ls_mpi_refused(c); /* (the leader's node call does not see recv) */
    int lead = c->local == 0 && c->nodes > 1, nomem = lead ? ls_mpi_scratch(c, bytes) : 0;
    int rc = lockstep_comm_allreduce(ls_mpi_node_step(c, CALL_ALLREDUCE, STEP_FIRST), send,
                                     nomem ? NULL : lead ? c->scratch : recv, nomem ? 0 : count, dtype, op);
    if (nomem)
        rc = nomem;
    if (ls_mpi_ends_in_node(c, &rc))
        return rc;
    if (c->local == 0 && (rc = ls_mpi_leaders_agree(c, CALL_ALLREDUCE, op, dtype, 0, count)) == 0) {
        size_t per = c->piece / es ? c->piece / es : 1;
        MPI_Datatype t = ls_mpi_type[dtype];
        for (size_t off = 0; off < count && !rc; off += per) {
            int n = (int)(count - off < per ? count - off : per);
            char *at = c->scratch + off * es;
            MPI_Request req;
            if (c->node_index == 0)
                rc = ls_mpi_wait(c, &req, MPI_Ireduce(MPI_IN_PLACE, at, n, t, ls_mpi_op[op], 0, c->leaders, &req));
            else
                rc = ls_mpi_wait(c, &req, MPI_Ireduce(at, NULL, n, t, ls_mpi_op[op], 0, c->leaders, &req));
            if (!rc)
                rc = ls_mpi_wait(c, &req, MPI_Ibcast(at, n, t, 0, c->leaders, &req));
        }
    }
    if ((rc = ls_mpi_share_outcome(c, CALL_ALLREDUCE, rc)) != 0)
        return rc;
    return from_leader(c, CALL_ALLREDUCE, recv, bytes);
}

int lockstep_mpi_broadcast(lockstep_mpi_comm_t *c, void *buf, size_t bytes, int root)
{
    if (!c)
        return -EINVAL;
    if (root < 0 || (bytes && !buf) || root >= c->size)
        return ls_mpi_refused(c);
    if (c->broken)
        return c->broken;
    int rn = c->node_of[root], rc = 0;
    if (c->node_index == rn)
        rc = lockstep_comm_broadcast(ls_mpi_node_step(c, CALL_BROADCAST, STEP_FIRST), buf, bytes, c->local_of[root],
                                     LOCKSTEP_ORDER_LINEAR, LOCKSTEP_XFER_PULL);
    else if (c->check_calls)
        rc = ls_mpi_node_agree(c, CALL_BROADCAST, root, bytes);
    if (ls_mpi_ends_in_node(c, &rc))
        return rc;
    if (c->local == 0 && (rc = ls_mpi_leaders_agree(c, CALL_BROADCAST, 0, 0, root, bytes)) == 0 &&
        (rc = ls_mpi_scratch(c, bytes)) == 0 && c->node_index == rn && bytes)
        memcpy(c->scratch, buf, bytes); /* (MPI gets the scratch: see lockstep_mpi_allreduce) */
    for (size_t off = 0; c->local == 0 && off < bytes && !rc; off += c->piece) {
        MPI_Request req;
        int n = (int)(bytes - off < c->piece ? bytes - off : c->piece);
        rc = ls_mpi_wait(c, &req, MPI_Ibcast(c->scratch + off, n, MPI_BYTE, rn, c->leaders, &req));
    }
    if ((rc = ls_mpi_share_outcome(c, CALL_BROADCAST, rc)) != 0 || c->node_index == rn)
        return rc;
    return from_leader(c, CALL_BROADCAST, buf, bytes);
}

/* One piece of a block (from off, at most c->piece bytes) with the extent of the whole
 * block, for calls that move piece k of every block at once: 0 or -LOCKSTEP_EMPI. */
static int piece_type(const lockstep_mpi_comm_t *c, size_t bytes, size_t off, MPI_Datatype *piece)
{
    MPI_Datatype one;
    if (MPI_Type_contiguous((int)(bytes - off < c->piece ? bytes - off : c->piece), MPI_BYTE, &one) != MPI_SUCCESS)
        return -LOCKSTEP_EMPI;
    int ok = MPI_Type_create_resized(one, 0, (MPI_Aint)bytes, piece) == MPI_SUCCESS;
    MPI_Type_free(&one);
    if (ok && MPI_Type_commit(piece) != MPI_SUCCESS) {
        MPI_Type_free(piece);
        ok = 0;
    }
    return ok ? 0 : -LOCKSTEP_EMPI;
}

/* The leaders' allgather of the node blocks into out, in node order, each leader's
 * already in its place. In one MPI call (counts in bytes) when the whole result fits
 * a piece; else in rounds, round k moving piece k of every rank's block, described by
 * a type of one piece whose extent is a whole block (counts and places in blocks). */
static int leaders_allgather(lockstep_mpi_comm_t *c, char *out, size_t bytes)
{
    MPI_Request req;
    if (bytes * (size_t)c->size <= c->piece) {
        for (int n = 0; n < c->nodes; n++) {
            c->counts[n] = (int)((size_t)c->node_ranks[n] * bytes);
            c->displs[n] = (int)((size_t)c->node_first[n] * bytes);
        }
        return ls_mpi_wait(c, &req, MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, out, c->counts, c->displs,
                                                 MPI_BYTE, c->leaders, &req));
    }
    for (size_t off = 0; off < bytes; off += c->piece) {
        MPI_Datatype piece;
        int rc = piece_type(c, bytes, off, &piece);
        if (rc)
            return rc;
        rc = ls_mpi_wait(c, &req, MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, out + off, c->node_ranks,
                                               c->node_first, piece, c->leaders, &req));
        MPI_Type_free(&piece); /* (a pending call keeps its own reference) */
        if (rc)
            return rc;
    }
    return 0;
}

int lockstep_mpi_allgather(lockstep_mpi_comm_t *c, const void *send, void *recv, size_t bytes)
{
    if (!c)
        return -EINVAL;
    if ((bytes && (!send || !recv)) || bytes > SIZE_MAX / (size_t)c->size)
        return ls_mpi_refused(c);
    if (c->broken)
        return c->broken;
    char *out = recv;
    size_t total = bytes * (size_t)c->size;
    /* My node's block goes to recv from slot rank - local on, so that my own block is
     * at recv + rank * bytes (where send may already be), and the node's block fits in
     * recv: it holds local ranks below mine and node_ranks - local - 1 above. When
     * nodes lie in rank order that is also the block's place in the result. */
    char *block = bytes ? out + (size_t)(c->rank - c->local) * bytes : out;
    int rc = lockstep_comm_allgather(ls_mpi_node_step(c, CALL_ALLGATHER, STEP_FIRST), send, block, bytes,
                                     LOCKSTEP_ORDER_LINEAR, LOCKSTEP_XFER_PULL);
    if (ls_mpi_ends_in_node(c, &rc)) /* (one node is always in rank order) */
        return rc;
    /* the leaders' allgather in the scratch (see lockstep_mpi_allreduce), my node's
     * block copied to its place in node order */
    if (c->local == 0 && (rc = ls_mpi_leaders_agree(c, CALL_ALLGATHER, 0, 0, 0, bytes)) == 0 &&
        (rc = ls_mpi_scratch(c, total)) == 0 && bytes) {
        memcpy(c->scratch + (size_t)c->node_first[c->node_index] * bytes, block,
               (size_t)c->node_ranks[c->node_index] * bytes);
        if ((rc = leaders_allgather(c, c->scratch, bytes)) == 0 && !c->ordered)
            ls_mpi_reorder(c, c->scratch, bytes, 1);
    }
    if ((rc = ls_mpi_share_outcome(c, CALL_ALLGATHER, rc)) != 0)
        return rc;
    return from_leader(c, CALL_ALLGATHER, out, total);
}

int lockstep_mpi_barrier(lockstep_mpi_comm_t *c)
{
    if (!c)
        return -EINVAL;
    if (c->broken)
        return c->broken;
    int rc = lockstep_comm_barrier(ls_mpi_node_step(c, CALL_BARRIER, STEP_FIRST));
    if (ls_mpi_ends_in_node(c, &rc))
        return rc;
    if (c->local == 0 && c->check_calls) {
        rc = ls_mpi_leaders_agree(c, CALL_BARRIER, 0, 0, 0, 0); /* (an allreduce is a barrier too) */
    } else if (c->local == 0) {
        MPI_Request req;
        rc = ls_mpi_wait(c, &req, MPI_Ibarrier(c->leaders, &req));
    }
    return ls_mpi_share_outcome(c, CALL_BARRIER, rc);
}

/* The leaders' reduce-scatter of the node results in v (count elements per rank, the
 * blocks in node order): node n's blocks, reduced over the nodes in node order, end at
 * *out on its leader. In one call when v fits a piece (MPI_Reduce_scatter leaves the
 * result at the start of v); else one reduction to each leader in turn, a piece at a
 * time, each leaving its node's blocks in place. */
static int leaders_reduce_scatter(lockstep_mpi_comm_t *c, char *v, size_t count, lockstep_dtype_t dtype,
                                  lockstep_op_t op, char **out)
{
    size_t es = lockstep_dtype_size(dtype), per = c->piece / es ? c->piece / es : 1;
    MPI_Datatype t = ls_mpi_type[dtype];
    MPI_Request req;
    if (count * (size_t)c->size <= per) {
        for (int n = 0; n < c->nodes; n++)
            c->counts[n] = (int)((size_t)c->node_ranks[n] * count);
        *out = v;
        return ls_mpi_wait(c, &req, MPI_Ireduce_scatter(MPI_IN_PLACE, v, c->counts, t, ls_mpi_op[op], c->leaders, &req));
    }
    *out = v + (size_t)c->node_first[c->node_index] * count * es;
    for (int n = 0; n < c->nodes; n++) {
        char *at = v + (size_t)c->node_first[n] * count * es;
        size_t len = (size_t)c->node_ranks[n] * count;
        for (size_t off = 0; off < len; off += per) {
            int k = (int)(len - off < per ? len - off : per);
            int rc = n == c->node_index
                         ? ls_mpi_wait(c, &req, MPI_Ireduce(MPI_IN_PLACE, at + off * es, k, t, ls_mpi_op[op], n, c->leaders, &req))
                         : ls_mpi_wait(c, &req, MPI_Ireduce(at + off * es, NULL, k, t, ls_mpi_op[op], n, c->leaders, &req));
            if (rc)
                return rc;
        }
    }
    return 0;
}

int lockstep_mpi_reduce_scatter(lockstep_mpi_comm_t *c, const void *send, void *recv, size_t count,
                                lockstep_dtype_t dtype, lockstep_op_t op)
{
    if (!c)
        return -EINVAL;
    int rc = ls_reduce_scatter_args(send, recv, count, dtype, op, c->rank, c->size);
    if (rc)
        return ls_mpi_refused(c);
    size_t block = count * lockstep_dtype_size(dtype), total = block * (size_t)c->size;
    if (c->broken)
        return c->broken;
    if (c->nodes == 1)
        return ls_mpi_fail(c, lockstep_comm_reduce_scatter(ls_mpi_node_step(c, CALL_REDUCE_SCATTER, STEP_FIRST), send, recv, count,
                                                    dtype, op));
    /* My node's sum of the whole vector, then the leaders reduce each node's blocks to
     * its leader, which broadcasts them to its node. A rank without the memory for the
     * vector names no count in the node's allreduce, so that its node fails at once
     * (-LOCKSTEP_EMISMATCH there) instead of at the deadline. */
    int nomem = ls_mpi_scratch(c, total);
    rc = lockstep_comm_allreduce(ls_mpi_node_step(c, CALL_REDUCE_SCATTER, STEP_FIRST), send, nomem ? NULL : c->scratch,
                                 nomem ? 0 : count * (size_t)c->size, dtype, op);
    if (nomem)
        rc = nomem;
    if (ls_mpi_ends_in_node(c, &rc))
        return rc;
    char *mine = c->scratch; /* where my node's blocks are, on every rank after the broadcast */
    if (c->local == 0 && (rc = ls_mpi_leaders_agree(c, CALL_REDUCE_SCATTER, op, dtype, 0, count)) == 0) {
        if (!c->ordered && block)
            ls_mpi_reorder(c, c->scratch, block, 0);
        rc = leaders_reduce_scatter(c, c->scratch, count, dtype, op, &mine);
    }
    if ((rc = ls_mpi_share_outcome(c, CALL_REDUCE_SCATTER, rc)) != 0)
        return rc;
    rc = lockstep_comm_broadcast(ls_mpi_node_step(c, CALL_REDUCE_SCATTER, STEP_RESULT), mine,
                                 block * (size_t)c->node_ranks[c->node_index], 0, LOCKSTEP_ORDER_LINEAR, LOCKSTEP_XFER_PULL);
    if (!rc && block)
        memcpy(recv, mine + (size_t)c->local * block, block);
    return ls_mpi_fail(c, rc);
}

/* The blocks between nodes: one MPI all-to-all over every rank, a block to and from
 * each rank of the other nodes (none inside mine). Blocks past a piece go in rounds,
 * round k moving piece k of each, described by a type of one piece whose extent is a
 * whole block. Posted here, waited for by the caller. */
static int post_alltoall(lockstep_mpi_comm_t *c, const char *send, char *recv, size_t bytes, size_t off,
                         MPI_Request *req)
{
    MPI_Datatype piece;
    if (piece_type(c, bytes, off, &piece))
        return -LOCKSTEP_EMPI;
    int rc = MPI_Ialltoallv(send + off, c->a2a_counts, c->a2a_displs, piece, recv + off, c->a2a_counts,
                            c->a2a_displs, piece, c->all, req);
    MPI_Type_free(&piece); /* (a pending call keeps its own reference) */
    return rc == MPI_SUCCESS ? 0 : -LOCKSTEP_EMPI;
}

/* My node's blocks (its ranks' blocks of send, in node order) through the node's
 * all-to-all into recv, straight when the node's ranks are consecutive, else through
 * tmp (2 * node size * bytes). */
static int node_alltoall(lockstep_mpi_comm_t *c, const char *send, char *recv, size_t bytes, char *tmp)
{
    int L = c->local_size, first = c->rank - c->local;
    lockstep_comm_t *node = ls_mpi_node_step(c, CALL_ALLTOALL, STEP_FIRST);
    if (!bytes)
        return lockstep_comm_alltoall(node, send, recv, 0);
    if (c->ordered)
        return lockstep_comm_alltoall(node, send + (size_t)first * bytes, recv + (size_t)first * bytes, bytes);
    char *in = tmp, *out = tmp + (size_t)L * bytes;
    for (int k = 0; k < c->size; k++)
        if (c->node_of[k] == c->node_index)
            memcpy(in + (size_t)c->local_of[k] * bytes, send + (size_t)k * bytes, bytes);
    int rc = lockstep_comm_alltoall(node, in, out, bytes);
    for (int k = 0; k < c->size && !rc; k++)
        if (c->node_of[k] == c->node_index)
            memcpy(recv + (size_t)k * bytes, out + (size_t)c->local_of[k] * bytes, bytes);
    return rc;
}

/* Copy the blocks of the ranks of other nodes from one image of size blocks to another. */
static void copy_remote(const lockstep_mpi_comm_t *c, char *to, const char *from, size_t bytes)
{
    for (int k = 0; k < c->size; k++)
        if (c->a2a_counts[k])
            memcpy(to + (size_t)k * bytes, from + (size_t)k * bytes, bytes);
}

int lockstep_mpi_alltoall(lockstep_mpi_comm_t *c, const void *send, void *recv, size_t bytes)
{
    if (!c)
        return -EINVAL;
    if ((bytes && (!send || !recv)) || bytes > SIZE_MAX / (size_t)c->size ||
        ls_overlap(send, recv, bytes * (size_t)c->size))
        return ls_mpi_refused(c);
    if (c->broken)
        return c->broken;
    if (c->nodes == 1)
        return ls_mpi_fail(c, lockstep_comm_alltoall(ls_mpi_node_step(c, CALL_ALLTOALL, STEP_FIRST), send, recv, bytes));
    int rc = 0;
    if (c->check_calls) { /* the node's ranks, then the leaders, before any rank posts its MPI call */
        rc = ls_mpi_node_agree(c, CALL_ALLTOALL, 0, bytes);
        if (ls_mpi_ends_in_node(c, &rc))
            return rc;
        if (c->local == 0)
            rc = ls_mpi_leaders_agree(c, CALL_ALLTOALL, 0, 0, 0, bytes);
        if ((rc = ls_mpi_share_outcome(c, CALL_ALLTOALL, rc)) != 0)
            return rc;
    }
    /* MPI moves the blocks between images in the scratch, not the caller's buffers: a
     * request abandoned after a failure may still read or write them (the scratch of
     * a broken communicator is never freed). A rank without the memory names no size
     * in the node's all-to-all, so that its node fails at once. */
    size_t img = (size_t)c->size * bytes;
    int nomem = ls_mpi_scratch(c, 2 * img + (c->ordered ? 0 : 2 * (size_t)c->local_size * bytes));
    if (nomem) {
        lockstep_comm_alltoall(ls_mpi_node_step(c, CALL_ALLTOALL, STEP_FIRST), NULL, NULL, 0);
        return ls_mpi_fail(c, nomem);
    }
    char *out = bytes ? c->scratch : NULL, *in = bytes ? c->scratch + img : NULL;
    if (bytes)
        copy_remote(c, out, send, bytes);
    /* The MPI all-to-all's first round is posted, my node's blocks move, then every
     * round is finished in turn. If the node's part fails, the request is abandoned
     * (the communicator is broken). Every rank of the node then agrees on the worst
     * outcome, so that all fail alike. */
    MPI_Request req;
    int mrc = bytes ? post_alltoall(c, out, in, bytes, 0, &req) : 0;
    int nrc = node_alltoall(c, send, recv, bytes, bytes ? c->scratch + 2 * img : NULL);
    if (bytes && !mrc && !nrc)
        mrc = ls_mpi_wait(c, &req, MPI_SUCCESS);
    for (size_t off = c->piece; off < bytes && !mrc && !nrc; off += c->piece)
        if ((mrc = post_alltoall(c, out, in, bytes, off, &req)) == 0)
            mrc = ls_mpi_wait(c, &req, MPI_SUCCESS);
    rc = nrc ? nrc : mrc;
    if (!rc && bytes)
        copy_remote(c, recv, in, bytes);
    int32_t worst = -rc, got = 0;
    int arc = lockstep_comm_allreduce(ls_mpi_node_step(c, CALL_ALLTOALL, STEP_WORST), &worst, &got, 1, LOCKSTEP_DTYPE_I32,
                                      LOCKSTEP_OP_MAX);
    return ls_mpi_fail(c, arc ? arc : -got);
}

