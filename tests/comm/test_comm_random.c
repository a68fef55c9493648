/* Random sequences of every collective, against the contracts in comm.h, at N ranks:
 *
 *   test_comm_random N SEED CALLS [kill|cancel]
 *
 * Every rank draws the same sequence from SEED: the communicator's settings (slot,
 * chunk and small-path sizes, eager broadcasts, a shared buffer, a pool), then CALLS
 * calls of random kind, dtype, op, root, transfer and size, the sizes weighted to the
 * switch points between paths. Each rank places its own buffers (private memory or its
 * shared buffer, at any element offset, in place or not) and picks its own order, so
 * consecutive calls cross from path to path in every combination.
 *
 * Now and then one rank is the odd one out:
 *   - it refuses (invalid arguments, or lockstep_comm_refuse): it gets -EINVAL (0
 *     from lockstep_comm_refuse), every other rank -LOCKSTEP_EPEERINVAL, nothing
 *     changes anywhere, and the next call runs as usual; or every rank passes the
 *     invalid arguments and every rank gets -EINVAL;
 *   - its call disagrees (count, dtype, op, root, transfer, or another collective):
 *     every rank gets -LOCKSTEP_EMISMATCH, with its buffers untouched, and so does its
 *     next call; then every rank frees the communicator and makes a new one.
 *
 * After every call each rank checks the result element by element against a
 * reference computed here (values are small integers, so every dtype holds every sum
 * exactly), that sends are unchanged, and that the 64 bytes either side of every
 * buffer are untouched. Ranks come late now and then (up to 3 ms), so that peers
 * wait in every way. A deadline of 30 s under a watchdog: a refusal or mismatch
 * that waited for the deadline fails the test.
 *
 * With "kill", one communicator runs the sequence without mismatches, and one rank
 * SIGKILLs itself up to 2 ms into a call drawn from SEED (in it, or in one of the
 * next): from that call on, each survivor's calls return as before or
 * -LOCKSTEP_EPEERDIED (recv's contents then open, its guards not), and once one has,
 * so does every later call; no segment is left. With "cancel", the same, but that rank's
 * params.cancel says yes from that call on (the others come 15 ms late to it, so that
 * it waits): each rank's calls return as before or -ECANCELED, and once one has, so
 * does every later call. Then every rank makes barriers, the others 20 ms late to
 * each, until the cancel ends one (it must within 200): every rank gets -ECANCELED
 * there, and in every call after.
 *
 * Built with RANDOM_MPI (test_comm_random_mpi), the same sequences run through
 * lockstep/comm_mpi.h under mpiexec, over groups of ranks standing in for nodes:
 *
 *   mpiexec -n N test_comm_random_mpi RANKS_PER_NODE SEED CALLS [consecutive]
 *
 * with params.check_calls, each communicator drawing a piece size too. Calls have no
 * order or transfer there, nor refuse. With more than one node a refusal breaks the
 * communicator (every rank then makes a new one) and leaves the recv of the ranks
 * that did not refuse open, as a mismatch leaves every rank's. */
#include "comm_harness.h"
#include "../common/half.h"
#ifdef RANDOM_MPI
#include "lockstep/comm_mpi.h"
typedef lockstep_mpi_comm_t comm_t;
#else
typedef lockstep_comm_t comm_t;
#endif

#include <inttypes.h>
#include <pthread.h>
#include <signal.h>

enum { GUARD = 64, MAX_BYTES = 3 << 20 }; /* guard bytes around buffers; largest buffer */

static uint64_t g_seed;
static int g_calls;
/* kill mode: rank g_victim kills itself, from a thread, up to 2 ms after it starts its
 * call number g_death; with g_cancel, its params.cancel says yes from that call on
 * (g_cancelling) instead. Either way: one communicator, no mismatches. */
static int g_kill, g_cancel, g_victim, g_death;
static int g_cancelling;

static int cancel_asked(void *arg)
{
    (void)arg;
    return __atomic_load_n(&g_cancelling, __ATOMIC_RELAXED);
}
#ifdef RANDOM_MPI
static int g_rpn, g_cons; /* ranks_per_node (0: one node) and consecutive */
#endif

/* The node rank r is in (lockstep/comm_mpi.h's layout of ranks_per_node; one node
 * without RANDOM_MPI) */
static int node_of(int r, int size)
{
#ifdef RANDOM_MPI
    if (g_rpn > 0)
        return g_cons ? r / g_rpn : r % ((size + g_rpn - 1) / g_rpn);
#endif
    (void)r;
    (void)size;
    return 0;
}

static int several_nodes(int size)
{
    for (int r = 1; r < size; r++)
        if (node_of(r, size) != 0)
            return 1;
    return 0;
}

