/* Creating and freeing a lockstep_mpi communicator: the node's lockstep communicator,
 * the leaders' MPI communicator, and the layout of the ranks across nodes. */
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
        c->ordered &= ls_mpi_slot_of(c, r) == r;
    if (!c->ordered) { /* mark the first slot of each cycle (1; the rest of it 2) */
        if (!(c->cycle_head = calloc((size_t)c->size, 1)))
            return -ENOMEM;
        for (int r = 0; r < c->size; r++)
            for (int j = r, mark = 1; !c->cycle_head[j]; j = ls_mpi_slot_of(c, j), mark = 2)
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
     * the CPU the leader needs (`lockstep bench comm` rows allreduce_mpi_2nodes_4r) */
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
    int ready = ls_mpi_ops_ready();
    lockstep_mpi_comm_t *c = calloc(1, sizeof *c);
    int rc = ready ? 0 : -LOCKSTEP_EMPI;
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

