/* lockstep's collectives against OpenMPI's, in the same processes, interleaved.
 * Launched by `lockstep bench comm` as: mpirun -n N bench_comm [quick]
 * Rank 0 prints JSON rows {"workload", "impl", "param" (bytes), "unit": "us" (roundtrip
 * rows: "ns"), "reps"}.
 *   allreduce_<N>r            — f32 sum, lockstep (auto switch) vs MPI_Allreduce; and
 *                                lockstep-buffer: the same call on an array in the
 *                                communicator's shared buffer (zero-copy)
 *                                and lockstep-mpi: lockstep_mpi_allreduce (comm_mpi.h)
 *                                on this one node, which is the node's lockstep_comm
 *                                plus lockstep_mpi's own cost; and, up to 256 B,
 *                                bare-exchange: the exchange of lockstep's small path
 *                                and nothing else (copy in, a flag, wait for the
 *                                peers' flags, sum every rank's array in rank order,
 *                                its own from a private copy) in an MPI shared window,
 *                                without lockstep's descriptor check, deadline,
 *                                liveness checks or wait policy. It waits by spinning
 *                                while ranks fit the CPUs, and by sched_yield when they
 *                                outnumber them (a rank that spins there holds the CPU
 *                                its missing peer needs). It shows how much of a small
 *                                call is the memory traffic itself on this machine, and
 *                                so what ratio against OpenMPI is reachable at all.
 *                                Where ranks outnumber CPUs it is a reference, not a
 *                                floor: what a plain exchange pays in process switches
 *                                (lockstep's wait, which spins briefly while every
 *                                missing peer last ran on another CPU, may beat it).
 *                                (Past 256 B lockstep may split the work between
 *                                ranks, and this exchange is no floor.)
 *   reduce_scatter_<N>r       — f32 sum, lockstep_comm_reduce_scatter vs
 *                                MPI_Reduce_scatter_block; param: one rank's block
 *   alltoall_<N>r             — lockstep_comm_alltoall vs MPI_Alltoall; param: one block;
 *   alltoall_fresh_<N>r         the same with new data written into send before each
 *                                call (see bcast_fresh below)
 *   allreduce_paths_<N>r         — lockstep forced to one path (the switch point is
 *                                where these cross)
 *   allreduce_mpi_2nodes_<N>r    — lockstep_mpi with the ranks dealt into two emulated
 *                                nodes (ranks_per_node = N / 2): node allreduce,
 *                                leaders' MPI_Ireduce + MPI_Ibcast, node broadcast;
 *                                lockstep-mpi-checked adds check_calls (one more small
 *                                MPI allreduce). Every byte between nodes goes through
 *                                the same OpenMPI, on the same machine: these rows
 *                                show what the two levels and check_calls cost, not
 *                                what they save between real nodes, so they carry no
 *                                OpenMPI row (with one rank per node the leaders' two
 *                                MPI calls cannot beat OpenMPI's one; the flat
 *                                MPI_Allreduce is in allreduce_<N>r)
 *   bcast_<N>r / allgather_<N>r — lockstep per order and push/pull vs MPI_Bcast /
 *                                MPI_Allgather, sending the same unchanged buffer every call;
 *                                buffer-push: linear push, the buffers in the
 *                                communicator's shared buffer (zero-copy); eager (up to
 *                                64 KiB): broadcast_eager_bytes = 64 KiB, whose root
 *                                returns without waiting, like MPI's eager sends
 *   bcast_fresh_<N>r / allgather_fresh_<N>r — the same, linear order, but the senders
 *                                write new data into the buffer before each call (both
 *                                implementations pay that write), as an inference step
 *                                does. An unchanged buffer flatters kernel-copy transfers
 *                                (OpenMPI reads the sender's memory with CMA): its lines
 *                                stay clean and end up cached on the reader's core.
 *   roundtrip_<N>r            — the host's state while each table's rows ran (see
 *                                round_trip): row <table>, param its message size, in ns
 * Each sample is the mean of a timed batch started together (MPI_Barrier); batches
 * of every implementation alternate, so drift on a shared machine hits all alike. */
#define _GNU_SOURCE
#include <errno.h>
#include <mpi.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lockstep/comm_mpi.h"
#include "lockstep/lockstep.h"

#define REPS 11 /* short batches, many of them: the median survives a preempted rank */
#define MAXIMPL 16

static double now_us(void) { return (double)lockstep_now_ns() / 1000.0; }

typedef int (*call_fn)(void *ctx, int impl);