/* ---- the shared sequence ---------------------------------------------------------- */

static uint64_t mix(uint64_t x) /* splitmix64's finaliser */
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

struct rng {
    uint64_t s;
};

static uint64_t draw(struct rng *r)
{
    r->s = mix(r->s);
    return r->s;
}

static size_t below(struct rng *r, size_t n) /* 0 .. n-1; 0 when n is 0 */
{
    return n ? (size_t)(draw(r) % n) : 0;
}

static struct rng rng_for(uint64_t seed, uint64_t a, uint64_t b)
{
    struct rng r = {mix(seed ^ mix(a * 0x100000001b3ull ^ mix(b)))};
    return r;
}

enum kind { K_ALLREDUCE, K_REDUCE_SCATTER, K_ALLTOALL, K_BROADCAST, K_ALLGATHER, K_BARRIER };
static const char *const kind_name[] = {"allreduce", "reduce_scatter", "alltoall", "broadcast", "allgather",
                                        "barrier"};
enum fault { F_NONE, F_REFUSE, F_REFUSE_ALL, F_MISMATCH };

struct setting { /* one communicator's, the same on every rank */
    size_t small, chunk, ar_small, eager, buffer, piece; /* piece: RANDOM_MPI's piece_bytes */
    int pool, sharers, passive;
    int calls; /* then a new communicator, unless a mismatch broke this one first */
};

struct call { /* one call as every rank knows it */
    int kind;
    lockstep_dtype_t dt;
    lockstep_op_t op;
    size_t n;  /* elements (allreduce: of the message; reduce-scatter: of one rank's
                  part) or bytes (broadcast; allgather's and all-to-all's blocks) */
    int root;
    lockstep_xfer_t xfer;
    int fault, odd, how; /* the odd rank, and what it does */
};

static size_t elem_size(const struct call *k) /* of n's unit */
{
    return k->kind <= K_REDUCE_SCATTER ? lockstep_dtype_size(k->dt) : 1;
}

/* the larger of the call's send and recv, in bytes */
static size_t call_bytes(const struct call *k, int size)
{
    size_t blocks = k->kind == K_ALLREDUCE || k->kind == K_BROADCAST ? 1 : (size_t)size;
    return k->n * elem_size(k) * blocks;
}

static size_t pick_bytes(struct rng *r, const struct setting *s, int size)
{
    size_t x;
    switch (below(r, 10)) {
    case 0: case 1: case 2: case 3: /* tiny */
        x = below(r, 520);
        break;
    case 4: case 5: /* up to 64 KiB, spread over the powers of two */
        x = (size_t)1 << (9 + below(r, 8));
        x += below(r, x);
        break;
    case 6: case 7: { /* a switch point, give or take a little */
        size_t others = size > 1 ? (size_t)size - 1 : 1;
        size_t points[] = {s->small, s->chunk, s->ar_small ? s->ar_small : 8192, 32768 / others,
                           s->eager ? s->eager : 1024, 8192, 32768, 65536, 131072, 262144, 524288, 1u << 20,
                           2u << 20, 589824 / others, 512};
        x = points[below(r, sizeof points / sizeof *points)];
        size_t d = (size_t[]){0, 1, 2, 4, 64}[below(r, 5)];
        x = below(r, 2) ? x + d : (x > d ? x - d : 0);
        break;
    }
    default: /* large */
        x = (size_t)1 << (16 + below(r, 6));
        x += below(r, x);
        break;
    }
    return x;
}

static struct setting pick_setting(uint64_t seed, int gen, int size)
{
    struct rng r = rng_for(seed, 0xc0ffee, (uint64_t)gen);
    struct setting s;
    s.small = (size_t[]){256, 4096, 65536, 262144}[below(&r, 4)];
    s.chunk = (size_t[]){4096, 65536, 1u << 20}[below(&r, 3)];
    s.ar_small = (size_t[]){0, 0, 256, 2048, 65536}[below(&r, 5)];
    s.eager = (size_t[]){0, 0, 1024, 65536}[below(&r, 4)];
    s.buffer = below(&r, 2) ? (size_t)16 << 20 : 0;
    s.pool = below(&r, 4) == 0;
    s.sharers = below(&r, 4) == 0 ? 2 * size : 0; /* as if other jobs kept the CPUs busy */
    s.passive = below(&r, 4) == 0;
    /* then a new communicator; not in kill mode, where it would wait for the dead rank */
    s.calls = g_kill ? g_calls : 20 + (int)below(&r, 60);
    s.piece = (size_t[]){0, 0, 4096, 65536, 1000003}[below(&r, 5)];
    return s;
}

