/* lockstep_mpi: collectives across "nodes" (groups of ranks standing in for nodes on
 * this machine), run under mpiexec. Usage: test_comm_mpi RANKS_PER_NODE EXPECTED_NODES
 * [consecutive]: nodes of consecutive ranks instead of ranks dealt round-robin.
 * Every rank checks exact values against a reference computed here, that all ranks
 * hold the same bits, and the error codes; the last part checks that a leader that
 * never comes makes every other rank time out instead of hanging in MPI. */
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lockstep/comm_mpi.h"
#include "../common/check.h"
#include "../common/half.h"

static int R, N;     /* my rank, ranks */
static int RPN, CONS; /* ranks_per_node, consecutive */

/* Where rank r is, for the layouts the tests make (more than one node). */
static int node_of(int r, int nodes) { return CONS ? r / RPN : r % nodes; }
static int local_of(int r, int nodes) { return CONS ? r % RPN : r / nodes; }
static int leader_of(int node) { return CONS ? node * RPN : node; }

/* Small integers: sums over up to 8 ranks are exact in every dtype. */
static int value(int rank, size_t i)
{
    return (int)((i * 7 + (size_t)rank * 3) % 11) - 5;
}

static void store(lockstep_dtype_t dt, void *buf, size_t i, int v)
{
    float f = (float)v;
    uint32_t bits;
    memcpy(&bits, &f, 4);
    switch (dt) {
    case LOCKSTEP_DTYPE_F32: ((float *)buf)[i] = f; break;
    case LOCKSTEP_DTYPE_I32: ((int32_t *)buf)[i] = v; break;
    case LOCKSTEP_DTYPE_BF16: ((uint16_t *)buf)[i] = (uint16_t)(bits >> 16); break; /* exact for small ints */
    case LOCKSTEP_DTYPE_F16: ((uint16_t *)buf)[i] = test_half_from_float(f); break;
    }
}

static void check_allreduce(lockstep_mpi_comm_t *c, lockstep_dtype_t dt, lockstep_op_t op, size_t count,
                            int in_place)
{
    size_t es = lockstep_dtype_size(dt);
    char *send = malloc(count * es + 1), *recv = malloc(count * es + 1), *want = malloc(count * es + 1);
    CHECK(send && recv && want);
    for (size_t i = 0; i < count; i++) {
        int acc = value(0, i);
        for (int r = 1; r < N; r++) {
            int v = value(r, i);
            acc = op == LOCKSTEP_OP_SUM ? acc + v : op == LOCKSTEP_OP_MAX ? (v > acc ? v : acc) : (v < acc ? v : acc);
        }
        store(dt, send, i, value(R, i));
        store(dt, want, i, acc);
    }
    memset(recv, 0x5a, count * es);
    if (in_place)
        memcpy(recv, send, count * es);
    int arc = lockstep_mpi_allreduce(c, in_place ? recv : send, recv, count, dt, op);
    if (arc) fprintf(stderr, "rank %d: dt %d op %d count %zu ip %d: rc %d\n", R, dt, op, count, in_place, arc);
    CHECK_EQ(arc, 0);
    if (count && memcmp(recv, want, count * es) != 0) {
        fprintf(stderr, "rank %d: allreduce dtype %d op %d count %zu in_place %d: wrong result\n", R, dt, op,
                count, in_place);
        exit(1);
    }
    free(send);
    free(recv);
    free(want);
}

/* Random f32 and f16 inputs: every rank must hold rank 0's bits. */
static void check_identical(lockstep_mpi_comm_t *c, lockstep_dtype_t dt, size_t count)
{
    size_t es = lockstep_dtype_size(dt);
    uint16_t *buf = malloc(count * es), *ref = malloc(count * es);
    CHECK(buf && ref);
    uint64_t x = 0x9e3779b97f4a7c15ull * (uint64_t)(R + 1);
    for (size_t i = 0; i < count; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        float f = (float)((double)(x >> 11) / 9007199254740992.0 * 2.0 - 1.0);
        if (dt == LOCKSTEP_DTYPE_F32) {
            ((float *)(void *)buf)[i] = f;
        } else {
            uint16_t h = test_half_from_float(f);
            memcpy(buf + i, &h, 2);
        }
    }
    CHECK_EQ(lockstep_mpi_allreduce(c, buf, buf, count, dt, LOCKSTEP_OP_SUM), 0);
    memcpy(ref, buf, count * es);
    CHECK_EQ(MPI_Bcast(ref, (int)(count * es), MPI_BYTE, 0, MPI_COMM_WORLD), MPI_SUCCESS);
    CHECK(memcmp(ref, buf, count * es) == 0);
    free(buf);
    free(ref);
}