struct ctx {
    lockstep_comm_t *ls[3]; /* auto (with a shared buffer), small-only, large-only */
    lockstep_mpi_comm_t *mpi[3]; /* one node; two emulated nodes; the same, check_calls */
    float *a, *b, *z;       /* z: ls[0]'s shared buffer */
    size_t zrecv;           /* where in z the allgather's recv starts (send: at z) */
    size_t bytes;
    int order, xfer, root;
    int rank, fresh;   /* fresh: senders rewrite their buffer before each call */
    int with_eager;    /* broadcasts: the eager row too */
    unsigned char gen; /* what they write */
    int size;
    int bare_yield;          /* ranks outnumber CPUs: the bare exchange yields as it waits */
    struct bare_rank **bare; /* every rank's part of the shared window */
    int *cpus;               /* round_trip's: where each rank runs */
    uint32_t bare_seq;
};

/* The bare exchange (bare-exchange rows), call s: rank r copies its array into
 * bare[r]->slot[s & 1], stores s in bare[r]->flag[s & 1] (a release store, as
 * lockstep's publish with the ranks' asymmetric fences), waits until every peer's
 * flag says s (spinning, or with sched_yield when ranks outnumber CPUs), and sums all
 * arrays in rank order, its own from a private copy (as lockstep reads its own input
 * from send), the others from their slots. A slot is rewritten two calls later, after
 * every rank has flagged the call between, so after it finished reading this one. */
#define BARE_MAX 256
struct bare_rank {
    uint32_t flag[2][32]; /* one 128-byte line each */
    float slot[2][64];    /* BARE_MAX bytes each, 128-byte aligned */
    uint32_t ping[32];    /* rank 0's: the round trip's line (round_trip) */
};
_Static_assert(sizeof(float[64]) == BARE_MAX, "a slot holds BARE_MAX bytes");

static int do_bare(struct ctx *c)
{
    uint32_t s = ++c->bare_seq;
    unsigned b = s & 1;
    size_t n = c->bytes / 4;
    float own[BARE_MAX / 4];
    memcpy(own, c->a, c->bytes);
    memcpy(c->bare[c->rank]->slot[b], c->a, c->bytes);
    __atomic_store_n(&c->bare[c->rank]->flag[b][0], s, __ATOMIC_RELEASE);
    for (int r = 0; r < c->size; r++) {
        uint64_t spins = 0, give_up = 0;
        while (__atomic_load_n(&c->bare[r]->flag[b][0], __ATOMIC_ACQUIRE) != s) {
            if (c->bare_yield)
                sched_yield();
#if defined(__x86_64__)
            else
                __builtin_ia32_pause();
#endif
            if (++spins % 65536 == 0) { /* no deadlock in a benchmark either */
                uint64_t t = lockstep_now_ns();
                if (!give_up)
                    give_up = t + 10000000000ull;
                else if (t > give_up)
                    return -1;
            }
        }
    }
    memcpy(c->a, c->rank == 0 ? own : c->bare[0]->slot[b], c->bytes);
    for (int r = 1; r < c->size; r++) { /* one vectorised pass per rank, in rank order */
        const float *in = r == c->rank ? own : c->bare[r]->slot[b];
        for (size_t i = 0; i < n; i++)
            c->a[i] += in[i];
    }
    return 0;
}

/* The host's state, measured between the rows' batches: the mean round trip of a
 * cache line between rank 0 and the lowest rank that is on another CPU at the time,
 * over RT_ROUNDS round trips, in ns; -1 when every rank is on rank 0's CPU or the
 * other side stopped answering (a rank preempted for RT_GIVE_UP_NS). The hosts of these
 * 2-vCPU machines run them close together in most stretches (60-70 ns) and move them
 * apart in others (200-400 ns, for seconds to minutes at a time). In those both
 * lockstep's and OpenMPI's collectives slow down, by different factors at different
 * sizes (lockstep's large copying allreduce 1.5-3x: its stores into slot lines the
 * other CPU has read wait for that CPU), so a ratio means little without its stretch:
 * the roundtrip_<N>r table says which stretch each table and size was measured in. */
#define RT_ROUNDS 400
#define RT_GIVE_UP_NS 50000000ull