static struct call pick_call(uint64_t seed, int gen, int i, const struct setting *s, int size)
{
    struct rng r = rng_for(seed, (uint64_t)gen << 32 | 1u, (uint64_t)i);
    struct call k;
    memset(&k, 0, sizeof k);
    static const int weights[] = {K_ALLREDUCE, K_ALLREDUCE, K_ALLREDUCE, K_REDUCE_SCATTER, K_ALLTOALL,
                                  K_BROADCAST, K_BROADCAST, K_ALLGATHER, K_ALLGATHER, K_BARRIER};
    k.kind = weights[below(&r, sizeof weights / sizeof *weights)];
    k.dt = (lockstep_dtype_t)below(&r, 4);
    k.op = (lockstep_op_t)below(&r, 3);
    k.root = (int)below(&r, (size_t)size);
    k.xfer = (lockstep_xfer_t)below(&r, 2);
    k.n = pick_bytes(&r, s, size) / elem_size(&k);
    if (call_bytes(&k, size) > MAX_BYTES)
        k.n = MAX_BYTES / (call_bytes(&k, size) / k.n);
    if (k.kind == K_BARRIER)
        k.n = 0;
    /* an eager broadcast: no faults (its root learns nothing in the call) */
    int eager = k.kind == K_BROADCAST && s->eager && k.n <= s->eager;
    size_t f = below(&r, 100);
    if (size > 1 && !eager && f < 7) {
        k.fault = F_REFUSE;
        k.odd = (int)below(&r, (size_t)size);
        k.how = (int)below(&r, 2); /* 0: invalid arguments, 1: lockstep_comm_refuse */
#ifdef RANDOM_MPI
        k.how = 0; /* (no refuse there) */
#endif
    } else if (size > 1 && !eager && !g_kill && f < 9) { /* kill: one communicator throughout */
        k.fault = F_MISMATCH;
        k.odd = (int)below(&r, (size_t)size);
        k.how = (int)below(&r, 4);
    } else if (k.kind != K_BARRIER && f < 11) {
        k.fault = F_REFUSE_ALL;
    }
    if (k.kind == K_ALLTOALL && k.n == 0) { /* its invalid form (overlap) needs a block */
        if (k.fault == F_REFUSE)
            k.how = 1;
        if (k.fault == F_REFUSE_ALL)
            k.fault = F_NONE;
    }
    return k;
}

/* What the odd rank calls instead, for a mismatch: the same call, changed. Returns 0
 * when nothing can be changed for this call (then there is no fault). */
static int mismatched(struct call *k, const struct setting *s, int size)
{
    switch (k->how) {
    case 0: /* another count: twice as many (one for none), or one more where that is too many */
        if (k->kind == K_BARRIER)
            return 0;
        k->n = k->n ? k->n * 2 : 1;
        if (call_bytes(k, size) > MAX_BYTES)
            k->n = k->n / 2 + 1;
        break;
    case 1: /* another dtype or op (reductions), root (broadcast), transfer (allgather) */
        if (k->kind == K_ALLREDUCE || k->kind == K_REDUCE_SCATTER)
            k->op = (lockstep_op_t)((k->op + 1) % 3);
        else if (k->kind == K_BROADCAST && size > 1)
            k->root = (k->root + 1) % size;
        else if (k->kind == K_ALLGATHER)
            k->xfer = (lockstep_xfer_t)!k->xfer;
        else
            return 0;
        break;
    case 2: /* another dtype of the same size: f32 and i32, f16 and bf16 swap */
        if (k->kind != K_ALLREDUCE && k->kind != K_REDUCE_SCATTER)
            return 0;
        k->dt = (lockstep_dtype_t[]){LOCKSTEP_DTYPE_I32, LOCKSTEP_DTYPE_BF16, LOCKSTEP_DTYPE_F16, LOCKSTEP_DTYPE_F32}[k->dt];
        break;
    default: /* a barrier instead, or an allreduce instead of a barrier */
        if (k->kind == K_BARRIER) {
            k->kind = K_ALLREDUCE;
            k->n = 4;
            k->dt = LOCKSTEP_DTYPE_F32;
        } else {
            k->kind = K_BARRIER;
        }
        break;
    }
    /* the changed call must not be an eager broadcast either */
    return !(k->kind == K_BROADCAST && s->eager && k->n <= s->eager);
}

/* Whether call k's fault can be made (changed: the odd rank's call in a mismatch);
 * always without RANDOM_MPI. There, an all-to-all's and a gather's invalid forms need
 * a block, and calls have no transfer to differ in. */
static int fault_defined(const struct call *k, const struct call *changed)
{
#ifdef RANDOM_MPI
    if (k->fault != F_MISMATCH && k->n == 0 && (k->kind == K_ALLGATHER || k->kind == K_ALLTOALL))
        return 0;
    return !(k->fault == F_MISMATCH && changed->xfer != k->xfer); /* (there is none to differ) */
#else
    (void)k;
    (void)changed;
    return 1;
#endif
}

