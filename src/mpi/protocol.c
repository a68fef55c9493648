/* The protocol between a node and the leaders: lockstep's kernels as MPI ops, waiting on
 * the leaders' requests, agreeing on a call across nodes, and sharing its outcome. */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mpi_impl.h"
#include "../wait/kernel.h"

/* ---- the leaders' reduction: lockstep's kernels as non-commutative MPI ops -------- */

MPI_Datatype ls_mpi_type[4]; /* per lockstep_dtype_t: its own committed type */
MPI_Op ls_mpi_op[3];        /* per lockstep_op_t */
static int g_ready;           /* 1 once made, -1 if making them failed */
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static lockstep_dtype_t dtype_of(MPI_Datatype t)
{
    for (int d = 0; d < 4; d++)
        if (t == ls_mpi_type[d])
            return (lockstep_dtype_t)d;
    return (lockstep_dtype_t)-1;
}

/* MPI's contract: inout = in op inout, in holding the lower ranks' part. */
static void combine(lockstep_op_t op, void *in, void *inout, int *len, MPI_Datatype *t)
{
    lockstep_reduce(dtype_of(*t), op, inout, in, inout, (size_t)*len);
}
static void op_sum(void *in, void *inout, int *len, MPI_Datatype *t) { combine(LOCKSTEP_OP_SUM, in, inout, len, t); }
static void op_max(void *in, void *inout, int *len, MPI_Datatype *t) { combine(LOCKSTEP_OP_MAX, in, inout, len, t); }
static void op_min(void *in, void *inout, int *len, MPI_Datatype *t) { combine(LOCKSTEP_OP_MIN, in, inout, len, t); }

static void make_ops(void)
{
    MPI_User_function *fn[3] = {op_sum, op_max, op_min};
    int ok = 1;
    for (int d = 0; d < 4 && ok; d++) {
        int es = (int)lockstep_dtype_size((lockstep_dtype_t)d);
        ok = MPI_Type_contiguous(es, MPI_BYTE, &ls_mpi_type[d]) == MPI_SUCCESS &&
             MPI_Type_commit(&ls_mpi_type[d]) == MPI_SUCCESS;
    }
    /* non-commutative: MPI then combines in rank order, the order the nodes use */
    for (int o = 0; o < 3 && ok; o++)
        ok = MPI_Op_create(fn[o], 0, &ls_mpi_op[o]) == MPI_SUCCESS;
    g_ready = ok ? 1 : -1;
}

/* ---- waiting on the leaders' requests --------------------------------------------- */

/* Poll req to completion, yielding the CPU between polls after a short spin, with the
 * node's deadline and cancel check every 256 polls. */