static double round_trip(struct ctx *c)
{
    int cpu = sched_getcpu(), peer = -1;
    MPI_Allgather(&cpu, 1, MPI_INT, c->cpus, 1, MPI_INT, MPI_COMM_WORLD);
    for (int r = 1; r < c->size && peer < 0 && c->cpus[0] >= 0; r++)
        if (c->cpus[r] >= 0 && c->cpus[r] != c->cpus[0])
            peer = r;
    uint32_t *line = &c->bare[0]->ping[0];
    if (c->rank == 0)
        __atomic_store_n(line, 0, __ATOMIC_RELAXED);
    MPI_Barrier(MPI_COMM_WORLD);
    double ns = -1;
    if (peer > 0 && (c->rank == 0 || c->rank == peer)) {
        uint64_t t0 = lockstep_now_ns(), give_up = t0 + RT_GIVE_UP_NS;
        int ok = 1;
        for (uint32_t i = 0; ok && i < RT_ROUNDS; i++) {
            uint32_t want = c->rank == 0 ? 2 * i + 2 : 2 * i + 1;
            if (c->rank == 0)
                __atomic_store_n(line, 2 * i + 1, __ATOMIC_RELEASE);
            for (unsigned spins = 1; __atomic_load_n(line, __ATOMIC_ACQUIRE) != want; spins++) {
#if defined(__x86_64__)
                __builtin_ia32_pause();
#endif
                if (spins % 1024 == 0 && lockstep_now_ns() > give_up) {
                    ok = 0;
                    break;
                }
            }
            if (ok && c->rank != 0)
                __atomic_store_n(line, 2 * i + 2, __ATOMIC_RELEASE);
        }
        if (ok && c->rank == 0)
            ns = (double)(lockstep_now_ns() - t0) / RT_ROUNDS;
    }
    MPI_Barrier(MPI_COMM_WORLD);
    return ns;
}