/* ---- values ----------------------------------------------------------------------- */

static int value(int call, int rank, size_t i) /* -11 .. 11: every sum of 8 is exact in bf16 */
{
    return (int)((i * 7 + (i >> 10) * 3 + (size_t)call * 13 + (size_t)rank * 29) % 23) - 11;
}

static unsigned char byte(int call, int rank, size_t i) /* not periodic in 4 KiB */
{
    return (unsigned char)(i * 131 + (i >> 12) * 7 + (size_t)call * 17 + (size_t)rank * 101);
}

static void put(lockstep_dtype_t dt, void *buf, size_t i, int v)
{
    switch (dt) {
    case LOCKSTEP_DTYPE_F32: ((float *)buf)[i] = (float)v; break;
    case LOCKSTEP_DTYPE_I32: ((int32_t *)buf)[i] = v; break;
    case LOCKSTEP_DTYPE_F16: ((uint16_t *)buf)[i] = test_half_from_float((float)v); break;
    case LOCKSTEP_DTYPE_BF16: {
        float f = (float)v;
        uint32_t u;
        memcpy(&u, &f, 4);
        ((uint16_t *)buf)[i] = (uint16_t)(u >> 16); /* exact: small integers */
        break;
    }
    }
}

static int reduced(lockstep_op_t op, int call, int size, size_t i)
{
    int acc = value(call, 0, i);
    for (int r = 1; r < size; r++) {
        int v = value(call, r, i);
        acc = op == LOCKSTEP_OP_SUM ? acc + v : op == LOCKSTEP_OP_MAX ? (v > acc ? v : acc) : (v < acc ? v : acc);
    }
    return acc;
}

/* ---- one rank's memory ------------------------------------------------------------ */

/* A call's memory is one or two areas, each with GUARD bytes either side: R holds recv
 * (and send, in place), S a separate send. A call may change R's recv part only: the
 * rest of R (an in-place reduce-scatter's other parts), S and every guard must stay
 * as they were; a failed call must leave everything as it was. */
struct place {
    unsigned char *r, *s; /* the areas; s NULL without a separate send */
    size_t r_bytes, s_bytes;
    unsigned char *send, *recv; /* what the call passes */
    size_t recv_bytes;
    lockstep_order_t order;
};

struct mem {
    unsigned char *heap_r, *heap_s; /* MAX_BYTES + room for offsets and guards each */
    unsigned char *shared;          /* the communicator's buffer, or NULL */
    size_t shared_bytes;
    unsigned char *before_r, *before_s, *want; /* snapshots of the areas, guards included */
};

static struct place place_call(const struct call *k, struct mem *m, uint64_t seed, int gen, int i, int rank, int size)
{
    struct rng r = rng_for(seed, ((uint64_t)gen << 32) | 2u, ((uint64_t)i << 8) | (unsigned)rank);
    struct place p;
    memset(&p, 0, sizeof p);
    size_t es = elem_size(k), z = (size_t)size, send_bytes = 0;
    switch (k->kind) {
    case K_ALLREDUCE: send_bytes = p.recv_bytes = k->n * es; break;
    case K_REDUCE_SCATTER: send_bytes = k->n * es * z; p.recv_bytes = k->n * es; break;
    case K_ALLTOALL: send_bytes = p.recv_bytes = k->n * z; break;
    case K_BROADCAST: p.recv_bytes = k->n; break; /* buf */
    case K_ALLGATHER: send_bytes = k->n; p.recv_bytes = k->n * z; break;
    default: break;
    }
    p.order = (lockstep_order_t)below(&r, 4);
    int in_place = (k->kind == K_ALLREDUCE || k->kind == K_REDUCE_SCATTER || k->kind == K_ALLGATHER) &&
                   below(&r, 3) == 0;
    int shared = m->shared && below(&r, 3) != 0;
    size_t off_r = below(&r, 64) * es, off_s = below(&r, 64) * es;
    p.r = (shared ? m->shared : m->heap_r) + GUARD + off_r;
    p.s = (shared ? m->shared + m->shared_bytes / 2 : m->heap_s) + GUARD + off_s;
    p.recv = p.r;
    p.r_bytes = p.recv_bytes;
    p.s_bytes = send_bytes;
    p.send = p.s;
    if (in_place) {
        p.s = NULL;
        p.s_bytes = 0;
        if (k->kind == K_ALLREDUCE) {
            p.send = p.r;
        } else if (k->kind == K_REDUCE_SCATTER) { /* R is the whole send; recv its part rank */
            p.r_bytes = send_bytes;
            p.send = p.r;
            p.recv = p.r + (size_t)rank * p.recv_bytes;
        } else { /* allgather: send is recv's block rank */
            p.send = p.r + (size_t)rank * k->n;
        }
    }
    if (k->kind == K_BROADCAST || k->kind == K_BARRIER) {
        p.s = NULL;
        p.send = NULL;
    }
    return p;
}

