/* Allreduce (every op x dtype, sizes 0 .. 64 MiB, in place and out of place),
 * broadcast and allgather (every order, push and pull, small and chunked) and barrier,
 * at N ranks given on the command line: results equal a reference computed here in
 * rank order, and are bit-identical on every rank. */
#include "comm_harness.h"
#include "../common/half.h"

#include <sched.h>

static uint64_t rng_state;
TEST_UNTRACED static uint32_t rnd(void)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 33);
}

/* Inputs depend only on (rank, case, element): every rank can compute everyone's. Every
 * NaN is the same quiet NaN, so sums that meet one have the same bits whichever
 * operand the hardware propagates. */
TEST_UNTRACED static void fill(void *buf, lockstep_dtype_t dt, size_t count, int rank, unsigned cs)
{
    TEST_WRITES(buf, count * lockstep_dtype_size(dt));
    rng_state = 0x1234567ull + (uint64_t)rank * 0x9e3779b97f4a7c15ull + cs * 7919ull;
    for (size_t i = 0; i < count; i++) {
        float f = ((float)(rnd() % 2000000) / 250000.0f) - 4.0f; /* non-round values */
        /* floats get a NaN now and then, at places that differ per rank: MAX and MIN keep
         * the accumulator, in vector bodies, scalar tails and the tiny paths alike */
        if (i % 61 == (size_t)rank * 7 % 61)
            f = __builtin_nanf("");
        switch (dt) {
        case LOCKSTEP_DTYPE_F32: ((float *)buf)[i] = f; break;
        case LOCKSTEP_DTYPE_I32: ((int32_t *)buf)[i] = (int32_t)rnd(); break;
        case LOCKSTEP_DTYPE_F16: ((uint16_t *)buf)[i] = test_half_from_float(f); break;
        case LOCKSTEP_DTYPE_BF16: { uint32_t u; memcpy(&u, &f, 4); ((uint16_t *)buf)[i] = (uint16_t)(u >> 16); break; }
        }
    }
}