static void check_broadcast(lockstep_mpi_comm_t *c, size_t bytes, int root)
{
    unsigned char *buf = malloc(bytes + 1);
    CHECK(buf);
    for (size_t i = 0; i < bytes; i++)
        buf[i] = R == root ? (unsigned char)(i * 31 + (size_t)root) : 0xee;
    CHECK_EQ(lockstep_mpi_broadcast(c, buf, bytes, root), 0);
    for (size_t i = 0; i < bytes; i++)
        if (buf[i] != (unsigned char)(i * 31 + (size_t)root)) {
            fprintf(stderr, "rank %d: broadcast %zu B from %d: byte %zu wrong\n", R, bytes, root, i);
            exit(1);
        }
    free(buf);
}

static void check_allgather(lockstep_mpi_comm_t *c, size_t bytes, int in_place)
{
    unsigned char *send = malloc(bytes + 1), *recv = malloc(bytes * (size_t)N + 1);
    CHECK(send && recv);
    memset(recv, 0xee, bytes * (size_t)N);
    unsigned char *mine = in_place ? recv + (size_t)R * bytes : send;
    for (size_t i = 0; i < bytes; i++)
        mine[i] = (unsigned char)(i * 13 + (size_t)R * 101);
    CHECK_EQ(lockstep_mpi_allgather(c, mine, recv, bytes), 0);
    for (int r = 0; r < N; r++)
        for (size_t i = 0; i < bytes; i++)
            if (recv[(size_t)r * bytes + i] != (unsigned char)(i * 13 + (size_t)r * 101)) {
                fprintf(stderr, "rank %d: allgather %zu B: rank %d's byte %zu wrong\n", R, bytes, r, i);
                exit(1);
            }
    free(send);
    free(recv);
}

/* send holds N blocks of count elements; recv = block R reduced over the ranks, as
 * the reference computes it; in place: recv is block R of send. */
static void check_reduce_scatter(lockstep_mpi_comm_t *c, lockstep_dtype_t dt, lockstep_op_t op, size_t count,
                                 int in_place)
{
    size_t es = lockstep_dtype_size(dt), total = count * (size_t)N;
    char *send = malloc(total * es + 1), *recv = malloc(count * es + 1), *want = malloc(count * es + 1);
    CHECK(send && recv && want);
    for (size_t i = 0; i < total; i++)
        store(dt, send, i, value(R, i));
    for (size_t i = 0; i < count; i++) {
        size_t at = (size_t)R * count + i;
        int acc = value(0, at);
        for (int r = 1; r < N; r++) {
            int v = value(r, at);
            acc = op == LOCKSTEP_OP_SUM ? acc + v : op == LOCKSTEP_OP_MAX ? (v > acc ? v : acc) : (v < acc ? v : acc);
        }
        store(dt, want, i, acc);
    }
    char *out = in_place ? send + (size_t)R * count * es : recv;
    if (!in_place)
        memset(recv, 0x5a, count * es);
    int rc = lockstep_mpi_reduce_scatter(c, send, out, count, dt, op);
    if (rc || (count && memcmp(out, want, count * es) != 0)) {
        fprintf(stderr, "rank %d: reduce_scatter dtype %d op %d count %zu in_place %d: %s\n", R, dt, op, count,
                in_place, rc ? lockstep_strerror(rc) : "wrong result");
        exit(1);
    }
    free(send);
    free(recv);
    free(want);
}

/* Block k of my send is for rank k; block k of recv is rank k's block for me. */
static unsigned char a2a_byte(int from, int to, size_t i)
{
    return (unsigned char)(i * 13 + (size_t)from * 101 + (size_t)to * 7);
}