static void fill_guards(unsigned char *area, size_t bytes, int rank)
{
    for (int i = 0; i < GUARD; i++)
        area[-1 - i] = area[bytes + (size_t)i] = (unsigned char)(0xa5 ^ i ^ rank);
}

/* Lays out this rank's data for call number cn (an odd rank's changed call lays out
 * its own), and snapshots the areas. recv starts with what it must not keep. */
static void lay_out(const struct call *k, const struct place *p, struct mem *m, int cn, int rank, int size)
{
    fill_guards(p->r, p->r_bytes, rank);
    for (size_t b = 0; b < p->r_bytes; b++)
        p->r[b] = (unsigned char)(0x3c + b * 5 + (size_t)cn);
    if (p->s)
        fill_guards(p->s, p->s_bytes, rank);
    switch (k->kind) {
    case K_ALLREDUCE:
    case K_REDUCE_SCATTER: {
        size_t n = k->kind == K_ALLREDUCE ? k->n : k->n * (size_t)size;
        for (size_t e = 0; e < n; e++)
            put(k->dt, p->send, e, value(cn, rank, e));
        break;
    }
    case K_ALLTOALL:
    case K_ALLGATHER: {
        size_t n = k->kind == K_ALLTOALL ? p->s_bytes : k->n;
        for (size_t b = 0; b < n; b++)
            p->send[b] = byte(cn, rank, b);
        break;
    }
    case K_BROADCAST:
        if (rank == k->root)
            for (size_t b = 0; b < k->n; b++)
                p->recv[b] = byte(cn, rank, b);
        break;
    default: break;
    }
    memcpy(m->before_r, p->r - GUARD, p->r_bytes + 2 * GUARD);
    if (p->s)
        memcpy(m->before_s, p->s - GUARD, p->s_bytes + 2 * GUARD);
}

/* What recv must hold after the call succeeded, written into want (R's image). */
static void expect(const struct call *k, const struct place *p, unsigned char *want, int cn, int rank, int size)
{
    size_t es = elem_size(k);
    unsigned char *recv = want + GUARD + (size_t)(p->recv - p->r);
    for (size_t e = 0; e < p->recv_bytes / es; e++) {
        switch (k->kind) {
        case K_ALLREDUCE: put(k->dt, recv, e, reduced(k->op, cn, size, e)); break;
        case K_REDUCE_SCATTER: put(k->dt, recv, e, reduced(k->op, cn, size, (size_t)rank * k->n + e)); break;
        case K_ALLTOALL: recv[e] = byte(cn, (int)(e / k->n), (size_t)rank * k->n + e % k->n); break;
        case K_BROADCAST: recv[e] = byte(cn, k->root, e); break;
        case K_ALLGATHER: recv[e] = byte(cn, (int)(e / k->n), e % k->n); break;
        default: break;
        }
    }
}

/* 0 if the area holds image (guards included), else 1, reported */
static int compare(const char *what, const unsigned char *area, size_t bytes, const unsigned char *image,
                   const char *ctx)
{
    const unsigned char *got = area - GUARD;
    if (memcmp(got, image, bytes + 2 * GUARD) == 0)
        return 0;
    size_t b = 0;
    while (got[b] == image[b])
        b++;
    long at = (long)b - GUARD;
    fprintf(stderr, "%s: %s differs at byte %ld of %zu (%s): %#x, want %#x\n", ctx, what, at, bytes,
            at < 0 || (size_t)at >= bytes ? "a guard" : "inside", got[b], image[b]);
    return 1;
}

/* The collectives of comm_t: CALL(allreduce) is lockstep_mpi_allreduce or
 * lockstep_comm_allreduce. */
#ifdef RANDOM_MPI
#define CALL(f) lockstep_mpi_##f
#define comm_free lockstep_mpi_comm_free
static unsigned char *comm_buffer(comm_t *c, size_t *bytes)
{
    return lockstep_comm_buffer(lockstep_mpi_comm_node(c), bytes);
}
static int comm_refuse(comm_t *c)
{
    (void)c;
    CHECK(!"pick_call draws no lockstep_comm_refuse under RANDOM_MPI");
    return 0;
}
#else
#define CALL(f) lockstep_comm_##f
#define comm_free lockstep_comm_free
#define comm_buffer lockstep_comm_buffer
#define comm_refuse lockstep_comm_refuse
#endif

