/* Collectives past one node: a lockstep_comm_t per node, MPI between the node leaders.
 * The call structure is in lockstep/comm_mpi.h. */
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

/* ---- the leaders' reduction: lockstep's kernels as non-commutative MPI ops -------- */

static MPI_Datatype g_type[4]; /* per lockstep_dtype_t: its own committed type */
static MPI_Op g_op[3];        /* per lockstep_op_t */
static int g_ready;           /* 1 once made, -1 if making them failed */
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static lockstep_dtype_t dtype_of(MPI_Datatype t)
{
    for (int d = 0; d < 4; d++)
        if (t == g_type[d])
            return (lockstep_dtype_t)d;
    return (lockstep_dtype_t)-1;
}

/* MPI's contract: inout = in op inout, in holding the lower ranks' part. */
static void combine(lockstep_op_t op, void *in, void *inout, int *len, MPI_Datatype *t)
{
    lockstep_reduce(dtype_of(*t), op, inout, in, inout, (size_t)*len);
}
static void op_sum(void *in, void *inout, int *len, MPI_Datatype *t) { combine(LOCKSTEP_SUM, in, inout, len, t); }
static void op_max(void *in, void *inout, int *len, MPI_Datatype *t) { combine(LOCKSTEP_MAX, in, inout, len, t); }
static void op_min(void *in, void *inout, int *len, MPI_Datatype *t) { combine(LOCKSTEP_MIN, in, inout, len, t); }

static void make_ops(void)
{
    MPI_User_function *fn[3] = {op_sum, op_max, op_min};
    int ok = 1;
    for (int d = 0; d < 4 && ok; d++) {
        int es = (int)lockstep_dtype_size((lockstep_dtype_t)d);
        ok = MPI_Type_contiguous(es, MPI_BYTE, &g_type[d]) == MPI_SUCCESS &&
             MPI_Type_commit(&g_type[d]) == MPI_SUCCESS;
    }
    /* non-commutative: MPI then combines in rank order, the order the nodes use */
    for (int o = 0; o < 3 && ok; o++)
        ok = MPI_Op_create(fn[o], 0, &g_op[o]) == MPI_SUCCESS;
    g_ready = ok ? 1 : -1;
}

/* ---- waiting on the leaders' requests --------------------------------------------- */

/* Poll req to completion, yielding the CPU between polls after a short spin, with the
 * node's deadline and cancel check every 256 polls. */
static int mpi_wait(lockstep_mpi_comm_t *c, MPI_Request *req, int mpi_rc)
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
            sched_yield();
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
static int fail(lockstep_mpi_comm_t *c, int rc)
{
    if (rc && rc != -EINVAL && !(rc == -LOCKSTEP_EPEERINVAL && c->nodes == 1) && !c->broken)
        c->broken = rc;
    return rc;
}

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

/* The node's communicator, its next call tagged as step of call. (The tag cannot
 * fail where a call could not: one thread at a time, as for every call here.) */
static lockstep_comm_t *node_step(lockstep_mpi_comm_t *c, int call, int step)
{
    (void)lockstep_comm_tag(c->node, (unsigned)(call * STEPS + step));
    return c->node;
}

/* The leader's outcome of its MPI step, to the whole node; the node's common result. */
static int share_outcome(lockstep_mpi_comm_t *c, int call, int rc)
{
    int32_t v = rc;
    int brc = lockstep_comm_broadcast(node_step(c, call, STEP_OUTCOME), &v, sizeof v, 0, LOCKSTEP_ORDER_LINEAR,
                                      LOCKSTEP_PULL);
    return fail(c, brc ? brc : v);
}

/* params.check_calls, where the node's own step would come only after the leaders'
 * (a broadcast on a node without its root) or not at all before MPI moves data (an
 * all-to-all): the node's ranks compare the call's root and count first, so that a
 * rank whose call differs, or that refused, fails its node before the leaders' step,
 * and its leader's turn there (node_turn) fails the other nodes at once. One small
 * node allreduce, MAX of each value and of its complement (~x orders the other way,
 * and never overflows), gives every rank the largest and smallest of each. */