static void check_alltoall(lockstep_mpi_comm_t *c, size_t bytes)
{
    unsigned char *send = malloc(bytes * (size_t)N + 1), *recv = malloc(bytes * (size_t)N + 1);
    CHECK(send && recv);
    for (int k = 0; k < N; k++)
        for (size_t i = 0; i < bytes; i++)
            send[(size_t)k * bytes + i] = a2a_byte(R, k, i);
    memset(recv, 0xee, bytes * (size_t)N);
    CHECK_EQ(lockstep_mpi_alltoall(c, send, recv, bytes), 0);
    for (int k = 0; k < N; k++)
        for (size_t i = 0; i < bytes; i++)
            if (recv[(size_t)k * bytes + i] != a2a_byte(k, R, i)) {
                fprintf(stderr, "rank %d: alltoall %zu B: rank %d's byte %zu wrong\n", R, bytes, k, i);
                exit(1);
            }
    free(send);
    free(recv);
}

/* Every collective, at counts and sizes up to most. */
static void check_all(lockstep_mpi_comm_t *c, size_t most)
{
    static const size_t counts[] = {0, 1, 7, 129, 5000, 70000};
    for (int dt = 0; dt < 4; dt++)
        for (int op = 0; op < 3; op++)
            for (size_t k = 0; k < sizeof counts / sizeof *counts && counts[k] <= most; k++)
                for (int ip = 0; ip < 2; ip++)
                    check_allreduce(c, (lockstep_dtype_t)dt, (lockstep_op_t)op, counts[k], ip);
    static const size_t rs_counts[] = {0, 1, 7, 129, 5000};
    for (int dt = 0; dt < 4; dt++)
        for (int op = 0; op < 3; op++)
            for (size_t k = 0; k < sizeof rs_counts / sizeof *rs_counts && rs_counts[k] <= most; k++)
                for (int ip = 0; ip < 2; ip++)
                    check_reduce_scatter(c, (lockstep_dtype_t)dt, (lockstep_op_t)op, rs_counts[k], ip);
    if (most >= 70000)
        check_reduce_scatter(c, LOCKSTEP_DTYPE_F32, LOCKSTEP_OP_SUM, 70000, 0);
    check_identical(c, LOCKSTEP_DTYPE_F32, most < 100000 ? most : 100000);
    check_identical(c, LOCKSTEP_DTYPE_F16, most < 3001 ? most : 3001);
    static const size_t sizes[] = {0, 1, 100, 4096, 300000};
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes && sizes[k] <= most; k++) {
        for (int root = 0; root < N; root++)
            check_broadcast(c, sizes[k], root);
        check_allgather(c, sizes[k], 0);
        check_allgather(c, sizes[k], 1);
        check_alltoall(c, sizes[k]);
    }
    for (int i = 0; i < 5; i++)
        CHECK_EQ(lockstep_mpi_barrier(c), 0);
}

/* The end of a call that must fail on this rank with want (what and case k name it in
 * the report when it does not); then, unless next is 0, the communicator's next call
 * must fail with next (it is broken). Frees c. */
static void expect_failed(lockstep_mpi_comm_t *c, int rc, int want, int next, const char *what, int k)
{
    if (rc != want)
        fprintf(stderr, "rank %d: %s, case %d: got %s, want %s\n", R, what, k, lockstep_strerror(rc),
                lockstep_strerror(want));
    CHECK_EQ(rc, want);
    if (next)
        CHECK_EQ(lockstep_mpi_barrier(c), next);
    lockstep_mpi_comm_free(c);
}