/* The call as this rank makes it; invalid: with arguments lockstep must refuse. */
static int make_call(comm_t *c, const struct call *k, const struct place *p, int invalid, int size)
{
    switch (k->kind) {
    case K_ALLREDUCE:
        return CALL(allreduce)(c, p->send, p->recv, k->n, k->dt, invalid ? (lockstep_op_t)9 : k->op);
    case K_REDUCE_SCATTER:
        return CALL(reduce_scatter)(c, p->send, p->recv, k->n, invalid ? (lockstep_dtype_t)7 : k->dt, k->op);
    case K_ALLTOALL: /* invalid: send and recv overlap (such blocks are never empty: pick_call, fault_defined) */
        return CALL(alltoall)(c, invalid ? p->recv + 1 : p->send, p->recv, k->n);
#ifdef RANDOM_MPI /* (no order or transfer) */
    case K_BROADCAST:
        return CALL(broadcast)(c, p->recv, k->n, invalid ? size : k->root);
    case K_ALLGATHER: /* invalid: no send (fault_defined keeps such blocks non-empty) */
        return CALL(allgather)(c, invalid ? NULL : p->send, p->recv, k->n);
#else
    case K_BROADCAST:
        return CALL(broadcast)(c, p->recv, k->n, invalid ? size : k->root, p->order, k->xfer);
    case K_ALLGATHER:
        return CALL(allgather)(c, p->send, p->recv, k->n, p->order, invalid ? (lockstep_xfer_t)3 : k->xfer);
#endif
    default: /* a barrier cannot be invalid: the refuser calls an invalid allreduce */
        return invalid ? CALL(allreduce)(c, p->r, p->r, 1, (lockstep_dtype_t)7, LOCKSTEP_OP_SUM) : CALL(barrier)(c);
    }
}

/* ---- a rank --------------------------------------------------------------------- */

static void *killer(void *arg)
{
    usleep((useconds_t)(uintptr_t)arg);
    kill(getpid(), SIGKILL);
    return NULL;
}

static comm_t *make_comm(const struct setting *s, int gen, int rank, int size, const char *job,
                         lockstep_pool_t **pool)
{
    lockstep_comm_params_t p = harness_params(rank, size, job);
    snprintf(p.job, sizeof p.job, "%s-%d", job, gen);
    p.timeout_ms = 30000;
    p.small_bytes = s->small;
    p.chunk_bytes = s->chunk;
    p.allreduce_small_bytes = s->ar_small;
    p.broadcast_eager_bytes = s->eager;
    p.buffer_bytes = s->buffer;
    p.cpu_sharers = s->sharers;
    p.wait_policy = s->passive ? LOCKSTEP_WAIT_PASSIVE : LOCKSTEP_WAIT_DEFAULT;
    if (g_cancel && rank == g_victim)
        p.cancel = cancel_asked;
    /* now and then a rank stays out of the asymmetric fences, which then stay off for
     * every rank; each rank's kernel copies off, within the table's windows or wide:
     * a call moves by kernel copy only where every rank's setting allows */
    struct rng r = rng_for(g_seed, ((uint64_t)gen << 32) | 3u, (uint64_t)rank);
    if (below(&r, 5) == 0)
        setenv("LOCKSTEP_NO_MEMBARRIER", "1", 1);
    else
        unsetenv("LOCKSTEP_NO_MEMBARRIER");
    static const char *const kernel_copy[] = {"off", "wide", NULL, NULL, NULL};
    const char *kc = kernel_copy[below(&r, 5)];
    if (kc)
        setenv("LOCKSTEP_KERNEL_COPY", kc, 1);
    else
        unsetenv("LOCKSTEP_KERNEL_COPY");
    *pool = NULL;
    if (s->pool) {
        lockstep_pool_params_t pp = lockstep_pool_params_default();
        pp.n_threads = 2;
        *pool = lockstep_pool_create(&pp);
        CHECK(*pool != NULL);
        p.pool = *pool;
    }
#ifdef RANDOM_MPI
    lockstep_mpi_params_t mp = lockstep_mpi_params_default();
    mp.node = p; /* (job, rank and size are lockstep_mpi's to fill in) */
    mp.ranks_per_node = g_rpn;
    mp.consecutive = g_cons;
    mp.piece_bytes = s->piece;
    mp.check_calls = 1;
    comm_t *c = lockstep_mpi_comm_create(MPI_COMM_WORLD, &mp);
#else
    comm_t *c = lockstep_comm_create(&p);
#endif
    if (!c)
        fprintf(stderr, "rank %d: comm_create (generation %d): %s\n", rank, gen, lockstep_strerror(-errno));
    return c;
}