static int node_agree(lockstep_mpi_comm_t *c, int call, int root, uint64_t count)
{
    enum { F = 3 };
    int32_t field[F] = {root, (int32_t)(uint32_t)count, (int32_t)(uint32_t)(count >> 32)}, v[2 * F], got[2 * F];
    for (int k = 0; k < F; k++) {
        v[2 * k] = field[k];
        v[2 * k + 1] = ~field[k];
    }
    int rc = lockstep_comm_allreduce(node_step(c, call, STEP_CHECK), v, got, 2 * F, LOCKSTEP_I32, LOCKSTEP_MAX);
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
enum { AGREE_FIELDS = 7, AGREE_WORDS = 4 * AGREE_FIELDS, AGREE_VOID = 5, AGREE_FAILED = 6 };

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
    int rc = mpi_wait(c, &req, MPI_Iallreduce(v, got, 2 * F, MPI_INT64_T, MPI_MAX, c->leaders, &req));
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

static int leaders_agree(lockstep_mpi_comm_t *c, int call, int op, int dtype, int root, size_t count)
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
static int refused(lockstep_mpi_comm_t *c)
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
static int ends_in_node(lockstep_mpi_comm_t *c, int *rc)
{
    if (*rc) {
        node_turn(c, *rc);
        *rc = fail(c, *rc);
        return 1;
    }
    return c->nodes == 1;
}

/* Where rank r's block lies in the leaders' allgather result, which is in node order:
 * its node's first slot plus its place in the node. */
static int slot_of(const lockstep_mpi_comm_t *c, int r)
{
    return c->node_first[c->node_of[r]] + c->local_of[r];
}

/* Blocks of bytes between node order (each node's ranks together, nodes in order) and
 * rank order, in place, along each cycle of the permutation, a piece of a block at a
 * time in buffers on the stack. to_rank: slot j takes the block from slot_of(j) (the
 * leaders' allgather result); else the block at j goes to slot_of(j) (a vector whose
 * blocks are in rank order, for the leaders' reduce-scatter). */
static void reorder(const lockstep_mpi_comm_t *c, char *out, size_t bytes, int to_rank)
{
    unsigned char tmp[2][4096];
    for (int h = 0; h < c->size; h++) {
        if (c->cycle_head[h] != 1 || slot_of(c, h) == h)
            continue;
        for (size_t o = 0; o < bytes; o += sizeof tmp[0]) {
            size_t n = bytes - o < sizeof tmp[0] ? bytes - o : sizeof tmp[0];
            memcpy(tmp[0], out + (size_t)h * bytes + o, n);
            if (to_rank) {
                int j = h;
                for (int k = slot_of(c, j); k != h; j = k, k = slot_of(c, j))
                    memcpy(out + (size_t)j * bytes + o, out + (size_t)k * bytes + o, n);
                memcpy(out + (size_t)j * bytes + o, tmp[0], n);
                continue;
            }
            int carry = 0; /* tmp[carry] holds the block on its way to slot_of(j) */
            for (int j = slot_of(c, h);; j = slot_of(c, j)) {
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
static int scratch(lockstep_mpi_comm_t *c, size_t bytes)
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

/* ---- create / free ------------------------------------------------------------------ */

lockstep_mpi_params_t lockstep_mpi_params_default(void)
{
    lockstep_mpi_params_t p;
    memset(&p, 0, sizeof p);
    p.node = lockstep_comm_params_default();
    return p;
}

static void free_comm(lockstep_mpi_comm_t *c)
{
    if (c->node)
        lockstep_comm_free(c->node);
    /* After a failure a rank may have an abandoned request (MPI cannot cancel a
     * collective) on the communicators, the buffers it was given (the scratch, agree)
     * and the count and displacement arrays, which MPI may read until the request
     * ends: those are kept, never freed. */
    if (!c->broken) {
        free(c->scratch);
        free(c->agree);
        free(c->node_first);
        free(c->node_ranks);
        free(c->counts);
        free(c->a2a_counts);
        if (c->leaders != MPI_COMM_NULL)
            MPI_Comm_free(&c->leaders);
        if (c->node_mpi != MPI_COMM_NULL)
            MPI_Comm_free(&c->node_mpi);
        if (c->all != MPI_COMM_NULL)
            MPI_Comm_free(&c->all);
    }
    free(c->node_of);
    free(c->local_of);
    free(c->cycle_head);
    free(c);
}

void lockstep_mpi_comm_free(lockstep_mpi_comm_t *c)
{
    if (c)
        free_comm(c);
}

/* The communicators, the layout of nodes, and each node's lockstep communicator.
 * Returns 0 or a negative errno; every MPI call here is collective over comm, so all
 * ranks get this far together. */
static int setup(lockstep_mpi_comm_t *c, MPI_Comm comm, const lockstep_mpi_params_t *p)
{
    if (MPI_Comm_dup(comm, &c->all) != MPI_SUCCESS)
        return -LOCKSTEP_EMPI;
    MPI_Comm_set_errhandler(c->all, MPI_ERRORS_RETURN);
    MPI_Comm_rank(c->all, &c->rank);
    MPI_Comm_size(c->all, &c->size);
    MPI_Comm shared;
    if (MPI_Comm_split_type(c->all, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &shared) != MPI_SUCCESS)
        return -LOCKSTEP_EMPI;
    int srank, ssize;
    MPI_Comm_rank(shared, &srank);
    MPI_Comm_size(shared, &ssize);
    int groups = p->ranks_per_node > 0 ? (ssize + p->ranks_per_node - 1) / p->ranks_per_node : 1;
    /* dealt round-robin, as a by-node mapping places ranks, or in runs of consecutive ranks */
    int color = p->consecutive && p->ranks_per_node > 0 ? srank / p->ranks_per_node : srank % groups;
    int rc = MPI_Comm_split(shared, color, c->rank, &c->node_mpi);
    MPI_Comm_free(&shared);
    if (rc != MPI_SUCCESS)
        return -LOCKSTEP_EMPI;
    MPI_Comm_set_errhandler(c->node_mpi, MPI_ERRORS_RETURN);
    MPI_Comm_rank(c->node_mpi, &c->local);
    MPI_Comm_size(c->node_mpi, &c->local_size);
    if (MPI_Comm_split(c->all, c->local == 0 ? 0 : MPI_UNDEFINED, c->rank, &c->leaders) != MPI_SUCCESS)
        return -LOCKSTEP_EMPI;
    if (c->leaders != MPI_COMM_NULL) {
        MPI_Comm_set_errhandler(c->leaders, MPI_ERRORS_RETURN);
        MPI_Comm_rank(c->leaders, &c->node_index);
    }
    if (MPI_Bcast(&c->node_index, 1, MPI_INT, 0, c->node_mpi) != MPI_SUCCESS)
        return -LOCKSTEP_EMPI;

    /* where every rank is: (node, local) for each, gathered everywhere */
    int mine[2] = {c->node_index, c->local}, *both = malloc(sizeof(int) * 2 * (size_t)c->size);
    c->node_of = malloc(sizeof(int) * (size_t)c->size);
    c->local_of = malloc(sizeof(int) * (size_t)c->size);
    if (!both || !c->node_of || !c->local_of) {
        free(both);
        return -ENOMEM;
    }
    if (MPI_Allgather(mine, 2, MPI_INT, both, 2, MPI_INT, c->all) != MPI_SUCCESS) {
        free(both);
        return -LOCKSTEP_EMPI;
    }
    c->nodes = 0;
    for (int r = 0; r < c->size; r++) {
        c->node_of[r] = both[2 * r];
        c->local_of[r] = both[2 * r + 1];
        if (c->node_of[r] + 1 > c->nodes)
            c->nodes = c->node_of[r] + 1;
    }
    free(both);
    c->node_first = calloc((size_t)c->nodes, sizeof(int));
    c->node_ranks = calloc((size_t)c->nodes, sizeof(int));
    c->counts = calloc(2 * (size_t)c->nodes, sizeof(int));
    c->displs = c->counts ? c->counts + c->nodes : NULL;
    c->a2a_counts = calloc(2 * (size_t)c->size, sizeof(int));
    c->a2a_displs = c->a2a_counts ? c->a2a_counts + c->size : NULL;
    c->agree = calloc(AGREE_WORDS, sizeof(int64_t));
    if (!c->node_first || !c->node_ranks || !c->counts || !c->a2a_counts || !c->agree)
        return -ENOMEM;
    for (int r = 0; r < c->size; r++) {
        c->a2a_counts[r] = c->node_of[r] != c->node_index;
        c->a2a_displs[r] = r;
    }
    for (int r = 0; r < c->size; r++)
        c->node_ranks[c->node_of[r]]++;
    for (int n = 1; n < c->nodes; n++)
        c->node_first[n] = c->node_first[n - 1] + c->node_ranks[n - 1];
    c->ordered = 1;
    for (int r = 0; r < c->size; r++)
        c->ordered &= slot_of(c, r) == r;
    if (!c->ordered) { /* mark the first slot of each cycle (1; the rest of it 2) */
        if (!(c->cycle_head = calloc((size_t)c->size, 1)))
            return -ENOMEM;
        for (int r = 0; r < c->size; r++)
            for (int j = r, mark = 1; !c->cycle_head[j]; j = slot_of(c, j), mark = 2)
                c->cycle_head[j] = (unsigned char)mark;
    }

    /* the node's lockstep communicator, under a name its leader makes up */
    lockstep_comm_params_t np = p->node;
    if (c->local == 0) {
        static unsigned counter;
        snprintf(np.job, sizeof np.job, "lsmpi-%ld-%d-%llx-%u", gethostid(), (int)getpid(),
                 (unsigned long long)lockstep_now_ns(), __atomic_fetch_add(&counter, 1, __ATOMIC_RELAXED));
    }
    if (MPI_Bcast(np.job, sizeof np.job, MPI_CHAR, 0, c->node_mpi) != MPI_SUCCESS)
        return -LOCKSTEP_EMPI;
    np.rank = c->local;
    np.size = c->local_size;
    /* An eager root (the leader sharing its outcome, say) would learn of a peer's
     * refusal or disagreement only in a later call, and its node's ranks would meet
     * a refusal as a mismatch: every rank must end a call alike. */
    np.broadcast_eager_bytes = 0;
    /* Emulated nodes (ranks_per_node) share the machine's CPUs with each other: a rank
     * that spun (sized for its node alone) while its leader waits in MPI would take
     * the CPU the leader needs. 4 ranks in 2 nodes on 2 CPUs, 4-byte allreduce: 131 us
     * a call, 8-29 us when every rank counts all 4 (`lockstep bench comm` rows
     * allreduce_mpi_2nodes_4r) */
    if (np.cpu_sharers == 0 && ssize > np.size)
        np.cpu_sharers = ssize;
    c->node = lockstep_comm_create(&np);
    return c->node ? 0 : -errno;
}

lockstep_mpi_comm_t *lockstep_mpi_comm_create(MPI_Comm comm, const lockstep_mpi_params_t *params)
{
    int init = 0;
    if (MPI_Initialized(&init) != MPI_SUCCESS || !init || comm == MPI_COMM_NULL) {
        errno = EINVAL;
        return NULL;
    }
    /* agree on the params first, so that a bad value fails every rank at once */
    lockstep_mpi_params_t p = params ? *params : lockstep_mpi_params_default();
    int bad = p.ranks_per_node < 0 || p.piece_bytes > INT_MAX;
    if (!bad) {
        lockstep_comm_params_t chk = p.node;
        snprintf(chk.job, sizeof chk.job, "check");
        chk.rank = 0;
        chk.size = 1;
        bad = lockstep_comm_params_check(&chk, NULL, 0) != 0;
    }
    /* bad anywhere, or ranks that would split the nodes differently (their greatest
     * value and the negation of their least, in one call) */
    int rpn = bad ? 0 : p.ranks_per_node, cons = p.consecutive != 0;
    int mine[5] = {bad, rpn, -rpn, cons, -cons}, all[5];
    if (MPI_Allreduce(mine, all, 5, MPI_INT, MPI_MAX, comm) != MPI_SUCCESS) {
        errno = LOCKSTEP_EMPI;
        return NULL;
    }
    if (all[0] || all[1] != -all[2] || all[3] != -all[4]) {
        errno = EINVAL;
        return NULL;
    }
    pthread_once(&g_once, make_ops);
    lockstep_mpi_comm_t *c = calloc(1, sizeof *c);
    int rc = g_ready > 0 ? 0 : -LOCKSTEP_EMPI;
    if (c) {
        c->all = c->node_mpi = c->leaders = MPI_COMM_NULL;
        c->timeout_ns = (uint64_t)p.node.timeout_ms * 1000000ull;
        c->piece = p.piece_bytes ? p.piece_bytes : INT_MAX;
        c->check_calls = p.check_calls != 0;
        c->cancel = p.node.cancel;
        c->cancel_arg = p.node.cancel_arg;
        if (!rc)
            rc = setup(c, comm, &p);
    } else {
        rc = -ENOMEM;
    }
    /* every rank learns whether all succeeded (the worst error wins) */
    int code = -rc, worst = code;
    if (MPI_Allreduce(&code, &worst, 1, MPI_INT, MPI_MAX, comm) != MPI_SUCCESS)
        worst = LOCKSTEP_EMPI;
    if (worst) {
        if (c)
            free_comm(c);
        errno = worst;
        return NULL;
    }
    return c;
}

int lockstep_mpi_comm_rank(const lockstep_mpi_comm_t *c) { return c ? c->rank : -EINVAL; }
int lockstep_mpi_comm_size(const lockstep_mpi_comm_t *c) { return c ? c->size : -EINVAL; }
int lockstep_mpi_comm_nodes(const lockstep_mpi_comm_t *c) { return c ? c->nodes : -EINVAL; }
lockstep_comm_t *lockstep_mpi_comm_node(lockstep_mpi_comm_t *c) { return c ? c->node : NULL; }

/* ---- collectives -------------------------------------------------------------------- */

/* The end of a call: the leader's result (bytes in its scratch) to buf on every rank
 * of the node. */
static int from_leader(lockstep_mpi_comm_t *c, int call, void *buf, size_t bytes)
{
    int rc = lockstep_comm_broadcast(node_step(c, call, STEP_RESULT), c->local == 0 ? c->scratch : buf, bytes, 0,
                                     LOCKSTEP_ORDER_LINEAR, LOCKSTEP_PULL);
    if (!rc && c->local == 0 && bytes)
        memcpy(buf, c->scratch, bytes);
    return fail(c, rc);
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
        return refused(c); /* (the leader's node call does not see recv) */
    int lead = c->local == 0 && c->nodes > 1, nomem = lead ? scratch(c, bytes) : 0;
    int rc = lockstep_comm_allreduce(node_step(c, CALL_ALLREDUCE, STEP_FIRST), send,
                                     nomem ? NULL : lead ? c->scratch : recv, nomem ? 0 : count, dtype, op);
    if (nomem)
        rc = nomem;
    if (ends_in_node(c, &rc))
        return rc;
    if (c->local == 0 && (rc = leaders_agree(c, CALL_ALLREDUCE, op, dtype, 0, count)) == 0) {
        size_t per = c->piece / es ? c->piece / es : 1;
        MPI_Datatype t = g_type[dtype];
        for (size_t off = 0; off < count && !rc; off += per) {
            int n = (int)(count - off < per ? count - off : per);
            char *at = c->scratch + off * es;
            MPI_Request req;
            if (c->node_index == 0)
                rc = mpi_wait(c, &req, MPI_Ireduce(MPI_IN_PLACE, at, n, t, g_op[op], 0, c->leaders, &req));
            else
                rc = mpi_wait(c, &req, MPI_Ireduce(at, NULL, n, t, g_op[op], 0, c->leaders, &req));
            if (!rc)
                rc = mpi_wait(c, &req, MPI_Ibcast(at, n, t, 0, c->leaders, &req));
        }
    }
    if ((rc = share_outcome(c, CALL_ALLREDUCE, rc)) != 0)
        return rc;
    return from_leader(c, CALL_ALLREDUCE, recv, bytes);
}

int lockstep_mpi_broadcast(lockstep_mpi_comm_t *c, void *buf, size_t bytes, int root)
{
    if (!c)
        return -EINVAL;
    if (root < 0 || (bytes && !buf) || root >= c->size)
        return refused(c);
    if (c->broken)
        return c->broken;
    int rn = c->node_of[root], rc = 0;
    if (c->node_index == rn)
        rc = lockstep_comm_broadcast(node_step(c, CALL_BROADCAST, STEP_FIRST), buf, bytes, c->local_of[root],
                                     LOCKSTEP_ORDER_LINEAR, LOCKSTEP_PULL);
    else if (c->check_calls)
        rc = node_agree(c, CALL_BROADCAST, root, bytes);
    if (ends_in_node(c, &rc))
        return rc;
    if (c->local == 0 && (rc = leaders_agree(c, CALL_BROADCAST, 0, 0, root, bytes)) == 0 &&
        (rc = scratch(c, bytes)) == 0 && c->node_index == rn && bytes)
        memcpy(c->scratch, buf, bytes); /* (MPI gets the scratch: see lockstep_mpi_allreduce) */
    for (size_t off = 0; c->local == 0 && off < bytes && !rc; off += c->piece) {
        MPI_Request req;
        int n = (int)(bytes - off < c->piece ? bytes - off : c->piece);
        rc = mpi_wait(c, &req, MPI_Ibcast(c->scratch + off, n, MPI_BYTE, rn, c->leaders, &req));
    }
    if ((rc = share_outcome(c, CALL_BROADCAST, rc)) != 0 || c->node_index == rn)
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
        return mpi_wait(c, &req, MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, out, c->counts, c->displs,
                                                 MPI_BYTE, c->leaders, &req));
    }
    for (size_t off = 0; off < bytes; off += c->piece) {
        MPI_Datatype piece;
        int rc = piece_type(c, bytes, off, &piece);
        if (rc)
            return rc;
        rc = mpi_wait(c, &req, MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, out + off, c->node_ranks,
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
        return refused(c);
    if (c->broken)
        return c->broken;
    char *out = recv;
    size_t total = bytes * (size_t)c->size;
    /* My node's block goes to recv from slot rank - local on, so that my own block is
     * at recv + rank * bytes (where send may already be), and the node's block fits in
     * recv: it holds local ranks below mine and node_ranks - local - 1 above. When
     * nodes lie in rank order that is also the block's place in the result. */
    char *block = bytes ? out + (size_t)(c->rank - c->local) * bytes : out;
    int rc = lockstep_comm_allgather(node_step(c, CALL_ALLGATHER, STEP_FIRST), send, block, bytes,
                                     LOCKSTEP_ORDER_LINEAR, LOCKSTEP_PULL);
    if (ends_in_node(c, &rc)) /* (one node is always in rank order) */
        return rc;
    /* the leaders' allgather in the scratch (see lockstep_mpi_allreduce), my node's
     * block copied to its place in node order */
    if (c->local == 0 && (rc = leaders_agree(c, CALL_ALLGATHER, 0, 0, 0, bytes)) == 0 &&
        (rc = scratch(c, total)) == 0 && bytes) {
        memcpy(c->scratch + (size_t)c->node_first[c->node_index] * bytes, block,
               (size_t)c->node_ranks[c->node_index] * bytes);
        if ((rc = leaders_allgather(c, c->scratch, bytes)) == 0 && !c->ordered)
            reorder(c, c->scratch, bytes, 1);
    }
    if ((rc = share_outcome(c, CALL_ALLGATHER, rc)) != 0)
        return rc;
    return from_leader(c, CALL_ALLGATHER, out, total);
}

int lockstep_mpi_barrier(lockstep_mpi_comm_t *c)
{
    if (!c)
        return -EINVAL;
    if (c->broken)
        return c->broken;
    int rc = lockstep_comm_barrier(node_step(c, CALL_BARRIER, STEP_FIRST));
    if (ends_in_node(c, &rc))
        return rc;
    if (c->local == 0 && c->check_calls) {
        rc = leaders_agree(c, CALL_BARRIER, 0, 0, 0, 0); /* (an allreduce is a barrier too) */
    } else if (c->local == 0) {
        MPI_Request req;
        rc = mpi_wait(c, &req, MPI_Ibarrier(c->leaders, &req));
    }
    return share_outcome(c, CALL_BARRIER, rc);
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
    MPI_Datatype t = g_type[dtype];
    MPI_Request req;
    if (count * (size_t)c->size <= per) {
        for (int n = 0; n < c->nodes; n++)
            c->counts[n] = (int)((size_t)c->node_ranks[n] * count);
        *out = v;
        return mpi_wait(c, &req, MPI_Ireduce_scatter(MPI_IN_PLACE, v, c->counts, t, g_op[op], c->leaders, &req));
    }
    *out = v + (size_t)c->node_first[c->node_index] * count * es;
    for (int n = 0; n < c->nodes; n++) {
        char *at = v + (size_t)c->node_first[n] * count * es;
        size_t len = (size_t)c->node_ranks[n] * count;
        for (size_t off = 0; off < len; off += per) {
            int k = (int)(len - off < per ? len - off : per);
            int rc = n == c->node_index
                         ? mpi_wait(c, &req, MPI_Ireduce(MPI_IN_PLACE, at + off * es, k, t, g_op[op], n, c->leaders, &req))
                         : mpi_wait(c, &req, MPI_Ireduce(at + off * es, NULL, k, t, g_op[op], n, c->leaders, &req));
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
        return refused(c);
    size_t block = count * lockstep_dtype_size(dtype), total = block * (size_t)c->size;
    if (c->broken)
        return c->broken;
    if (c->nodes == 1)
        return fail(c, lockstep_comm_reduce_scatter(node_step(c, CALL_REDUCE_SCATTER, STEP_FIRST), send, recv, count,
                                                    dtype, op));
    /* My node's sum of the whole vector, then the leaders reduce each node's blocks to
     * its leader, which broadcasts them to its node. A rank without the memory for the
     * vector names no count in the node's allreduce, so that its node fails at once
     * (-LOCKSTEP_EMISMATCH there) instead of at the deadline. */
    int nomem = scratch(c, total);
    rc = lockstep_comm_allreduce(node_step(c, CALL_REDUCE_SCATTER, STEP_FIRST), send, nomem ? NULL : c->scratch,
                                 nomem ? 0 : count * (size_t)c->size, dtype, op);
    if (nomem)
        rc = nomem;
    if (ends_in_node(c, &rc))
        return rc;
    char *mine = c->scratch; /* where my node's blocks are, on every rank after the broadcast */
    if (c->local == 0 && (rc = leaders_agree(c, CALL_REDUCE_SCATTER, op, dtype, 0, count)) == 0) {
        if (!c->ordered && block)
            reorder(c, c->scratch, block, 0);
        rc = leaders_reduce_scatter(c, c->scratch, count, dtype, op, &mine);
    }
    if ((rc = share_outcome(c, CALL_REDUCE_SCATTER, rc)) != 0)
        return rc;
    rc = lockstep_comm_broadcast(node_step(c, CALL_REDUCE_SCATTER, STEP_RESULT), mine,
                                 block * (size_t)c->node_ranks[c->node_index], 0, LOCKSTEP_ORDER_LINEAR, LOCKSTEP_PULL);
    if (!rc && block)
        memcpy(recv, mine + (size_t)c->local * block, block);
    return fail(c, rc);
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
    lockstep_comm_t *node = node_step(c, CALL_ALLTOALL, STEP_FIRST);
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
        return refused(c);
    if (c->broken)
        return c->broken;
    if (c->nodes == 1)
        return fail(c, lockstep_comm_alltoall(node_step(c, CALL_ALLTOALL, STEP_FIRST), send, recv, bytes));
    int rc = 0;
    if (c->check_calls) { /* the node's ranks, then the leaders, before any rank posts its MPI call */
        rc = node_agree(c, CALL_ALLTOALL, 0, bytes);
        if (ends_in_node(c, &rc))
            return rc;
        if (c->local == 0)
            rc = leaders_agree(c, CALL_ALLTOALL, 0, 0, 0, bytes);
        if ((rc = share_outcome(c, CALL_ALLTOALL, rc)) != 0)
            return rc;
    }
    /* MPI moves the blocks between images in the scratch, not the caller's buffers: a
     * request abandoned after a failure may still read or write them (the scratch of
     * a broken communicator is never freed). A rank without the memory names no size
     * in the node's all-to-all, so that its node fails at once. */
    size_t img = (size_t)c->size * bytes;
    int nomem = scratch(c, 2 * img + (c->ordered ? 0 : 2 * (size_t)c->local_size * bytes));
    if (nomem) {
        lockstep_comm_alltoall(node_step(c, CALL_ALLTOALL, STEP_FIRST), NULL, NULL, 0);
        return fail(c, nomem);
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
        mrc = mpi_wait(c, &req, MPI_SUCCESS);
    for (size_t off = c->piece; off < bytes && !mrc && !nrc; off += c->piece)
        if ((mrc = post_alltoall(c, out, in, bytes, off, &req)) == 0)
            mrc = mpi_wait(c, &req, MPI_SUCCESS);
    rc = nrc ? nrc : mrc;
    if (!rc && bytes)
        copy_remote(c, recv, in, bytes);
    int32_t worst = -rc, got = 0;
    int arc = lockstep_comm_allreduce(node_step(c, CALL_ALLTOALL, STEP_WORST), &worst, &got, 1, LOCKSTEP_I32,
                                      LOCKSTEP_MAX);
    return fail(c, arc ? arc : -got);
}