TEST_UNTRACED static float widen(lockstep_dtype_t dt, const void *buf, size_t i)
{
    uint16_t h = ((const uint16_t *)buf)[i];
    if (dt == LOCKSTEP_DTYPE_F16)
        return test_half_to_float(h);
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

TEST_UNTRACED static uint16_t narrow(lockstep_dtype_t dt, float f)
{
    if (dt == LOCKSTEP_DTYPE_F16)
        return test_half_from_float(f);
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest even; the one NaN (0x7fc00000) stays */
    return (uint16_t)(u >> 16);
}

TEST_UNTRACED static float combine_f(lockstep_op_t op, float acc, float v)
{
    return op == LOCKSTEP_OP_SUM ? acc + v : op == LOCKSTEP_OP_MAX ? (v > acc ? v : acc) : (v < acc ? v : acc);
}

TEST_UNTRACED static int32_t combine_i(lockstep_op_t op, int32_t acc, int32_t v)
{
    return op == LOCKSTEP_OP_SUM ? (int32_t)((uint32_t)acc + (uint32_t)v) : op == LOCKSTEP_OP_MAX ? (v > acc ? v : acc) : (v < acc ? v : acc);
}

/* ref = op over ranks, in rank order, f16/bf16 accumulated in f32 */
TEST_UNTRACED static void reference(void *ref, lockstep_dtype_t dt, lockstep_op_t op, size_t count, int size, unsigned cs)
{
    size_t es = lockstep_dtype_size(dt);
    TEST_WRITES(ref, count * es);
    void *tmp = malloc(count * es + 1);
    float *acc = malloc(count * sizeof(float) + 1);
    CHECK(tmp && acc);
    for (int r = 0; r < size; r++) {
        fill(tmp, dt, count, r, cs);
        for (size_t i = 0; i < count; i++) {
            if (dt == LOCKSTEP_DTYPE_I32) {
                int32_t v = ((int32_t *)tmp)[i];
                ((int32_t *)ref)[i] = r ? combine_i(op, ((int32_t *)ref)[i], v) : v;
            } else {
                float v = dt == LOCKSTEP_DTYPE_F32 ? ((float *)tmp)[i] : widen(dt, tmp, i);
                acc[i] = r ? combine_f(op, acc[i], v) : v;
            }
        }
    }
    for (size_t i = 0; i < count && dt != LOCKSTEP_DTYPE_I32; i++) {
        if (dt == LOCKSTEP_DTYPE_F32)
            ((float *)ref)[i] = acc[i];
        else
            ((uint16_t *)ref)[i] = narrow(dt, acc[i]);
    }
    free(tmp);
    free(acc);
}

static int check_equal(const char *what, const void *got, const void *want, size_t bytes, int rank)
{
    if (memcmp(got, want, bytes) == 0)
        return 0;
    const unsigned char *g = got, *w = want;
    size_t i = 0;
    while (g[i] == w[i])
        i++;
    fprintf(stderr, "rank %d: %s differs from the reference at byte %zu of %zu\n", rank, what, i, bytes);
    return 1;
}

static int use_pool; /* argv[2] == "pool": large messages split across 2 threads */
/* argv[2] == "mixed": rank 1 stays out of the asymmetric fences and the kernel copies
 * (LOCKSTEP_NO_MEMBARRIER, LOCKSTEP_KERNEL_COPY=off), so every rank must keep the full
 * fences, and large calls go through the slots, the other ranks copying in late */
static int mixed;

TEST_UNTRACED static unsigned char gbyte(size_t i, int r, unsigned cs) /* not periodic in 4 KiB pages */
{
    return (unsigned char)(i * 13 + (i >> 12) * 37 + (size_t)r * 101 + cs * 7);
}

/* p[i] = gbyte(i, r, cs) for i < n */
TEST_UNTRACED static void put_bytes(unsigned char *p, size_t n, int r, unsigned cs)
{
    TEST_WRITES(p, n);
    for (size_t i = 0; i < n; i++)
        p[i] = gbyte(i, r, cs);
}

/* the first i < n where p[i] != gbyte(i, r, cs), or n */
TEST_UNTRACED static size_t first_wrong(const unsigned char *p, size_t n, int r, unsigned cs)
{
    TEST_READS(p, n);
    size_t i = 0;
    while (i < n && p[i] == gbyte(i, r, cs))
        i++;
    return i;
}

/* Broadcast and allgather with buffers in the shared buffer and not, in every mix:
 * everything in the buffer; only the root's buf (PULL's zero-copy broadcast); only the
 * receivers' (PUSH's, relayed from 1 MiB at 3 ranks or more); only sends (PULL's
 * zero-copy allgather), or only recvs (PUSH's); odd ranks in private memory (the
 * copying path).
 * Sizes either side of the small PUSH's zero-copy (576 KiB for all receivers: 4 ranks
 * from 192 KiB, 8 from 100003 B; there, only the root's buf in the buffer is the late
 * copy into the slots), of small_bytes (256 KiB) and of the relay's 1 MiB, at offsets
 * that differ per rank, every root, the four modes of a size in the four orders (the
 * relay follows the root's), with copying allreduces in between, which share the step
 * words and chunk slots. */
static int zero_copy_gather(lockstep_comm_t *c, int rank, int size, char *buf, size_t cap)
{
    static const size_t bsizes[] = {100003, 196607, 196608, 262144, 262145, 1000003, 1048576, 1310721};
    static const size_t gsizes[] = {1000, 65537, 300007};
    size_t most = 1310721 + 300007 * (size_t)(size + 1) + 4096;
    char *priv = malloc(most);
    int32_t v[3001];
    CHECK(priv != NULL);
    unsigned cs = 0;
    for (int xfer = LOCKSTEP_XFER_PULL; xfer <= LOCKSTEP_XFER_PUSH; xfer++)
        for (unsigned si = 0; si < sizeof bsizes / sizeof bsizes[0]; si++)
            for (int mode = 0; mode < 4; mode++, cs++) { /* 0 all, 1 root, 2 receivers, 3 even ranks */
                size_t n = bsizes[si];
                int root = (int)(cs % (unsigned)size);
                int in_buf = mode == 0 || (mode == 1 && rank == root) || (mode == 2 && rank != root) ||
                             (mode == 3 && rank % 2 == 0);
                unsigned char *b = (unsigned char *)(in_buf ? buf + 64 * (size_t)((rank * 7 + si) % 5) + (size_t)(rank % 3)
                                                            : priv + 1);
                CHECK(b + n <= (unsigned char *)buf + cap || !in_buf);
                if (rank == root)
                    put_bytes(b, n, root, cs);
                else
                    memset(b, 0xee, n); /* stale bytes must go */
                lockstep_order_t order = (lockstep_order_t)((cs + cs / 4) % 4);
                int rc = lockstep_comm_broadcast(c, b, n, root, order, (lockstep_xfer_t)xfer);
                if (rc) {
                    fprintf(stderr, "rank %d: broadcast n=%zu xfer=%d mode %d order %d: %s\n", rank, n, xfer, mode,
                            (int)order, lockstep_strerror(rc));
                    return 1;
                }
                size_t w = first_wrong(b, n, root, cs);
                if (w < n) {
                    fprintf(stderr, "rank %d: broadcast n=%zu xfer=%d mode %d order %d root %d: byte %zu wrong\n", rank,
                            n, xfer, mode, (int)order, root, w);
                    return 1;
                }
                /* past small_bytes, PULL with the root's buf in its buffer reads it there */
                if (size > 1 && xfer == LOCKSTEP_XFER_PULL && n > 262144 && mode <= 1)
                    CHECK_EQ(lockstep_comm_route(c), LOCKSTEP_ROUTE_ZERO_COPY);
                if (mode == 3) { /* the copying path between: it shares the step words */
                    for (int i = 0; i < 3001; i++)
                        v[i] = i + rank;
                    CHECK_EQ(lockstep_comm_allreduce(c, v, v, 3001, LOCKSTEP_DTYPE_I32, LOCKSTEP_OP_SUM), 0);
                    for (int i = 0; i < 3001; i++)
                        CHECK_EQ(v[i], size * i + size * (size - 1) / 2);
                }
            }
    for (int xfer = LOCKSTEP_XFER_PULL; xfer <= LOCKSTEP_XFER_PUSH; xfer++)
        for (unsigned si = 0; si < sizeof gsizes / sizeof gsizes[0]; si++)
            for (int mode = 0; mode < 5; mode++, cs++) { /* 0 all, 1 all in place, 2 sends, 3 recvs, 4 even ranks */
                size_t n = gsizes[si], total = n * (size_t)size;
                char *base = buf + 64 * (size_t)((rank * 3 + si) % 5) + (size_t)(rank % 3);
                int send_in = mode <= 2 || (mode == 4 && rank % 2 == 0);
                int recv_in = mode <= 1 || mode == 3 || (mode == 4 && rank % 2 == 0);
                unsigned char *recv = (unsigned char *)(recv_in ? base + n : priv + n + 3);
                unsigned char *send = mode == 1 ? recv + (size_t)rank * n : (unsigned char *)(send_in ? base : priv + 1);
                CHECK(base + n + total <= buf + cap);
                memset(recv, 0xcd, total);
                put_bytes(send, n, rank, cs);
                int rc = lockstep_comm_allgather(c, send, recv, n, LOCKSTEP_ORDER_RANDOM, (lockstep_xfer_t)xfer);
                if (rc) {
                    fprintf(stderr, "rank %d: allgather n=%zu xfer=%d mode %d: %s\n", rank, n, xfer, mode, lockstep_strerror(rc));
                    return 1;
                }
                for (int r = 0; r < size; r++) {
                    size_t w = first_wrong(recv + (size_t)r * n, n, r, cs);
                    if (w < n) {
                        fprintf(stderr, "rank %d: allgather n=%zu xfer=%d mode %d: block %d byte %zu wrong\n", rank, n,
                                xfer, mode, r, w);
                        return 1;
                    }
                }
                /* PULL blocks past small_bytes, every send in its buffer: read there */
                if (size > 1 && xfer == LOCKSTEP_XFER_PULL && n > 262144 && mode <= 2)
                    CHECK_EQ(lockstep_comm_route(c), LOCKSTEP_ROUTE_ZERO_COPY);
            }
    free(priv);
    return 0;
}

/* Zero-copy allreduces: send and recv in each rank's lockstep_comm_buffer, at offsets
 * that differ per rank, in place and out of place, every dtype and op; then calls where
 * only some ranks pass buffers (the copying path, chunk 0 without an early copy),
 * interleaved with zero-copy calls, copying calls and a chunked broadcast, which leave
 * different chunk slots busy. Results against the reference, digests across ranks. */
/* The block exchanges. Reduce-scatter in every mode (0 in place, recv = my block of
 * send; 1 out of place in private memory; 2 out of place in the buffer, zero-copy from
 * 1 KiB; 3 odd ranks in private memory, the rest in the buffer), every dtype and op,
 * counts per rank on the small path, across its switch and chunked (chunk_bytes
 * 64 KiB), against the allreduce reference's block; all-to-all in private memory, the
 * buffer and mixed; bad arguments; then a reduce-scatter after a chunked broadcast
 * (both slots busy) and before a chunked allreduce. */
static int exchange_checks(lockstep_comm_t *c, int rank, int size, char *buf, size_t cap)
{
    int bad = 0;
    unsigned cs = 7000;
    static const size_t counts[] = {0, 1, 7, 26, 300, 4097, 70001};
    for (int dt = LOCKSTEP_DTYPE_F32; dt <= LOCKSTEP_DTYPE_I32; dt++)
        for (int op = LOCKSTEP_OP_SUM; op <= LOCKSTEP_OP_MIN; op++)
            for (unsigned ci = 0; ci < sizeof counts / sizeof counts[0]; ci++, cs++)
                for (int mode = 0; mode < 4; mode++) {
                    size_t count = counts[ci], es = lockstep_dtype_size((lockstep_dtype_t)dt), bytes = count * es;
                    size_t total = bytes * (size_t)size;
                    int priv = mode == 1 || (mode == 3 && rank % 2 == 1);
                    char *mem = priv ? malloc(total + bytes + 64) : buf + 64 * (size_t)(rank % 3);
                    char *ref = malloc(total + 1);
                    CHECK(mem != NULL && ref != NULL);
                    CHECK(priv || mem + total + bytes <= buf + cap);
                    char *send = mem, *recv = mode == 0 ? send + (size_t)rank * bytes : send + total;
                    fill(send, (lockstep_dtype_t)dt, count * (size_t)size, rank, cs);
                    if (mode)
                        memset(recv, 0xa5, bytes); /* stale bytes must be overwritten */
                    reference(ref, (lockstep_dtype_t)dt, (lockstep_op_t)op, count * (size_t)size, size, cs);
                    int rc = lockstep_comm_reduce_scatter(c, send, recv, count, dt, op);
                    if (rc) {
                        fprintf(stderr, "rank %d: reduce_scatter dt=%d op=%d n=%zu mode %d: %s\n", rank, dt, op,
                                count, mode, lockstep_strerror(rc));
                        return 1;
                    }
                    /* (each rank its own block: no digest to compare across ranks) */
                    bad |= check_equal("reduce_scatter", recv, ref + (size_t)rank * bytes, bytes, rank);
                    if (priv)
                        free(mem);
                    free(ref);
                }
    /* all-to-all: privately, in the buffer (zero-copy from 1 KiB blocks), mixed; block
     * sizes on every path, 300001 chunked, odd; 32768 and 40001 at the kernel copy's
     * lower edge (LS_KCOPY_ALLTOALL), 300001 past its upper one while ranks fit the CPUs.
     * 300001 privately 3 times more (modes 3-5), after calls of other kinds. */
    static const size_t blocks[] = {0, 1, 13, 25, 100, 4097, 32768, 40001, 70001, 300001};
    for (unsigned bi = 0; bi < sizeof blocks / sizeof blocks[0]; bi++)
        for (int mode = 0; mode < (blocks[bi] == 300001 ? 6 : 3); mode++) {
            size_t bb = blocks[bi], total = bb * (size_t)size;
            int priv = mode == 0 || mode >= 3 || (mode == 2 && rank % 2 == 1);
            unsigned char *mem = priv ? malloc(2 * total + 1) : (unsigned char *)buf + 64 * (size_t)(rank % 3) + 1;
            CHECK(mem != NULL);
            CHECK(priv || (char *)mem + 2 * total <= buf + cap);
            unsigned char *send = mem, *recv = mem + total;
            for (int d = 0; d < size; d++) /* sender and receiver: one of 256 patterns */
                put_bytes(send + (size_t)d * bb, bb, rank * MAX_TEST_RANKS + d, 300 + bi);
            memset(recv, 0xa5, total);
            int rc = lockstep_comm_alltoall(c, send, recv, bb);
            if (rc) {
                fprintf(stderr, "rank %d: alltoall %zu bytes mode %d: %s\n", rank, bb, mode, lockstep_strerror(rc));
                return 1;
            }
            for (int k = 0; k < size; k++) {
                size_t w = first_wrong(recv + (size_t)k * bb, bb, k * MAX_TEST_RANKS + rank, 300 + bi);
                if (w < bb) {
                    fprintf(stderr, "rank %d: alltoall %zu bytes mode %d: rank %d's byte %zu wrong\n", rank, bb, mode,
                            k, w);
                    return 1;
                }
            }
            if (priv)
                free(mem);
        }
    unsigned char two[64];
    CHECK_EQ(lockstep_comm_alltoall(c, two, two + 1, 8), -EINVAL); /* overlap, in place included */
    CHECK_EQ(lockstep_comm_alltoall(c, two, two, 8), -EINVAL);
    CHECK_EQ(lockstep_comm_alltoall(c, NULL, two, 8), -EINVAL);
    CHECK_EQ(lockstep_comm_alltoall(NULL, two, two + 32, 1), -EINVAL);

    /* bad arguments: overlap other than in place, NULL, bad dtype */
    float v[16] = {0};
    CHECK_EQ(lockstep_comm_reduce_scatter(c, v, v + 1, 2, LOCKSTEP_DTYPE_F32, LOCKSTEP_OP_SUM), -EINVAL);
    CHECK_EQ(lockstep_comm_reduce_scatter(c, NULL, v, 1, LOCKSTEP_DTYPE_F32, LOCKSTEP_OP_SUM), -EINVAL);
    CHECK_EQ(lockstep_comm_reduce_scatter(c, v, v, 1, (lockstep_dtype_t)9, LOCKSTEP_OP_SUM), -EINVAL);
    CHECK_EQ(lockstep_comm_reduce_scatter(NULL, v, v, 1, LOCKSTEP_DTYPE_F32, LOCKSTEP_OP_SUM), -EINVAL);
    CHECK_EQ(lockstep_comm_reduce_scatter(c, v, v, SIZE_MAX / 2, LOCKSTEP_DTYPE_F32, LOCKSTEP_OP_SUM), -EINVAL);

    /* between a chunked broadcast and a chunked allreduce, i32 sums with known values */
    size_t n = 100003, bn = 300000;
    int32_t *in = malloc(n * 4 * (size_t)size), *out = malloc(n * 4), *ar = malloc(n * 4);
    unsigned char *bc = malloc(bn);
    CHECK(in && out && ar && bc);
    for (int round = 0; round < 4; round++) {
        if (rank == 0)
            put_bytes(bc, bn, 0, 400 + (unsigned)round);
        else
            memset(bc, 0, bn);
        CHECK_EQ(lockstep_comm_broadcast(c, bc, bn, 0, LOCKSTEP_ORDER_LINEAR, LOCKSTEP_XFER_PULL), 0);
        CHECK_EQ(first_wrong(bc, bn, 0, 400 + (unsigned)round), bn);
        for (size_t i = 0; i < n * (size_t)size; i++)
            in[i] = (int32_t)(i * (size_t)(rank + 1) + (size_t)round);
        CHECK_EQ(lockstep_comm_reduce_scatter(c, in, out, n, LOCKSTEP_DTYPE_I32, LOCKSTEP_OP_SUM), 0);
        for (size_t i = 0; i < n; i++) {
            size_t g = (size_t)rank * n + i; /* the element's place in send */
            CHECK_EQ(out[i], (int32_t)(g * (size_t)(size * (size + 1) / 2) + (size_t)(round * size)));
            ar[i] = (int32_t)(i + (size_t)rank);
        }
        CHECK_EQ(lockstep_comm_allreduce(c, ar, ar, n, LOCKSTEP_DTYPE_I32, LOCKSTEP_OP_SUM), 0);
        for (size_t i = 0; i < n; i++)
            CHECK_EQ(ar[i], (int32_t)(i * (size_t)size + (size_t)(size * (size - 1) / 2)));
    }
    free(in);
    free(out);
    free(ar);
    free(bc);
    return bad;
}

static int zero_copy(int rank, int size, const char *job, lockstep_pool_t *pool, int *di)
{
    size_t cap = (size_t)6 << 20;
    lockstep_comm_params_t p = harness_params(rank, size, job);
    snprintf(p.job, sizeof p.job, "%.*s-zc", (int)sizeof p.job - 4, job);
    p.buffer_bytes = cap - 100; /* rounded up to 4 KiB */
    p.chunk_bytes = 65536;      /* several chunks on the copying path */
    p.pool = pool;
    lockstep_comm_t *c = lockstep_comm_create(&p);
    CHECK(c != NULL);
    size_t got_bytes = 0;
    char *buf = lockstep_comm_buffer(c, &got_bytes);
    CHECK(buf != NULL);
    CHECK_EQ(got_bytes, cap);
    CHECK_EQ((uintptr_t)buf % 64, 0);
    struct shared_page *page = harness_page();
    int bad = 0;
    unsigned cs = 5000;
    /* 300: 600 or 1200 bytes, either side of the 1 KiB below which the small path
     * runs anyway; 1000: zero-copy instead of the small path; 4097 and up: instead of
     * the chunked path; 300007 is odd, and split unevenly between ranks */
    static const size_t counts[] = {300, 1000, 4097, 16387, 300007};
    for (int dt = LOCKSTEP_DTYPE_F32; dt <= LOCKSTEP_DTYPE_I32; dt++)
        for (int op = LOCKSTEP_OP_SUM; op <= LOCKSTEP_OP_MIN; op++)
            for (unsigned ci = 0; ci < sizeof counts / sizeof counts[0]; ci++, cs++)
                for (int mode = 0; mode < 3; mode++) { /* 0 in place, 1 out of place, 2 some ranks copy */
                    size_t count = counts[ci], es = lockstep_dtype_size((lockstep_dtype_t)dt), bytes = count * es;
                    char *send = buf + 64 * (size_t)((rank * 7 + ci) % 5) + es * (size_t)(rank % 3);
                    char *recv = mode == 0 ? send : send + bytes + 4096 * (size_t)rank;
                    char *priv = NULL, *ref = malloc(bytes);
                    CHECK(ref != NULL);
                    CHECK(recv + bytes <= buf + cap);
                    if (mode == 2 && rank % 2 == 1) { /* odd ranks: private memory */
                        priv = malloc(2 * bytes);
                        CHECK(priv != NULL);
                        send = priv;
                        recv = priv + bytes;
                    }
                    fill(send, (lockstep_dtype_t)dt, count, rank, cs);
                    memset(recv == send ? ref : recv, 0xa5, bytes); /* stale bytes must be overwritten */
                    reference(ref, (lockstep_dtype_t)dt, (lockstep_op_t)op, count, size, cs);
                    int rc = lockstep_comm_allreduce(c, send, recv, count, dt, op);
                    if (rc) {
                        fprintf(stderr, "rank %d: zero-copy allreduce dt=%d op=%d n=%zu mode %d: %s\n", rank, dt,
                                op, count, mode, lockstep_strerror(rc));
                        return 1;
                    }
                    bad |= check_equal(mode == 2 ? "allreduce, some ranks in the buffer" : "zero-copy allreduce",
                                       recv, ref, bytes, rank);
                    page->digest[rank][(*di)++ % 64] ^= digest(recv, bytes);
                    free(priv);
                    free(ref);
                }
    /* slot bookkeeping across paths: a chunked broadcast leaves both slots busy, a
     * copying allreduce one of them; zero-copy and mixed calls must keep every rank's
     * view of them alike */
    size_t n = 150001;
    int32_t *want = malloc(n * 4), *mine = malloc(n * 4);
    unsigned char *bc = malloc(200000);
    CHECK(want && mine && bc);
    for (int round = 0; round < 12; round++) {
        int kind = round % 4; /* 0 zero-copy, 1 mixed, 2 copying, 3 broadcast first */
        if (kind == 3) {
            if (rank == 0)
                put_bytes(bc, 200000, 0, 500 + (unsigned)round);
            else
                memset(bc, 0, 200000);
            CHECK_EQ(lockstep_comm_broadcast(c, bc, 200000, 0, LOCKSTEP_ORDER_LINEAR, LOCKSTEP_XFER_PULL), 0);
            size_t w = first_wrong(bc, 200000, 0, 500 + (unsigned)round);
            if (w < 200000) {
                fprintf(stderr, "rank %d: broadcast in round %d: byte %zu wrong\n", rank, round, w);
                return 1;
            }
        }
        int in_buf = kind == 0 || kind == 3 || (kind == 1 && rank % 2 == 0);
        int32_t *v = in_buf ? (int32_t *)(void *)(buf + 4096 * (size_t)(round % 3)) : mine;
        for (size_t i = 0; i < n; i++) {
            v[i] = (int32_t)(i * (size_t)(rank + 1) + (size_t)round);
            want[i] = (int32_t)(i * (size_t)(size * (size + 1) / 2) + (size_t)(round * size));
        }
        CHECK_EQ(lockstep_comm_allreduce(c, v, v, n, LOCKSTEP_DTYPE_I32, LOCKSTEP_OP_SUM), 0);
        if (memcmp(v, want, n * 4) != 0) {
            fprintf(stderr, "rank %d: round %d (kind %d) of mixed paths: wrong sum\n", rank, round, kind);
            return 1;
        }
    }
    free(bc);

    /* A chunked allgather leaves its last chunk's slot busy: when a rank returns, peers
     * may still be copying from it, so the next large allreduce must not write its
     * first chunk there before announcing. Odd ranks receive into pages they have just
     * dropped, so page faults keep them copying while even ranks go on. 5 chunks, the
     * last (in slot 0) nearly full. */
    size_t gb = 5 * p.chunk_bytes - 100;
    unsigned char *gsend = malloc(gb);
    unsigned char *grecv = mmap(NULL, gb * (size_t)size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(gsend != NULL && grecv != MAP_FAILED);
    for (unsigned round = 0; round < 6; round++) {
        put_bytes(gsend, gb, rank, cs + round);
        for (size_t i = 0; i < n; i++) { /* before the allgather: nothing between the calls */
            mine[i] = (int32_t)(i * (size_t)(rank + 1) + round);
            want[i] = (int32_t)(i * (size_t)(size * (size + 1) / 2) + round * (size_t)size);
        }
        if (rank % 2)
            CHECK_EQ(madvise(grecv, gb * (size_t)size, MADV_DONTNEED), 0);
        CHECK_EQ(lockstep_comm_allgather(c, gsend, grecv, gb, LOCKSTEP_ORDER_LINEAR, LOCKSTEP_XFER_PULL), 0);
        CHECK_EQ(lockstep_comm_allreduce(c, mine, mine, n, LOCKSTEP_DTYPE_I32, LOCKSTEP_OP_SUM), 0);
        CHECK(memcmp(mine, want, n * 4) == 0);
        for (int k = 0; k < size; k++) {
            size_t w = first_wrong(grecv + (size_t)k * gb, gb, k, cs + round);
            if (w < gb) {
                fprintf(stderr, "rank %d: allgather before an allreduce, round %u: rank %d's byte %zu wrong\n", rank,
                        round, k, w);
                return 1;
            }
        }
    }
    munmap(grecv, gb * (size_t)size);
    free(gsend);
    free(want);
    free(mine);

    bad |= zero_copy_gather(c, rank, size, buf, cap);
    bad |= exchange_checks(c, rank, size, buf, cap);

    /* a communicator without a buffer has none */
    errno = 0;
    CHECK(lockstep_comm_buffer(NULL, NULL) == NULL && errno == EINVAL);
    lockstep_comm_free(c);
    return bad;
}

static int body(int rank, int size, const char *job)
{
    lockstep_comm_t *c;
    lockstep_pool_t *pool = NULL;
    if (mixed && rank == 1) {
        CHECK_EQ(setenv("LOCKSTEP_NO_MEMBARRIER", "1", 1), 0);
        CHECK_EQ(setenv("LOCKSTEP_KERNEL_COPY", "off", 1), 0);
    }
    if (use_pool) {
        lockstep_pool_params_t pp = lockstep_pool_params_default();
        pp.n_threads = 2;
        pool = lockstep_pool_create(&pp);
        CHECK(pool != NULL);
        lockstep_comm_params_t p = harness_params(rank, size, job);
        p.pool = pool;
        c = lockstep_comm_create(&p);
    } else {
        c = harness_comm(rank, size, job, 60000);
    }
    if (!c)
        return 1;
    CHECK_EQ(lockstep_comm_rank(c), rank);
    CHECK_EQ(lockstep_comm_size(c), size);
    struct shared_page *page = harness_page();
    int bad = 0, di = 0;
    unsigned cs = 0;
    /* 25/26 (4-byte types) and 50/51 (2-byte): either side of the 100-byte payload that
     * rides in the announcement; 16387 f32 = just over the 64 KiB small slot; 300007 =
     * chunked, odd; with LOCKSTEP_KERNEL_COPY=wide between ranks that fit the CPUs,
     * 300007 4-byte elements by kernel copy (from 256 KiB), 2-byte ones through the
     * slots (below 512 KiB) */
    static const size_t counts[] = {0, 1, 7, 25, 26, 50, 51, 1000, 16383, 16387, 300007, 70001};
    for (int dt = LOCKSTEP_DTYPE_F32; dt <= LOCKSTEP_DTYPE_I32; dt++)
        for (int op = LOCKSTEP_OP_SUM; op <= LOCKSTEP_OP_MIN; op++)
            for (unsigned ci = 0; ci < sizeof counts / sizeof counts[0]; ci++, cs++) {
                size_t count = counts[ci], es = lockstep_dtype_size((lockstep_dtype_t)dt);
                char *send = malloc(count * es + 1), *recv = malloc(count * es + 1), *ref = malloc(count * es + 1);
                CHECK(send && recv && ref);
                fill(send, (lockstep_dtype_t)dt, count, rank, cs);
                reference(ref, (lockstep_dtype_t)dt, (lockstep_op_t)op, count, size, cs);
                int in_place = ci & 1;
                int rc = in_place ? lockstep_comm_allreduce(c, send, send, count, dt, op)
                                  : lockstep_comm_allreduce(c, send, recv, count, dt, op);
                if (rc) {
                    fprintf(stderr, "rank %d: allreduce dt=%d op=%d n=%zu: %s\n", rank, dt, op, count, lockstep_strerror(rc));
                    return 1;
                }
                const char *got = in_place ? send : recv;
                bad |= check_equal("allreduce", got, ref, count * es, rank);
                page->digest[rank][di++ % 64] ^= digest(got, count * es);
                free(send);
                free(recv);
                free(ref);
            }
    if (size == 1) { /* alone, a call is the identity: bits kept, even a signalling NaN's,
                      * which any reduction (f16 widened to f32) would quiet */
        uint16_t h[3] = {0x7d01, 0x3c00, 0xfc00}, o[3] = {0, 0, 0};
        CHECK_EQ(lockstep_comm_allreduce(c, h, o, 3, LOCKSTEP_DTYPE_F16, LOCKSTEP_OP_MAX), 0);
        CHECK(memcmp(o, h, sizeof h) == 0);
        CHECK_EQ(lockstep_comm_allreduce(c, h, h, 3, LOCKSTEP_DTYPE_BF16, LOCKSTEP_OP_SUM), 0);
        CHECK(h[0] == 0x7d01 && h[1] == 0x3c00 && h[2] == 0xfc00);
    }
    if (size <= 4) { /* one 64 MiB f32 sum (16 Mi elements); bounded for oversubscribed runs */
        size_t count = (size_t)16 << 20;
        float *buf = malloc(count * 4), *ref = malloc(count * 4);
        CHECK(buf && ref);
        fill(buf, LOCKSTEP_DTYPE_F32, count, rank, 999);
        reference(ref, LOCKSTEP_DTYPE_F32, LOCKSTEP_OP_SUM, count, size, 999);
        CHECK_EQ(lockstep_comm_allreduce(c, buf, buf, count, LOCKSTEP_DTYPE_F32, LOCKSTEP_OP_SUM), 0);
        bad |= check_equal("64 MiB allreduce", buf, ref, count * 4, rank);
        page->digest[rank][63] = digest(buf, count * 4);
        free(buf);
        free(ref);
    }

    /* broadcast and allgather: every order, push and pull, small and chunked */
    /* up to 100 B (LS_INLINE_BYTES) in the announcement, 64 B on its second line alone;
     * 256 KiB: the switch; within LS_KCOPY_ALLGATHER_PUSH's window (262145) a PUSH
     * allgather moves blocks by kernel copy, in place (odd index) and not, and so does
     * a broadcast between 2 ranks from 64 KiB to 512 KiB (65536, 131075 and 262144 on
     * the small path, 524288 past it); past the windows (1048576, 2621441) only with
     * LOCKSTEP_KERNEL_COPY=wide; 40001 just below the broadcast's window */
    static const size_t sizes[] = {0,      1,      13,     64,      100,     101,    65536,
                                   131075, 262144, 262145, 524288, 2621441, 1048576, 40001};
    for (int order = 0; order <= LOCKSTEP_ORDER_TOPOLOGY; order++)
        for (int xfer = 0; xfer <= LOCKSTEP_XFER_PUSH; xfer++)
            for (unsigned si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
                size_t n = sizes[si];
                int root = (int)(si + (unsigned)order) % size;
                unsigned char *buf = malloc(n + 1), *want = malloc(n + 1);
                CHECK(buf && want);
                put_bytes(want, n, order, 100 + si); /* not periodic in pieces */
                if (rank == root)
                    memcpy(buf, want, n);
                else
                    memset(buf, 0xee, n);
                CHECK_EQ(lockstep_comm_broadcast(c, buf, n, root, order, xfer), 0);
                bad |= check_equal("broadcast", buf, want, n, rank);

                unsigned char *all = malloc((size_t)size * n + 1), *mine = malloc(n + 1);
                CHECK(all && mine);
                put_bytes(mine, n, rank, 200 + si);
                memset(all, 0xcd, (size_t)size * n);
                int in_place = si & 1;
                if (in_place)
                    memcpy(all + (size_t)rank * n, mine, n);
                CHECK_EQ(lockstep_comm_allgather(c, in_place ? all + (size_t)rank * n : mine, all, n, order, xfer), 0);
                for (int r = 0; r < size; r++) {
                    size_t w = first_wrong(all + (size_t)r * n, n, r, 200 + si);
                    if (w < n) {
                        fprintf(stderr, "rank %d: allgather order=%d xfer=%d n=%zu: block %d byte %zu wrong\n", rank,
                                order, xfer, n, r, w);
                        return 1;
                    }
                }
                free(all);
                free(mine);
                free(buf);
                free(want);
            }
    /* The tightest broadcast ring (4 KiB chunks: two pieces), every root, both
     * transfers, calls back to back and mixed with chunked allreduces, which share the
     * step words: the root refills the ring while receivers still read it. */
    lockstep_comm_params_t tp = lockstep_comm_params_default();
    snprintf(tp.job, sizeof tp.job, "%.*s-t", (int)sizeof tp.job - 3, job);
    tp.rank = rank;
    tp.size = size;
    tp.small_bytes = 256;
    tp.chunk_bytes = 4096;
    lockstep_comm_t *t = lockstep_comm_create(&tp);
    CHECK(t != NULL);
    size_t tn = 100003; /* 25 pieces */
    unsigned char *tw = malloc(tn);
    int32_t tv[3001], tr[3001];
    CHECK(tw != NULL);
    for (int round = 0; round < 2 * size; round++) {
        int root = round % size;
        lockstep_xfer_t xfer = round / size ? LOCKSTEP_XFER_PUSH : LOCKSTEP_XFER_PULL;
        put_bytes(tw, tn, round, 600); /* differs per piece */
        /* receivers copy into fresh pages, a fault per piece, so the root runs ahead
         * and must wait for them before it reuses a piece */
        unsigned char *tb = mmap(NULL, tn, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        CHECK(tb != MAP_FAILED);
        if (rank == root)
            memcpy(tb, tw, tn);
        CHECK_EQ(lockstep_comm_broadcast(t, tb, tn, root, LOCKSTEP_ORDER_ROTATED, xfer), 0);
        bad |= check_equal("broadcast through a 2-piece ring", tb, tw, tn, rank);
        munmap(tb, tn);
        if (round & 1) {
            for (int i = 0; i < 3001; i++)
                tv[i] = i + rank * round;
            CHECK_EQ(lockstep_comm_allreduce(t, tv, tr, 3001, LOCKSTEP_DTYPE_I32, LOCKSTEP_OP_SUM), 0);
            for (int i = 0; i < 3001; i++)
                if (tr[i] != size * i + round * size * (size - 1) / 2) {
                    fprintf(stderr, "rank %d: allreduce after a broadcast: element %d is %d\n", rank, i, (int)tr[i]);
                    return 1;
                }
        }
    }
    free(tw);
    lockstep_comm_free(t);

    bad |= zero_copy(rank, size, job, pool, &di);
    size_t none = 1;
    errno = 0;
    CHECK(lockstep_comm_buffer(c, &none) == NULL && errno == ENOENT && none == 0);

    for (int i = 0; i < 50; i++)
        CHECK_EQ(lockstep_comm_barrier(c), 0);
    lockstep_comm_free(c);
    lockstep_pool_free(pool);
    return bad;
}

/* 1 when p[0 .. size - 2] holds every rank but me once */
static int others_once(const int *p, int size, int me)
{
    int seen[MAX_TEST_RANKS] = {0};
    for (int i = 0; i < size - 1; i++) {
        if (p[i] < 0 || p[i] >= size || p[i] == me || seen[p[i]])
            return 0;
        seen[p[i]] = 1;
    }
    return 1;
}

/* lockstep_comm_peers: LINEAR and ROTATED exactly; RANDOM a permutation that changes
 * from draw to draw; TOPOLOGY with every rank pinned to CPU rank % n of the n this
 * process may use: the ranks on my CPU first, in rotated order, then the others (in
 * rotated order too when there are only two CPUs, as all of them are equally far). */
static int peers_body(int rank, int size, const char *job)
{
    cpu_set_t allowed, one;
    CHECK_EQ(sched_getaffinity(0, sizeof allowed, &allowed), 0);
    int cpus[CPU_SETSIZE], ncpu = 0;
    for (int i = 0; i < CPU_SETSIZE; i++)
        if (CPU_ISSET(i, &allowed))
            cpus[ncpu++] = i;
    CHECK(ncpu > 0);
    CPU_ZERO(&one);
    CPU_SET(cpus[rank % ncpu], &one);
    CHECK_EQ(sched_setaffinity(0, sizeof one, &one), 0);
    lockstep_comm_t *c = harness_comm(rank, size, job, 60000);
    CHECK(c != NULL);
    int p[MAX_TEST_RANKS], first[MAX_TEST_RANKS], n = 0;
    CHECK_EQ(lockstep_comm_peers(NULL, LOCKSTEP_ORDER_LINEAR, p), -EINVAL);
    CHECK_EQ(lockstep_comm_peers(c, LOCKSTEP_ORDER_LINEAR, NULL), -EINVAL);
    CHECK_EQ(lockstep_comm_peers(c, (lockstep_order_t)4, p), -EINVAL);

    CHECK_EQ(lockstep_comm_peers(c, LOCKSTEP_ORDER_LINEAR, p), 0);
    for (int r = 0; r < size; r++)
        if (r != rank)
            CHECK_EQ(p[n++], r);
    CHECK_EQ(lockstep_comm_peers(c, LOCKSTEP_ORDER_ROTATED, p), 0);
    for (int i = 0; i < size - 1; i++)
        CHECK_EQ(p[i], (rank + 1 + i) % size);

    int changed = 0;
    CHECK_EQ(lockstep_comm_peers(c, LOCKSTEP_ORDER_RANDOM, first), 0);
    CHECK(others_once(first, size, rank));
    for (int d = 0; d < 20; d++) {
        CHECK_EQ(lockstep_comm_peers(c, LOCKSTEP_ORDER_RANDOM, p), 0);
        CHECK(others_once(p, size, rank));
        changed |= memcmp(p, first, sizeof(int) * (size_t)(size - 1)) != 0;
    }
    CHECK(changed || size < 3);

    CHECK_EQ(lockstep_comm_peers(c, LOCKSTEP_ORDER_TOPOLOGY, p), 0);
    CHECK(others_once(p, size, rank));
    int want[MAX_TEST_RANKS];
    n = 0;
    for (int pass = 0; pass < 2; pass++) /* my CPU's ranks, then the rest, each rotated */
        for (int i = 1; i < size; i++) {
            int r = (rank + i) % size;
            if ((r % ncpu == rank % ncpu) == (pass == 0))
                want[n++] = r;
        }
    int same = 0;
    while (same < size - 1 && want[same] % ncpu == rank % ncpu)
        same++;
    for (int i = 0; i < (ncpu <= 2 ? size - 1 : same); i++)
        if (p[i] != want[i]) {
            fprintf(stderr, "rank %d (CPU %d of %d): topology order has rank %d at %d, not %d\n", rank,
                    cpus[rank % ncpu], ncpu, p[i], i, want[i]);
            return 1;
        }
    CHECK_EQ(lockstep_comm_barrier(c), 0);
    lockstep_comm_free(c);
    return 0;
}

int main(int argc, char **argv)
{
    int size = argc > 1 ? atoi(argv[1]) : 2;
    use_pool = argc > 2 && strcmp(argv[2], "pool") == 0;
    mixed = argc > 2 && strcmp(argv[2], "mixed") == 0;
    CHECK(size >= 1 && size <= MAX_TEST_RANKS);
    watchdog(900);
    char job[96];
    harness_job(job, sizeof job, "coll");
    if (argc > 2 && strcmp(argv[2], "peers") == 0) {
        CHECK_EQ(harness_run(peers_body, size, job, 120, 0), 0);
        CHECK_EQ(shm_entries_with(job), 0);
        return 0;
    }
    CHECK_EQ(harness_run(body, size, job, 850, 0), 0);
    struct shared_page *page = harness_page();
    for (int r = 1; r < size; r++)
        for (int i = 0; i < 64; i++)
            if (page->digest[r][i] != page->digest[0][i]) {
                fprintf(stderr, "rank %d's results differ from rank 0's (digest %d)\n", r, i);
                return 1;
            }
    CHECK_EQ(shm_entries_with(job), 0);
    return 0;
}