static void call(call_fn fn, struct ctx *c, int impl)
{
    if (fn(c, impl) != 0) {
        fprintf(stderr, "call failed (impl %d, %zu bytes)\n", impl, c->bytes);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
}

/* One batch of iters calls of impl, after one call untimed; returns us per call, the
 * slowest rank's. The rows take turns batch by batch, so without that call a row's
 * first would pay for the row before it (its buffers out of the caches): at
 * allgather_2r 4 MiB, rotated-pull, the only PULL row after one on the shared buffer
 * (buffer-push), took 1.11-1.21x linear-pull's time in every run, for the same work. */
static double batch(call_fn fn, struct ctx *c, int impl, int iters)
{
    call(fn, c, impl);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now_us();
    for (int i = 0; i < iters; i++)
        call(fn, c, impl);
    double t = (now_us() - t0) / iters, worst = 0;
    MPI_Allreduce(&t, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD); /* the slowest rank */
    return worst;
}

static int iters_for(size_t bytes)
{
    if (bytes <= 65536)
        return 250;
    if (bytes <= (1u << 20))
        return 40;
    return 6;
}

/* impl 0 OpenMPI, 1-3 lockstep auto / small-only / large-only, 4 auto on the buffer,
 * 5-7 lockstep_mpi: one node, two nodes, two nodes with check_calls, 8 the bare exchange */
static int do_allreduce(void *p, int impl)
{
    struct ctx *c = p;
    size_t n = c->bytes / 4;
    if (impl == 8)
        return do_bare(c);
    if (impl == 0)
        return MPI_Allreduce(MPI_IN_PLACE, c->a, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD) == MPI_SUCCESS ? 0 : -1;
    if (impl == 4)
        return lockstep_comm_allreduce(c->ls[0], c->z, c->z, n, LOCKSTEP_DTYPE_F32, LOCKSTEP_OP_SUM);
    if (impl >= 5)
        return lockstep_mpi_allreduce(c->mpi[impl - 5], c->a, c->a, n, LOCKSTEP_DTYPE_F32, LOCKSTEP_OP_SUM);
    return lockstep_comm_allreduce(c->ls[impl - 1], c->a, c->a, n, LOCKSTEP_DTYPE_F32, LOCKSTEP_OP_SUM);
}

/* impl 0 MPI_Reduce_scatter_block, 1 lockstep_comm_reduce_scatter: f32 sums, a block of
 * c->bytes per rank (send c->a: size blocks, recv c->b) */
static int do_reduce_scatter(void *p, int impl)
{
    struct ctx *c = p;
    size_t n = c->bytes / 4;
    if (impl == 0)
        return MPI_Reduce_scatter_block(c->a, c->b, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD) == MPI_SUCCESS ? 0 : -1;
    return lockstep_comm_reduce_scatter(c->ls[0], c->a, c->b, n, LOCKSTEP_DTYPE_F32, LOCKSTEP_OP_SUM);
}

/* impl 0 MPI_Alltoall, 1 lockstep_comm_alltoall: blocks of c->bytes (send c->a, recv c->b);
 * fresh: every rank writes new data into all of send first */
static int do_alltoall(void *p, int impl)
{
    struct ctx *c = p;
    if (c->fresh)
        memset(c->a, ++c->gen, c->bytes * (size_t)c->size);
    if (impl == 0)
        return MPI_Alltoall(c->a, (int)c->bytes, MPI_BYTE, c->b, (int)c->bytes, MPI_BYTE, MPI_COMM_WORLD) == MPI_SUCCESS ? 0 : -1;
    return lockstep_comm_alltoall(c->ls[0], c->a, c->b, c->bytes);
}

/* impl 0 OpenMPI; 1-2 linear pull/push; 3 linear push on the shared buffer (zero-copy);
 * 4-9 rotated, random, topology, each pull/push */
static const char *const x_names[] = {"openmpi",      "linear-pull",  "linear-push",   "buffer-push",  "rotated-pull",
                                      "rotated-push", "random-pull",  "random-push",   "topology-pull", "topology-push"};
#define X_FRESH 4 /* fresh data: the linear and buffer rows only */
/* Broadcasts have one more: 4 eager (lockstep_comm_params.broadcast_eager_bytes, on the
 * small-only communicator), then x_names' 4-9 */
static const char *const b_names[] = {"openmpi",      "linear-pull",  "linear-push",   "buffer-push", "eager",
                                      "rotated-pull", "rotated-push", "random-pull",   "random-push",
                                      "topology-pull", "topology-push"};
#define X_EAGER 4
#define EAGER_BYTES ((size_t)64 * 1024)

static void x_impl(const struct ctx *c, int impl, int *order, int *xfer, float **send, float **recv)
{
    int in_buf = impl == 3;
    int k = impl == 3 ? LOCKSTEP_XFER_PUSH : impl < 3 ? impl - 1 : impl - 2; /* order * 2 + xfer */
    *order = k / 2;
    *xfer = k % 2;
    *send = in_buf ? c->z : c->a;
    *recv = in_buf ? c->z + c->zrecv / 4 : c->b;
}

static int do_bcast(void *p, int impl)
{
    struct ctx *c = p;
    if (!c->with_eager && impl >= X_EAGER) /* the rows are x_names' */
        impl++;
    int order, xfer, eager = impl == X_EAGER;
    float *buf, *unused;
    x_impl(c, eager ? 1 : impl > X_EAGER ? impl - 1 : impl, &order, &xfer, &buf, &unused);
    if (c->fresh && c->rank == c->root)
        memset(buf, ++c->gen, c->bytes);
    if (impl == 0)
        return MPI_Bcast(buf, (int)c->bytes, MPI_BYTE, c->root, MPI_COMM_WORLD) == MPI_SUCCESS ? 0 : -1;
    return lockstep_comm_broadcast(c->ls[eager], buf, c->bytes, c->root, order, xfer);
}

static int do_allgather(void *p, int impl)
{
    struct ctx *c = p;
    int order, xfer;
    float *send, *recv;
    x_impl(c, impl, &order, &xfer, &send, &recv);
    if (c->fresh)
        memset(send, ++c->gen, c->bytes);
    if (impl == 0)
        return MPI_Allgather(send, (int)c->bytes, MPI_BYTE, recv, (int)c->bytes, MPI_BYTE, MPI_COMM_WORLD) == MPI_SUCCESS ? 0 : -1;
    return lockstep_comm_allgather(c->ls[0], send, recv, c->bytes, order, xfer);
}

static void emit_unit(int rank, const char *workload, const char *impl, size_t bytes, const char *unit,
                      const double *r, int n)
{
    if (rank != 0)
        return;
    printf("{\"workload\": \"%s\", \"impl\": \"%s\", \"param\": %zu, \"unit\": \"%s\", \"reps\": [", workload, impl,
           bytes, unit);
    for (int i = 0; i < n; i++)
        printf("%s%.4g", i ? ", " : "", r[i]);
    printf("]}\n");
    fflush(stdout);
}

static void emit(int rank, const char *workload, const char *impl, size_t bytes, const double *r, int n)
{
    emit_unit(rank, workload, impl, bytes, "us", r, n);
}

/* the round trips measured during table `workload`'s rows at this size (those that
 * were measured at all), as row `workload` of table roundtrip_<N>r */
static void emit_round_trips(const struct ctx *c, const char *workload, const double *rt, int n)
{
    double got[REPS];
    int k = 0;
    for (int i = 0; i < n; i++)
        if (rt[i] >= 0)
            got[k++] = rt[i];
    char w[64];
    snprintf(w, sizeof w, "roundtrip_%dr", c->size);
    if (k)
        emit_unit(c->rank, w, workload, c->bytes, "ns", got, k);
}

/* Impls 0 to nimpl - 1 at c->bytes: a batch of each to warm up every path, then REPS
 * rounds of one batch each, every round followed by the host's state (rt) */
static void measure(call_fn fn, struct ctx *c, int nimpl, double r[][REPS], double *rt)
{
    int it = iters_for(c->bytes);
    for (int i = 0; i < nimpl; i++)
        batch(fn, c, i, it / 4 + 1);
    for (int rep = 0; rep < REPS; rep++) {
        for (int i = 0; i < nimpl; i++)
            r[i][rep] = batch(fn, c, i, it);
        rt[rep] = round_trip(c);
    }
}

static void run(int rank, const char *workload, call_fn fn, struct ctx *c, const char *const *names, int nimpl)
{
    double r[MAXIMPL][REPS], rt[REPS];
    measure(fn, c, nimpl, r, rt);
    for (int i = 0; i < nimpl; i++)
        emit(rank, workload, names[i], c->bytes, r[i], REPS);
    emit_round_trips(c, workload, rt, REPS);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int quick = argc > 1 && strcmp(argv[1], "quick") == 0;
    size_t max_bytes = quick ? (1u << 20) : (16u << 20);

    struct ctx c;
    memset(&c, 0, sizeof c);
    c.rank = rank;
    lockstep_comm_params_t p = lockstep_comm_params_default();
    int rc = lockstep_comm_params_from_env(&p);
    if (rc) {
        fprintf(stderr, "bench_comm: cannot read the launcher's variables (%s): %s\n",
                lockstep_comm_env_error(), lockstep_strerror(rc));
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    const char *suffix[3] = {"", "-small", "-large"};
    char base[sizeof p.job];
    memcpy(base, p.job, sizeof base);
    for (int k = 0; k < 3; k++) {
        lockstep_comm_params_t q = p;
        snprintf(q.job, sizeof q.job, "%.150s-bench%s", base, suffix[k]);
        if (k == 1) { /* everything on the small path (chunk: 1 MiB); eager broadcasts */
            q.small_bytes = q.allreduce_small_bytes = max_bytes + 4096;
            q.broadcast_eager_bytes = EAGER_BYTES;
        }
        if (k == 2)
            q.small_bytes = 256;              /* everything but tiny on the large path */
        if (k == 0) /* the allreduce's array; the allgather's send and recv (max_bytes / 4 per rank) */
            q.buffer_bytes = max_bytes > max_bytes / 4 * (size_t)(size + 1) ? max_bytes : max_bytes / 4 * (size_t)(size + 1);
        c.ls[k] = lockstep_comm_create(&q);
        if (!c.ls[k]) {
            fprintf(stderr, "bench_comm rank %d: lockstep_comm_create: %s\n", rank, lockstep_strerror(-errno));
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    }
    if (rank == 0) /* whether rank 0 offers kernel copies in this run (lockstep_comm_kernel_copy) */
        printf("{\"note\": \"kernel_copy\", \"ranks\": %d, \"value\": \"%s\"}\n", size,
               lockstep_comm_kernel_copy(c.ls[0]) == 1 ? "on" : "off");
    for (int k = 0; k < 3; k++) {
        lockstep_mpi_params_t q = lockstep_mpi_params_default();
        q.ranks_per_node = k == 0 ? 0 : (size + 1) / 2;
        q.check_calls = k == 2;
        c.mpi[k] = lockstep_mpi_comm_create(MPI_COMM_WORLD, &q);
        if (!c.mpi[k]) {
            fprintf(stderr, "bench_comm rank %d: lockstep_mpi_comm_create: %s\n", rank, lockstep_strerror(-errno));
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    }
    MPI_Win bare_win = MPI_WIN_NULL;
    c.size = size;
    c.bare_yield = size > lockstep_cpus_available();
    struct bare_rank *mine = NULL;
    c.bare = calloc((size_t)size, sizeof *c.bare);
    c.cpus = calloc((size_t)size, sizeof *c.cpus);
    if (!c.bare || !c.cpus || MPI_Win_allocate_shared((MPI_Aint)sizeof *mine, 128, MPI_INFO_NULL, MPI_COMM_WORLD, &mine,
                                           &bare_win) != MPI_SUCCESS) {
        fprintf(stderr, "bench_comm rank %d: no shared window for the bare exchange\n", rank);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    memset(mine, 0, sizeof *mine);
    for (int r = 0; r < size; r++) {
        MPI_Aint len;
        int unit;
        MPI_Win_shared_query(bare_win, r, &len, &unit, &c.bare[r]);
    }
    MPI_Barrier(MPI_COMM_WORLD); /* every part zeroed before any flag is read */
    c.z = lockstep_comm_buffer(c.ls[0], NULL);
    c.zrecv = max_bytes / 4;
    c.a = aligned_alloc(4096, max_bytes * (size_t)size + 4096);
    c.b = aligned_alloc(4096, max_bytes * (size_t)size + 4096);
    memset(c.a, 0, max_bytes * (size_t)size);
    memset(c.b, 0, max_bytes * (size_t)size);

    char w[64];
    static const char *const ar_names[] = {"openmpi",         "lockstep",     "lockstep-small",
                                           "lockstep-large",  "lockstep-buffer", "lockstep-mpi",
                                           "lockstep-mpi",    "lockstep-mpi-checked", "bare-exchange"};
    for (size_t bytes = 4; bytes <= max_bytes; bytes *= 4) {
        c.bytes = bytes;
        snprintf(w, sizeof w, "allreduce_%dr", size);
        double r[MAXIMPL][REPS], rt[REPS];
        int nimpl = bytes <= BARE_MAX ? 9 : 8;
        measure(do_allreduce, &c, nimpl, r, rt);
        emit_round_trips(&c, w, rt, REPS);
        emit(rank, w, "openmpi", bytes, r[0], REPS);
        emit(rank, w, "lockstep", bytes, r[1], REPS);
        emit(rank, w, "lockstep-buffer", bytes, r[4], REPS);
        emit(rank, w, ar_names[5], bytes, r[5], REPS);
        if (nimpl > 8)
            emit(rank, w, ar_names[8], bytes, r[8], REPS);
        snprintf(w, sizeof w, "allreduce_paths_%dr", size);
        for (int i = 2; i < 4; i++)
            emit(rank, w, ar_names[i], bytes, r[i], REPS);
        snprintf(w, sizeof w, "allreduce_mpi_2nodes_%dr", size); /* no baseline: see above */
        for (int i = 6; i < 8; i++)
            emit(rank, w, ar_names[i], bytes, r[i], REPS);
    }

    static const char *const rs_names[] = {"openmpi", "lockstep"};
    for (size_t bytes = 4; bytes <= max_bytes / 4; bytes *= 4) { /* per rank's block */
        c.bytes = bytes;
        snprintf(w, sizeof w, "reduce_scatter_%dr", size);
        run(rank, w, do_reduce_scatter, &c, rs_names, 2);
        snprintf(w, sizeof w, "alltoall_%dr", size);
        run(rank, w, do_alltoall, &c, rs_names, 2);
        c.fresh = 1;
        snprintf(w, sizeof w, "alltoall_fresh_%dr", size);
        run(rank, w, do_alltoall, &c, rs_names, 2);
        c.fresh = 0;
    }

    /* unchanged buffers: every order and transfer; fresh data: openmpi, linear and buffer */
    for (c.fresh = 0; c.fresh <= 1; c.fresh++)
        for (size_t bytes = 64; bytes <= max_bytes / 4; bytes *= 16) {
            const char *kind = c.fresh ? "_fresh" : "";
            int nimpl = c.fresh ? X_FRESH : (int)(sizeof x_names / sizeof x_names[0]);
            c.bytes = bytes;
            c.root = 0;
            snprintf(w, sizeof w, "bcast%s_%dr", kind, size);
            c.with_eager = bytes <= EAGER_BYTES; /* past it, the row would be linear-pull */
            run(rank, w, do_bcast, &c, c.with_eager ? b_names : x_names, nimpl + c.with_eager);
            snprintf(w, sizeof w, "allgather%s_%dr", kind, size);
            run(rank, w, do_allgather, &c, x_names, nimpl);
        }
    for (int k = 0; k < 3; k++) {
        lockstep_comm_free(c.ls[k]);
        lockstep_mpi_comm_free(c.mpi[k]);
    }
    free(c.a);
    free(c.b);
    if (bare_win != MPI_WIN_NULL)
        MPI_Win_free(&bare_win);
    free(c.bare);
    free(c.cpus);
    MPI_Finalize();
    return 0;
}