static int rank_body(int rank, int size, const char *job)
{
    struct mem m;
    memset(&m, 0, sizeof m);
    size_t cap = MAX_BYTES + 2 * GUARD + 64 * 8; /* with room for offsets of up to 63 elements */
    m.heap_r = malloc(cap);
    m.heap_s = malloc(cap);
    m.before_r = malloc(cap);
    m.before_s = malloc(cap);
    m.want = malloc(cap);
    CHECK(m.heap_r && m.heap_s && m.before_r && m.before_s && m.want);
    int gen = 0, cn = 0, bad = 0, counts[4] = {0}, kinds[6] = {0};
    int fatal = g_cancel ? -ECANCELED : -LOCKSTEP_EPEERDIED; /* what the victim brings, from g_death on */
    while (cn < g_calls && !bad) {
        struct setting s = pick_setting(g_seed, gen, size);
        lockstep_pool_t *pool;
        comm_t *c = make_comm(&s, gen, rank, size, job, &pool);
        if (!c)
            return 1;
        m.shared = s.buffer ? comm_buffer(c, &m.shared_bytes) : NULL;
        CHECK(!s.buffer || m.shared);
        int broken = 0, dead = 0;
        for (int i = 0; i < s.calls && cn < g_calls && !broken && !bad; i++, cn++) {
            struct call k = pick_call(g_seed, gen, i, &s, size), changed = k;
            if ((k.fault == F_MISMATCH && !mismatched(&changed, &s, size)) || !fault_defined(&k, &changed))
                k.fault = F_NONE; /* (every rank draws the same) */
            int odd = rank == k.odd && k.fault != F_NONE && k.fault != F_REFUSE_ALL;
            struct call mine = odd && k.fault == F_MISMATCH ? changed : k; /* the odd rank's call disagrees */
            struct place p = place_call(&mine, &m, g_seed, gen, i, rank, size);
            lay_out(&mine, &p, &m, cn, rank, size);
            struct rng late = rng_for(g_seed, ((uint64_t)gen << 32) | 4u, ((uint64_t)i << 8) | (unsigned)rank);
            if (below(&late, 16) == 0) /* now and then a rank comes late: its peers wait, spin, sleep */
                usleep((useconds_t)below(&late, 3000));
            if (g_cancel && rank != g_victim && cn == g_death)
                usleep(15000); /* so that the victim waits, and asks */
            int invalid = (k.fault == F_REFUSE && odd && k.how == 0) || k.fault == F_REFUSE_ALL;
            if (g_cancel && rank == g_victim && cn == g_death) {
                __atomic_store_n(&g_cancelling, 1, __ATOMIC_RELAXED);
            } else if (g_kill && rank == g_victim && cn == g_death) {
                pthread_t t;
                CHECK_EQ(pthread_create(&t, NULL, killer, (void *)(uintptr_t)below(&late, 2000)), 0);
            }
            int rc = k.fault == F_REFUSE && odd && k.how == 1 ? comm_refuse(c)
                                                               : make_call(c, &mine, &p, invalid, size);
            int want = 0;
            switch (k.fault) {
            case F_REFUSE: want = odd ? (k.how == 1 ? 0 : -EINVAL) : -LOCKSTEP_EPEERINVAL; break;
            case F_REFUSE_ALL: want = -EINVAL; break;
            case F_MISMATCH: want = -LOCKSTEP_EMISMATCH; break;
            default: break;
            }
            char ctx[256];
            snprintf(ctx, sizeof ctx, "rank %d of %d, generation %d call %d (%s, n %zu, dtype %d, op %d, root %d, "
                     "xfer %d, order %d, fault %d, odd rank %d, how %d)", rank, size, gen, i, kind_name[mine.kind],
                     mine.n, mine.dt, mine.op, mine.root, mine.xfer, p.order, k.fault, k.odd, k.how);
            /* from the victim's fatal call on, the survivors may meet its death (or every
             * rank its cancel) instead */
            int died = g_kill && cn >= g_death && rc == fatal && rc != want;
            if (rc != want && !died) {
                fprintf(stderr, "%s: got %s, want %s\n", ctx, lockstep_strerror(rc), lockstep_strerror(want));
                bad = 1;
                break;
            }
            counts[k.fault]++;
            memcpy(m.want, m.before_r, p.r_bytes + 2 * GUARD);
            if (rc == 0 && !(k.fault == F_REFUSE && odd)) {
                kinds[mine.kind]++;
                expect(&mine, &p, m.want, cn, rank, size);
            }
            /* past one node, a refusal (on the others) or a mismatch may leave recv
             * holding the node's part (comm_mpi.h) */
            int open = several_nodes(size) && ((k.fault == F_REFUSE && !odd) || k.fault == F_MISMATCH);
            if (died || open) { /* recv may hold part of the result: only the guards must hold */
                memcpy(m.want + GUARD, p.r, p.r_bytes);
                dead = died;
                if (died && rank == (g_victim ? 0 : 1))
                    fprintf(stderr, "%d ranks, seed %" PRIu64 ": rank %d %s from call %d on; rank %d saw it in "
                            "call %d (%s of %zu)\n", size, g_seed, g_victim, g_cancel ? "cancelled" : "died",
                            g_death, rank, cn,
                            kind_name[mine.kind], mine.n);
            }
            bad |= compare("recv's area", p.r, p.r_bytes, m.want, ctx);
            if (p.s)
                bad |= compare("send", p.s, p.s_bytes, m.before_s, ctx);
            if (k.fault == F_MISMATCH) { /* broken, with the same error, on every rank */
                CHECK_EQ(CALL(barrier)(c), -LOCKSTEP_EMISMATCH);
                broken = 1;
            }
            if (k.fault == F_REFUSE && several_nodes(size)) /* broken (but on a refuser that does not lead) */
                broken = 1;
            if (dead) {
                cn++; /* counted as the for loop would */
                break;
            }
        }
        if (g_kill && !g_cancel && rank == g_victim)
            for (;;) /* until the killer thread's signal */
                pause();
        if (g_cancel && !bad) { /* barriers the victim waits in, until its cancel ends one */
            int rc = 0;
            for (int t = 0; t < 200 && rc == 0; t++) {
                if (rank != g_victim)
                    usleep(20000);
                rc = CALL(barrier)(c);
            }
            CHECK_EQ(rc, fatal);
        }
        if (g_kill && !bad) { /* the death (or cancel) reaches every survivor, and stays */
            CHECK_EQ(CALL(barrier)(c), fatal);
            CHECK_EQ(CALL(allreduce)(c, m.heap_r, m.heap_r, 1, LOCKSTEP_DTYPE_F32, LOCKSTEP_OP_SUM), fatal);
            comm_free(c);
            lockstep_pool_free(pool);
            gen++;
            break;
        }
        comm_free(c);
        lockstep_pool_free(pool);
        gen++;
    }
    if (rank == 0 && !bad)
        fprintf(stderr, "%d ranks, seed %" PRIu64 ": %d calls in %d communicators: %d plain, %d refused by one "
                "rank, %d by all, %d mismatched; done: allreduce %d, reduce-scatter %d, all-to-all %d, "
                "broadcast %d, allgather %d, barrier %d\n", size, g_seed, cn, gen, counts[0], counts[1], counts[2],
                counts[3], kinds[0], kinds[1], kinds[2], kinds[3], kinds[4], kinds[5]);
    free(m.heap_r);
    free(m.heap_s);
    free(m.before_r);
    free(m.before_s);
    free(m.want);
    return bad;
}