int main(int argc, char **argv)
{
    CHECK_EQ(MPI_Init(&argc, &argv), MPI_SUCCESS);
    watchdog(120);
    CHECK(argc == 3 || (argc == 4 && strcmp(argv[3], "consecutive") == 0));
    int want_nodes = atoi(argv[2]);
    RPN = atoi(argv[1]);
    CONS = argc == 4;
    MPI_Comm_rank(MPI_COMM_WORLD, &R);
    MPI_Comm_size(MPI_COMM_WORLD, &N);

    /* bad params fail on every rank, before anything is made */
    lockstep_mpi_params_t p = lockstep_mpi_params_default();
    p.ranks_per_node = -1;
    errno = 0;
    CHECK(lockstep_mpi_comm_create(MPI_COMM_WORLD, &p) == NULL);
    CHECK_EQ(errno, EINVAL);
    p = lockstep_mpi_params_default();
    p.node.small_bytes = R == N - 1 ? 100 : p.node.small_bytes; /* bad on one rank only */
    errno = 0;
    CHECK(lockstep_mpi_comm_create(MPI_COMM_WORLD, &p) == NULL);
    CHECK_EQ(errno, EINVAL);
    errno = 0;
    CHECK(lockstep_mpi_comm_create(MPI_COMM_NULL, NULL) == NULL);
    CHECK_EQ(errno, EINVAL);

    if (N > 1) { /* ranks that would split the nodes differently: EINVAL everywhere */
        p = lockstep_mpi_params_default();
        p.ranks_per_node = R == 1 ? 1 : 2;
        errno = 0;
        CHECK(lockstep_mpi_comm_create(MPI_COMM_WORLD, &p) == NULL);
        CHECK_EQ(errno, EINVAL);
        p.ranks_per_node = 2;
        p.consecutive = R == 0;
        errno = 0;
        CHECK(lockstep_mpi_comm_create(MPI_COMM_WORLD, &p) == NULL);
        CHECK_EQ(errno, EINVAL);
    }

    p = lockstep_mpi_params_default();
    p.ranks_per_node = RPN;
    p.consecutive = CONS;
    p.node.timeout_ms = 30000;
    lockstep_mpi_comm_t *c = lockstep_mpi_comm_create(MPI_COMM_WORLD, &p);
    CHECK(c != NULL);
    CHECK_EQ(lockstep_mpi_comm_rank(c), R);
    CHECK_EQ(lockstep_mpi_comm_size(c), N);
    CHECK_EQ(lockstep_mpi_comm_nodes(c), want_nodes);
    CHECK(lockstep_mpi_comm_node(c) != NULL);

    check_all(c, SIZE_MAX);

    /* bad arguments: -EINVAL, and the communicator still works after them */
    float f = 1;
    CHECK_EQ(lockstep_mpi_allreduce(NULL, &f, &f, 1, LOCKSTEP_DTYPE_F32, LOCKSTEP_OP_SUM), -EINVAL);
    CHECK_EQ(lockstep_mpi_allreduce(c, &f, &f, 1, (lockstep_dtype_t)9, LOCKSTEP_OP_SUM), -EINVAL);
    CHECK_EQ(lockstep_mpi_allreduce(c, NULL, &f, 1, LOCKSTEP_DTYPE_F32, LOCKSTEP_OP_SUM), -EINVAL);
    CHECK_EQ(lockstep_mpi_allreduce(c, &f, NULL, 1, LOCKSTEP_DTYPE_F32, LOCKSTEP_OP_SUM), -EINVAL);
    float two[3];
    CHECK_EQ(lockstep_mpi_allreduce(c, two, two + 1, 2, LOCKSTEP_DTYPE_F32, LOCKSTEP_OP_SUM), -EINVAL); /* overlap */
    CHECK_EQ(lockstep_mpi_broadcast(c, &f, 4, N), -EINVAL);
    CHECK_EQ(lockstep_mpi_broadcast(c, &f, 4, -1), -EINVAL);
    CHECK_EQ(lockstep_mpi_allgather(c, NULL, &f, 4), -EINVAL);
    CHECK_EQ(lockstep_mpi_barrier(NULL), -EINVAL);
    float w[64] = {0};
    CHECK_EQ(lockstep_mpi_reduce_scatter(NULL, w, w, 1, LOCKSTEP_DTYPE_F32, LOCKSTEP_OP_SUM), -EINVAL);
    CHECK_EQ(lockstep_mpi_reduce_scatter(c, w, w, 1, LOCKSTEP_DTYPE_F32, (lockstep_op_t)3), -EINVAL);
    CHECK_EQ(lockstep_mpi_reduce_scatter(c, NULL, w, 1, LOCKSTEP_DTYPE_F32, LOCKSTEP_OP_SUM), -EINVAL);
    CHECK_EQ(lockstep_mpi_reduce_scatter(c, w, w + 1, 2, LOCKSTEP_DTYPE_F32, LOCKSTEP_OP_SUM), -EINVAL); /* not block R */
    CHECK_EQ(lockstep_mpi_reduce_scatter(c, w, w, SIZE_MAX / 2, LOCKSTEP_DTYPE_F32, LOCKSTEP_OP_SUM), -EINVAL);
    CHECK_EQ(lockstep_mpi_alltoall(NULL, w, w + 32, 1), -EINVAL);
    CHECK_EQ(lockstep_mpi_alltoall(c, NULL, w, 1), -EINVAL);
    CHECK_EQ(lockstep_mpi_alltoall(c, w, w, 1), -EINVAL); /* overlap */
    CHECK_EQ(lockstep_mpi_alltoall(c, w, w + 32, SIZE_MAX / 2 + 1), -EINVAL);
    CHECK_EQ(lockstep_mpi_comm_nodes(NULL), -EINVAL);
    if (want_nodes == 1 && N > 1) {
        /* one rank's bad arguments, found by the node's call (the dtype) or by this
         * layer (the root): the call is void, ends at once, and the communicator goes on */
        int rc = lockstep_mpi_allreduce(c, &f, &f, 1, R == 1 ? (lockstep_dtype_t)9 : LOCKSTEP_DTYPE_F32, LOCKSTEP_OP_SUM);
        CHECK_EQ(rc, R == 1 ? -EINVAL : -LOCKSTEP_EPEERINVAL);
        rc = lockstep_mpi_broadcast(c, &f, 4, R == 1 ? -1 : 0);
        CHECK_EQ(rc, R == 1 ? -EINVAL : -LOCKSTEP_EPEERINVAL);
    }
    check_allreduce(c, LOCKSTEP_DTYPE_F32, LOCKSTEP_OP_SUM, 33, 0); /* the communicator goes on */
    lockstep_mpi_comm_free(c);
    lockstep_mpi_comm_free(NULL);

    /* Pieces: messages larger than piece_bytes go between leaders in several MPI
     * calls (past INT_MAX bytes by default; 1000 here, and 3 to cut elements apart).
     * The allgathers past a piece move one piece of every block per call. */
    static const size_t pieces[] = {1000, 3}, most[] = {SIZE_MAX, 129};
    for (size_t k = 0; k < sizeof pieces / sizeof *pieces; k++) {
        p.piece_bytes = pieces[k];
        c = lockstep_mpi_comm_create(MPI_COMM_WORLD, &p);
        CHECK(c != NULL);
        check_all(c, most[k]);
        lockstep_mpi_comm_free(c);
    }
    p.piece_bytes = (size_t)INT_MAX + 1;
    errno = 0;
    CHECK(lockstep_mpi_comm_create(MPI_COMM_WORLD, &p) == NULL);
    CHECK_EQ(errno, EINVAL);
    p.piece_bytes = 0;

    /* check_calls: matching calls work as before; calls that differ between nodes
     * (every rank of node 1 names another count, op, root or collective) fail with
     * EMISMATCH on every rank, and the communicator stays broken */
    p.check_calls = 1;
    c = lockstep_mpi_comm_create(MPI_COMM_WORLD, &p);
    CHECK(c != NULL);
    check_all(c, 5000);
    lockstep_mpi_comm_free(c);
    for (int k = 0; k < 6 && want_nodes > 1; k++) {
        c = lockstep_mpi_comm_create(MPI_COMM_WORLD, &p);
        CHECK(c != NULL);
        int odd = node_of(R, want_nodes) == 1;
        float v[64] = {0};
        int rc = 0;
        switch (k) {
        case 0: rc = lockstep_mpi_allreduce(c, v, v, odd ? 11 : 10, LOCKSTEP_DTYPE_F32, LOCKSTEP_OP_SUM); break;
        case 1: rc = lockstep_mpi_allreduce(c, v, v, 10, LOCKSTEP_DTYPE_F32, odd ? LOCKSTEP_OP_MAX : LOCKSTEP_OP_SUM); break;
        case 2: rc = lockstep_mpi_broadcast(c, v, 8, odd ? 1 : 0); break;
        case 3: rc = odd ? lockstep_mpi_barrier(c) : lockstep_mpi_allgather(c, v, v + 8, 4); break;
        case 4: rc = lockstep_mpi_alltoall(c, v, v + 32, odd ? 8 : 4); break;
        case 5: rc = lockstep_mpi_reduce_scatter(c, v, v + 32, odd ? 2 : 1, LOCKSTEP_DTYPE_F32, LOCKSTEP_OP_SUM); break;
        }
        expect_failed(c, rc, -LOCKSTEP_EMISMATCH, -LOCKSTEP_EMISMATCH, "node 1's calls differ", k);
    }

    /* check_calls and one rank's invalid arguments (rank 1: its node's leader in some
     * layouts, not in others): the call ends on every node with -LOCKSTEP_EPEERINVAL
     * (-EINVAL on rank 1), found by the node's call (the dtype, the op) or by this
     * layer; without check_calls the other nodes would wait out the deadline and get
     * -ETIMEDOUT. Every node's communicator is then broken (rank 1's too when it leads
     * its node). Ranks that all pass the same invalid arguments get -EINVAL, and the
     * communicator goes on. */
    p.node.timeout_ms = 5000;
    int lead1 = want_nodes > 1 && leader_of(node_of(1, want_nodes)) == 1;
    for (int k = 0; k < 6 && want_nodes > 1; k++) {
        c = lockstep_mpi_comm_create(MPI_COMM_WORLD, &p);
        CHECK(c != NULL);
        int bad = R == 1, rc = 0;
        float v[64] = {0};
        switch (k) {
        case 0: rc = lockstep_mpi_allreduce(c, v, v, 10, bad ? (lockstep_dtype_t)9 : LOCKSTEP_DTYPE_F32, LOCKSTEP_OP_SUM); break;
        case 1: rc = lockstep_mpi_allreduce(c, bad ? NULL : v, v, 10, LOCKSTEP_DTYPE_F32, LOCKSTEP_OP_SUM); break;
        case 2: rc = lockstep_mpi_broadcast(c, v, 8, bad ? -1 : 0); break;
        case 3: rc = lockstep_mpi_allgather(c, bad ? NULL : v + 48, v, 8); break;
        case 4:
            rc = lockstep_mpi_reduce_scatter(c, v, v + 8 * R, 1, LOCKSTEP_DTYPE_F32, bad ? (lockstep_op_t)3 : LOCKSTEP_OP_SUM);
            break;
        case 5: rc = lockstep_mpi_alltoall(c, bad ? NULL : v, v + 32, 1); break;
        }
        expect_failed(c, rc, bad ? -EINVAL : -LOCKSTEP_EPEERINVAL, !bad || lead1 ? -LOCKSTEP_EPEERINVAL : 0,
                      "rank 1's invalid arguments", k);
    }
    if (want_nodes > 1) {
        c = lockstep_mpi_comm_create(MPI_COMM_WORLD, &p);
        CHECK(c != NULL);
        CHECK_EQ(lockstep_mpi_allreduce(c, NULL, &f, 1, LOCKSTEP_DTYPE_F32, LOCKSTEP_OP_SUM), -EINVAL);
        CHECK_EQ(lockstep_mpi_allreduce(c, &f, &f, 1, (lockstep_dtype_t)9, LOCKSTEP_OP_SUM), -EINVAL);
        CHECK_EQ(lockstep_mpi_broadcast(c, &f, 4, -1), -EINVAL);
        check_allreduce(c, LOCKSTEP_DTYPE_F32, LOCKSTEP_OP_SUM, 33, 0);
        lockstep_mpi_comm_free(c);
    }
    /* check_calls and a call that fails inside one node: one rank of a node of two or
     * more (the last such rank, then its node's leader) names another count, op,
     * root or collective than the rest of its node. Its node fails the call with
     * -LOCKSTEP_EMISMATCH, and its leader's turn among the leaders gives every other
     * node the same at once (at their deadline, -ETIMEDOUT, without it). Broadcasts
     * from the odd rank's node leader and from another node's: a node that only
     * receives compares its ranks' calls before the leaders' step too. Case 8: the odd
     * rank thinks a 4-byte broadcast comes from its leader, the others from another
     * node, as its leader's 4-byte outcome does (the steps are tagged apart). */
    int odd_rank = -1;
    for (int r = 0; r < N && want_nodes > 1; r++)
        if (local_of(r, want_nodes) > 0)
            odd_rank = r;
    int odd_node = odd_rank >= 0 ? node_of(odd_rank, want_nodes) : 0;
    int home = leader_of(odd_node), away = leader_of((odd_node + 1) % want_nodes);
    enum { MISMATCHES = 9 };
    for (int k = 0; k < 2 * MISMATCHES && odd_rank >= 0; k++) {
        int who = k < MISMATCHES ? odd_rank : home, odd = R == who;
        c = lockstep_mpi_comm_create(MPI_COMM_WORLD, &p);
        CHECK(c != NULL);
        float v[64] = {0};
        int rc = 0;
        switch (k % MISMATCHES) {
        case 0: rc = lockstep_mpi_allreduce(c, v, v, odd ? 11 : 10, LOCKSTEP_DTYPE_F32, LOCKSTEP_OP_SUM); break;
        case 1: rc = lockstep_mpi_allreduce(c, v, v, 10, LOCKSTEP_DTYPE_F32, odd ? LOCKSTEP_OP_MIN : LOCKSTEP_OP_SUM); break;
        case 2: rc = lockstep_mpi_allgather(c, v, v + 8, odd ? 8 : 4); break;
        case 3: rc = odd ? lockstep_mpi_allreduce(c, v, v, 1, LOCKSTEP_DTYPE_F32, LOCKSTEP_OP_SUM) : lockstep_mpi_barrier(c); break;
        case 4: rc = lockstep_mpi_reduce_scatter(c, v, v + 32, odd ? 2 : 1, LOCKSTEP_DTYPE_F32, LOCKSTEP_OP_SUM); break;
        case 5: rc = lockstep_mpi_broadcast(c, v, odd ? 12 : 8, home); break;
        case 6: rc = lockstep_mpi_broadcast(c, v, odd ? 12 : 8, away); break;
        case 7: rc = lockstep_mpi_alltoall(c, v, v + 32, odd ? 2 : 1); break;
        case 8: rc = lockstep_mpi_broadcast(c, v, 4, odd ? home : away); break;
        }
        expect_failed(c, rc, -LOCKSTEP_EMISMATCH, -LOCKSTEP_EMISMATCH,
                      who == home ? "a leader's call differs from its node's" : "a call differs from its node's",
                      k % MISMATCHES);
    }
    /* The same rank's invalid arguments (then its leader's) where its node's own step
     * would come after the leaders' or not before MPI's: a broadcast from another
     * node, an all-to-all. Every other rank gets -LOCKSTEP_EPEERINVAL at once. */
    for (int k = 0; k < 4 && odd_rank >= 0; k++) {
        int who = k < 2 ? odd_rank : home, bad = R == who;
        c = lockstep_mpi_comm_create(MPI_COMM_WORLD, &p);
        CHECK(c != NULL);
        float v[64] = {0};
        int rc = k % 2 ? lockstep_mpi_alltoall(c, bad ? NULL : v, v + 32, 1)
                       : lockstep_mpi_broadcast(c, bad ? NULL : v, 8, away);
        expect_failed(c, rc, bad ? -EINVAL : -LOCKSTEP_EPEERINVAL, !bad || who == home ? -LOCKSTEP_EPEERINVAL : 0,
                      who == home ? "a leader's invalid arguments" : "a non-leader's invalid arguments", k);
    }
    /* Without check_calls, case 8 above by a rank that does not lead its node: the
     * other nodes have their data, and the odd rank's node fails the call with
     * -LOCKSTEP_EMISMATCH (before the steps were tagged apart, the odd rank took its
     * leader's outcome for the data and returned 0). */
    p.check_calls = 0;
    if (odd_rank >= 0) {
        c = lockstep_mpi_comm_create(MPI_COMM_WORLD, &p);
        CHECK(c != NULL);
        float v[4] = {0};
        if (R == away)
            v[0] = 7;
        int mine = node_of(R, want_nodes) == odd_node;
        int rc = lockstep_mpi_broadcast(c, v, 4, R == odd_rank ? home : away);
        if (rc != (mine ? -LOCKSTEP_EMISMATCH : 0))
            fprintf(stderr, "rank %d: without check_calls, case 8: got %s\n", R, lockstep_strerror(rc));
        CHECK_EQ(rc, mine ? -LOCKSTEP_EMISMATCH : 0);
        if (!mine)
            CHECK(v[0] == 7);
        lockstep_mpi_comm_free(c);
    }
    p.node.timeout_ms = 30000;

    /* A node's leader that never comes: the leader of node 1 (its lowest rank) skips
     * a barrier. Its node's other ranks time out waiting for it; the other leaders
     * wait in MPI against the same deadline, time out instead of hanging, and pass
     * ETIMEDOUT to their nodes. Every later call fails the same way (the communicator
     * is broken). */
    p = lockstep_mpi_params_default();
    p.ranks_per_node = RPN;
    p.consecutive = CONS;
    p.node.timeout_ms = 1000;
    c = lockstep_mpi_comm_create(MPI_COMM_WORLD, &p);
    CHECK(c != NULL);
    CHECK_EQ(lockstep_mpi_barrier(c), 0);
    int nodes = lockstep_mpi_comm_nodes(c), victim = nodes > 1 ? leader_of(1) : 0;
    CHECK_EQ(lockstep_comm_rank(lockstep_mpi_comm_node(c)), local_of(R, nodes));
    if (R != victim) {
        CHECK_EQ(lockstep_mpi_barrier(c), -ETIMEDOUT);
        CHECK_EQ(lockstep_mpi_barrier(c), -ETIMEDOUT);
    }
    lockstep_mpi_comm_free(c);

    /* The same in the all-to-all, where every rank waits in MPI: the victim's node
     * waits for it inside the node, the other nodes in MPI; all time out. */
    c = lockstep_mpi_comm_create(MPI_COMM_WORLD, &p);
    CHECK(c != NULL);
    unsigned char *blocks = calloc(2 * (size_t)N, 64);
    CHECK(blocks != NULL);
    CHECK_EQ(lockstep_mpi_alltoall(c, blocks, blocks + (size_t)N * 64, 64), 0);
    if (R != victim) {
        CHECK_EQ(lockstep_mpi_alltoall(c, blocks, blocks + (size_t)N * 64, 64), -ETIMEDOUT);
        CHECK_EQ(lockstep_mpi_alltoall(c, blocks, blocks + (size_t)N * 64, 64), -ETIMEDOUT);
    }
    lockstep_mpi_comm_free(c);
    free(blocks);

    /* A leader that comes to an allreduce only after every other rank's call has
     * failed: its data reaches requests the others abandoned, whose buffers MPI may
     * write after the call returned. MPI only ever had copies in lockstep's scratch, so
     * freeing the caller's buffer at once is safe (under ASan a late write into it
     * fails the test; with a rank per node the victim's data is certain to arrive).
     * The others tell the victim when they have failed, so that it comes late however
     * slow the machine is (a sleep past their deadline was not always enough, with
     * 4 ranks on 2 CPUs beside other tests). */
    c = lockstep_mpi_comm_create(MPI_COMM_WORLD, &p);
    CHECK(c != NULL);
    float *late = calloc(4096, sizeof(float));
    CHECK(late != NULL);
    CHECK_EQ(lockstep_mpi_allreduce(c, late, late, 4096, LOCKSTEP_DTYPE_F32, LOCKSTEP_OP_SUM), 0);
    int token = 0;
    if (R == victim)
        for (int k = 0; k < N; k++)
            if (k != victim)
                CHECK_EQ(MPI_Recv(&token, 1, MPI_INT, k, 77, MPI_COMM_WORLD, MPI_STATUS_IGNORE), MPI_SUCCESS);
    CHECK(lockstep_mpi_allreduce(c, late, late, 4096, LOCKSTEP_DTYPE_F32, LOCKSTEP_OP_SUM) != 0);
    if (R != victim)
        CHECK_EQ(MPI_Send(&token, 1, MPI_INT, victim, 77, MPI_COMM_WORLD), MPI_SUCCESS);
    free(late);
    lockstep_mpi_comm_free(c);
    CHECK_EQ(MPI_Barrier(MPI_COMM_WORLD), MPI_SUCCESS); /* MPI progresses here */

    CHECK_EQ(MPI_Finalize(), MPI_SUCCESS);
    return 0;
}