int ls_mpi_wait(lockstep_mpi_comm_t *c, MPI_Request *req, int mpi_rc)
{
    if (mpi_rc != MPI_SUCCESS)
        return -LOCKSTEP_EMPI;
    uint64_t deadline = c->timeout_ns ? lockstep_now_ns() + c->timeout_ns : 0;
    for (unsigned i = 0;; i++) {
        int done = 0;
        if (MPI_Test(req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS)
            return -LOCKSTEP_EMPI;
        if (done)
            return 0;
        if (i > 64)
            ls_yield();
        if ((i & 255) == 255) {
            if (c->cancel && c->cancel(c->cancel_arg))
                return -ECANCELED; /* the request is abandoned: the communicator is broken */
            if (deadline && lockstep_now_ns() >= deadline)
                return -ETIMEDOUT;
        }
    }
}

/* Record a failure; every later call returns it. Not -EINVAL: bad arguments are
 * refused before anything is announced, and leave the communicator working. Nor,
 * with one node, -LOCKSTEP_EPEERINVAL: the node's call was void on every rank. (With
 * more, the other nodes' leaders were not told, and the call's MPI step is lost.) */
int ls_mpi_fail(lockstep_mpi_comm_t *c, int rc)
{
    if (rc && rc != -EINVAL && !(rc == -LOCKSTEP_EPEERINVAL && c->nodes == 1) && !c->broken)
        c->broken = rc;
    return rc;
}


/* The node's communicator, its next call tagged as step of call. (The tag cannot
 * fail where a call could not: one thread at a time, as for every call here.) */
lockstep_comm_t *ls_mpi_node_step(lockstep_mpi_comm_t *c, int call, int step)
{
    (void)lockstep_comm_tag(c->node, (unsigned)(call * STEPS + step));
    return c->node;
}

/* The leader's outcome of its MPI step, to the whole node; the node's common result. */
int ls_mpi_share_outcome(lockstep_mpi_comm_t *c, int call, int rc)
{
    int32_t v = rc;
    int brc = lockstep_comm_broadcast(ls_mpi_node_step(c, call, STEP_OUTCOME), &v, sizeof v, 0, LOCKSTEP_ORDER_LINEAR,
                                      LOCKSTEP_XFER_PULL);
    return ls_mpi_fail(c, brc ? brc : v);
}

/* params.check_calls, where the node's own step would come only after the leaders'
 * (a broadcast on a node without its root) or not at all before MPI moves data (an
 * all-to-all): the node's ranks compare the call's root and count first, so that a
 * rank whose call differs, or that refused, fails its node before the leaders' step,
 * and its leader's turn there (node_turn) fails the other nodes at once. One small
 * node allreduce, MAX of each value and of its complement (~x orders the other way,
 * and never overflows), gives every rank the largest and smallest of each. */
int ls_mpi_node_agree(lockstep_mpi_comm_t *c, int call, int root, uint64_t count)
{
    enum { F = 3 };
    int32_t field[F] = {root, (int32_t)(uint32_t)count, (int32_t)(uint32_t)(count >> 32)}, v[2 * F], got[2 * F];
    for (int k = 0; k < F; k++) {
        v[2 * k] = field[k];
        v[2 * k + 1] = ~field[k];
    }
    int rc = lockstep_comm_allreduce(ls_mpi_node_step(c, call, STEP_CHECK), v, got, 2 * F, LOCKSTEP_DTYPE_I32, LOCKSTEP_OP_MAX);
    for (int k = 0; k < F && !rc; k++)
        if (got[2 * k] != ~got[2 * k + 1])
            rc = -LOCKSTEP_EMISMATCH;
    return rc;
}

/* params.check_calls: the leaders compare their calls. fields: which call, op, dtype,
 * root, count; 1 from a leader whose node's call was void (invalid arguments on one of
 * its ranks), else 0; and the error (positive) with which its node's call failed, else
 * 0. Returns the negated largest such error when some node's call failed (so every
 * leader returns the same); else 0 when every leader names the same call, none void;
 * -LOCKSTEP_EMISMATCH when they differ; -LOCKSTEP_EPEERINVAL when some node's call was
 * void and some not; 1 when every node's was void; or an error of mpi_wait. One
 * MPI_MAX allreduce of each field and of its negation gives every field's largest and
 * smallest value at once. */

static int agree(lockstep_mpi_comm_t *c, const int64_t fields[AGREE_FIELDS])
{
    enum { F = AGREE_FIELDS };
    /* in c->agree, not on the stack: see lockstep_mpi_allreduce */
    int64_t *v = c->agree, *got = c->agree + 2 * F;
    for (int k = 0; k < F; k++) {
        v[k] = fields[k];
        v[F + k] = -fields[k];
    }
    MPI_Request req;
    int rc = ls_mpi_wait(c, &req, MPI_Iallreduce(v, got, 2 * F, MPI_INT64_T, MPI_MAX, c->leaders, &req));
    if (rc)
        return rc;
    if (got[AGREE_FAILED])
        return (int)-got[AGREE_FAILED];
    if (got[AGREE_VOID]) /* the largest: some node's call was void; the smallest: all were */
        return -got[F + AGREE_VOID] ? 1 : -LOCKSTEP_EPEERINVAL;
    for (int k = 0; k < F; k++)
        if (got[k] != -got[F + k])
            return -LOCKSTEP_EMISMATCH;
    return 0;
}

int ls_mpi_leaders_agree(lockstep_mpi_comm_t *c, int call, int op, int dtype, int root, size_t count)
{
    if (!c->check_calls)
        return 0;
    int64_t fields[AGREE_FIELDS] = {call, op, dtype, root, (int64_t)count, 0, 0};
    return agree(c, fields);
}

/* params.check_calls, on the leader of a node whose call ended in the node with rc:
 * its turn in the leaders' agreement all the same, so that the other nodes end theirs
 * at once instead of at their deadline.
 *   - A void call (invalid arguments on one of the node's ranks: rc -EINVAL or
 *     -LOCKSTEP_EPEERINVAL) gives them -LOCKSTEP_EPEERINVAL. When every node's call
 *     was void the communicator goes on; else it is broken here too.
 *   - Any other failure gives them rc: a mismatch among the node's ranks, a peer's
 *     death, a cancel. The leader's own -ENOMEM goes as the -LOCKSTEP_EMISMATCH its
 *     node's other ranks got. (The caller breaks the communicator.)
 *   - Not after -ETIMEDOUT (the deadline has passed) or -LOCKSTEP_EFORKED. */
static void node_turn(lockstep_mpi_comm_t *c, int rc)
{
    if (!c->check_calls || c->local != 0 || c->nodes == 1 || rc == -ETIMEDOUT || rc == -LOCKSTEP_EFORKED)
        return;
    int refused = rc == -EINVAL || rc == -LOCKSTEP_EPEERINVAL;
    int64_t fields[AGREE_FIELDS] = {0, 0, 0, 0, 0, refused, refused ? 0 : rc == -ENOMEM ? LOCKSTEP_EMISMATCH : -rc};
    int arc = agree(c, fields);
    if (refused && arc != 1 && !c->broken)
        c->broken = arc;
}

/* A call whose arguments are invalid on this rank (found here, before the node's
 * call): -EINVAL, and its turn in the node's call taken anyway, refused, so that the
 * ranks of this node end theirs at once (comm.h: "Invalid arguments"). With more
 * nodes, theirs then wait out their deadline, as for any call a node fails, unless
 * params.check_calls lets the leaders tell them (node_turn). */
int ls_mpi_refused(lockstep_mpi_comm_t *c)
{
    if (!c->broken) {
        (void)lockstep_comm_refuse(c->node);
        node_turn(c, -EINVAL);
    }
    return -EINVAL;
}

/* After the node's part of a call: 1 when the call ends there (it failed, or there is
 * only one node), with *rc its result; 0 when the leaders' MPI step follows. A call
 * the node's ranks refused (-EINVAL on the rank with invalid arguments, found by the
 * node's call, -LOCKSTEP_EPEERINVAL on the others) was void on the whole node. */
int ls_mpi_ends_in_node(lockstep_mpi_comm_t *c, int *rc)
{
    if (*rc) {
        node_turn(c, *rc);
        *rc = ls_mpi_fail(c, *rc);
        return 1;
    }
    return c->nodes == 1;
}

/* Where rank r's block lies in the leaders' allgather result, which is in node order:
 * its node's first slot plus its place in the node. */
int ls_mpi_slot_of(const lockstep_mpi_comm_t *c, int r)
{
    return c->node_first[c->node_of[r]] + c->local_of[r];
}

/* Blocks of bytes between node order (each node's ranks together, nodes in order) and
 * rank order, in place, along each cycle of the permutation, a piece of a block at a
 * time in buffers on the stack. to_rank: slot j takes the block from ls_mpi_slot_of(j) (the
 * leaders' allgather result); else the block at j goes to ls_mpi_slot_of(j) (a vector whose
 * blocks are in rank order, for the leaders' reduce-scatter). */
void ls_mpi_reorder(const lockstep_mpi_comm_t *c, char *out, size_t bytes, int to_rank)
{
    unsigned char tmp[2][4096];
    for (int h = 0; h < c->size; h++) {
        if (c->cycle_head[h] != 1 || ls_mpi_slot_of(c, h) == h)
            continue;
        for (size_t o = 0; o < bytes; o += sizeof tmp[0]) {
            size_t n = bytes - o < sizeof tmp[0] ? bytes - o : sizeof tmp[0];
            memcpy(tmp[0], out + (size_t)h * bytes + o, n);
            if (to_rank) {
                int j = h;
                for (int k = ls_mpi_slot_of(c, j); k != h; j = k, k = ls_mpi_slot_of(c, j))
                    memcpy(out + (size_t)j * bytes + o, out + (size_t)k * bytes + o, n);
                memcpy(out + (size_t)j * bytes + o, tmp[0], n);
                continue;
            }
            int carry = 0; /* tmp[carry] holds the block on its way to ls_mpi_slot_of(j) */
            for (int j = ls_mpi_slot_of(c, h);; j = ls_mpi_slot_of(c, j)) {
                memcpy(tmp[!carry], out + (size_t)j * bytes + o, n);
                memcpy(out + (size_t)j * bytes + o, tmp[carry], n);
                carry = !carry;
                if (j == h)
                    break;
            }
        }
    }
}

/* At least bytes of c->scratch: 0 or -ENOMEM. */
int ls_mpi_scratch(lockstep_mpi_comm_t *c, size_t bytes)
{
    if (bytes <= c->scratch_bytes)
        return 0;
    char *p = realloc(c->scratch, bytes);
    if (!p)
        return -ENOMEM;
    c->scratch = p;
    c->scratch_bytes = bytes;
    return 0;
}


int ls_mpi_ops_ready(void)
{
    pthread_once(&g_once, make_ops);
    return g_ready > 0;
}