#ifdef RANDOM_MPI
int main(int argc, char **argv)
{
    CHECK_EQ(MPI_Init(&argc, &argv), MPI_SUCCESS);
    if (argc != 4 && !(argc == 5 && strcmp(argv[4], "consecutive") == 0)) {
        fprintf(stderr, "usage: mpiexec -n N %s RANKS_PER_NODE SEED CALLS [consecutive]\n", argv[0]);
        return 1;
    }
    watchdog(300);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    g_rpn = atoi(argv[1]);
    g_seed = strtoull(argv[2], NULL, 10);
    g_calls = atoi(argv[3]);
    g_cons = argc == 5;
    CHECK(size >= 1 && size <= MAX_TEST_RANKS && g_calls > 0 && g_rpn >= 0);
    int bad = rank_body(rank, size, ""), any = 1;
    CHECK_EQ(MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD), MPI_SUCCESS);
    CHECK_EQ(MPI_Finalize(), MPI_SUCCESS);
    return any;
}
#else
int main(int argc, char **argv)
{
    if (argc != 4 && !(argc == 5 && (strcmp(argv[4], "kill") == 0 || strcmp(argv[4], "cancel") == 0))) {
        fprintf(stderr, "usage: %s RANKS SEED CALLS [kill|cancel]\n", argv[0]);
        return 1;
    }
    int size = atoi(argv[1]);
    g_seed = strtoull(argv[2], NULL, 10);
    g_calls = atoi(argv[3]);
    CHECK(size >= 1 && size <= MAX_TEST_RANKS && g_calls > 0);
    g_kill = argc == 5;
    g_cancel = g_kill && strcmp(argv[4], "cancel") == 0;
    CHECK(!g_kill || size >= 2);
    struct rng r = rng_for(g_seed, 5, 0);
    g_victim = (int)below(&r, (size_t)size);
    g_death = (int)below(&r, (size_t)g_calls);
    harness_run_clean(rank_body, size, "random", 300, g_kill && !g_cancel ? 1u << g_victim : 0u);
    return 0;
}
#endif
