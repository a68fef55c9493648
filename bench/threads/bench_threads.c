/* lockstep's side of the thread benchmarks (the OpenMP side is bench_threads_omp.c).
 * usage: lockstep_bench_threads IMPL WORKLOAD THREADS REPS
 *   IMPL: central | counter | flat | tree | dissem | auto   (the barrier algorithm)
 *   barrier  — ns per barrier episode (lockstep_barrier_arrive_and_wait)
 *   region   — ns per empty lockstep_pool_run
 *   graph    — ns per node of a 2000-node graph run (lockstep_pool_graph_run)
 *   graph-empty   — the same graph with nodes that do nothing: the runner and its
 *                   barrier alone
 *   graph-private — the same graph, each share computing on its own copy of the data:
 *                   how the work itself scales, without the exchange of the vector
 *                   between nodes (graph - graph-private is that exchange's cost)
 *   idle     — CPU-seconds per second burned from 10 ms to 210 ms after a region
 *   pingpong — ns per cache-line round trip between two threads on two CPUs (IMPL ignored)
 *   calibrate — PAUSE cost and the wake-up latency of a parked thread (p50, p99),
 *               the measurements behind LS_WAIT_SPIN_NS (src/wait/tuning.h) */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>

#include "lockstep/lockstep.h"
#include "bench_common.h"

static struct graph_data G;
static struct graph_data *private_g; /* graph-private: one copy per share */

/* ---- barrier episodes, driven inside one pool region ------------------------------ */

struct bar_ctx {
    lockstep_barrier_t *b;
    long iters;     /* written by participant 0 before the sync episode */
    int reps;
    double *out;
};

static void barrier_loop(void *p, int ith, int nth)
{
    (void)nth;
    struct bar_ctx *c = p;
    unsigned tid = (unsigned)ith;
    for (int rep = -1; rep < c->reps; rep++) {
        if (ith == 0)
            c->iters = rep < 0 ? 200 : c->iters;
        lockstep_barrier_arrive_and_wait(c->b, tid); /* sync: publishes iters */
        long iters = c->iters;
        uint64_t t0 = bench_now();
        for (long i = 0; i < iters; i++)
            lockstep_barrier_arrive_and_wait(c->b, tid);
        if (ith == 0) {
            double ns = (double)(bench_now() - t0) / (double)iters;
            if (rep < 0)
                c->iters = bench_iters(ns, 30e6, 50, 2000000);
            else
                c->out[rep] = ns;
        }
    }
}

static int bench_barrier(lockstep_barrier_kind_t kind, int t, int reps, double *out)
{
    lockstep_pool_params_t pp = lockstep_pool_params_default();
    pp.n_threads = t;
    lockstep_pool_t *pool = lockstep_pool_create(&pp);
    if (!pool)
        return -errno;
    lockstep_barrier_params_t bp = lockstep_barrier_params_default();
    bp.kind = kind;
    size_t sz = lockstep_barrier_size(kind, (unsigned)t, 0);
    lockstep_barrier_t *b = aligned_alloc(LOCKSTEP_CACHELINE, (sz + 127) & ~(size_t)127);
    int rc = b ? lockstep_barrier_init(b, sz, (unsigned)t, &bp) : -ENOMEM;
    if (rc == 0) {
        struct bar_ctx c = {b, 0, reps, out};
        rc = lockstep_pool_run(pool, barrier_loop, &c);
    }
    free(b);
    lockstep_pool_free(pool);
    return rc;
}

/* ---- regions and graphs ---------------------------------------------------------- */

static void empty(void *p, int ith, int nth)
{
    (void)p; (void)ith; (void)nth;
    __asm__ __volatile__("" ::: "memory");
}

static int node(void *p, int n, int ith, int nth)
{
    graph_node_share(p, n, ith, nth);
    return 0;
}

static int node_empty(void *p, int n, int ith, int nth)
{
    (void)p; (void)n; (void)ith; (void)nth;
    __asm__ __volatile__("" ::: "memory");
    return 0;
}

static int node_private(void *p, int n, int ith, int nth)
{
    graph_node_share((struct graph_data *)p + ith, n, ith, nth);
    return 0;
}

static lockstep_pool_t *make_pool(lockstep_barrier_kind_t kind, int t)
{
    lockstep_pool_params_t pp = lockstep_pool_params_default();
    pp.n_threads = t;
    pp.barrier = kind;
    return lockstep_pool_create(&pp);
}

static double region_rep(lockstep_pool_t *pool, long iters)
{
    uint64_t t0 = bench_now();
    for (long i = 0; i < iters; i++)
        lockstep_pool_run(pool, empty, NULL);
    return (double)(bench_now() - t0) / (double)iters;
}

static double graph_rep(lockstep_pool_t *pool, const char *w, int t, long graphs)
{
    lockstep_node_fn fn = strcmp(w, "graph-empty") == 0 ? node_empty
                        : strcmp(w, "graph-private") == 0 ? node_private : node;
    void *arg = fn == node_private ? (void *)private_g : (void *)&G;
    uint64_t t0 = bench_now();
    for (long g = 0; g < graphs; g++)
        lockstep_pool_graph_run(pool, GRAPH_NODES, t, fn, arg);
    return (double)(bench_now() - t0) / ((double)graphs * GRAPH_NODES);
}

static double idle_rep(lockstep_pool_t *pool)
{
    lockstep_pool_run(pool, empty, NULL);
    bench_sleep_ms(10);
    double c0 = bench_cpu_seconds();
    bench_sleep_ms(200);
    return (bench_cpu_seconds() - c0) / 0.2;
}

/* ---- the floor: one cache line bounced between two CPUs --------------------------- */

struct pp { uint32_t word; char pad[124]; long iters; int cpu; };

static void pin(int cpu)
{
    if (cpu < 0)
        return;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    pthread_setaffinity_np(pthread_self(), sizeof one, &one);
}

static void *pong(void *p)
{
    struct pp *s = p;
    pin(s->cpu);
    for (long i = 0; i < s->iters; i++) {
        uint32_t want = (uint32_t)(2 * i + 1);
        while (__atomic_load_n(&s->word, __ATOMIC_ACQUIRE) != want)
            __builtin_ia32_pause();
        __atomic_store_n(&s->word, want + 1, __ATOMIC_RELEASE);
    }
    return NULL;
}

static double pingpong_rep(long iters, int cpu0, int cpu1)
{
    static struct pp s __attribute__((aligned(128)));
    s.word = 0;
    s.iters = iters;
    s.cpu = cpu1;
    pthread_t t;
    pthread_create(&t, NULL, pong, &s);
    pin(cpu0);
    bench_sleep_ms(1);
    uint64_t t0 = bench_now();
    for (long i = 0; i < iters; i++) {
        uint32_t v = (uint32_t)(2 * i + 1);
        __atomic_store_n(&s.word, v, __ATOMIC_RELEASE);
        while (__atomic_load_n(&s.word, __ATOMIC_ACQUIRE) != v + 1)
            __builtin_ia32_pause();
    }
    double ns = (double)(bench_now() - t0) / (double)iters;
    pthread_join(t, NULL);
    return ns;
}

/* ---- calibration behind LS_WAIT_SPIN_NS ------------------------------------------- */

/* Wake-up latency: from the store that publishes a value to the moment the thread
 * parked on it (FUTEX_WAIT) runs again. The waker pauses 100 us between rounds so that
 * the waiter is always parked, never spinning. */
#define WAKE_ROUNDS 2000
static uint32_t wake_word;
static uint64_t wake_stamp, wake_lat[WAKE_ROUNDS];

static void *wake_peer(void *p)
{
    (void)p;
    for (uint32_t i = 1; i <= WAKE_ROUNDS; i++) {
        uint32_t v;
        while ((v = __atomic_load_n(&wake_word, __ATOMIC_ACQUIRE)) < i)
            syscall(SYS_futex, &wake_word, FUTEX_WAIT_PRIVATE, v, NULL, NULL, 0);
        wake_lat[i - 1] = bench_now() - __atomic_load_n(&wake_stamp, __ATOMIC_ACQUIRE);
    }
    return NULL;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Fills p50/p99 (ns) of the wake-up latency. */
static void wake_latency(double *p50, double *p99)
{
    wake_word = 0;
    pthread_t t;
    pthread_create(&t, NULL, wake_peer, NULL);
    for (uint32_t i = 1; i <= WAKE_ROUNDS; i++) {
        bench_sleep_us(100);
        __atomic_store_n(&wake_stamp, bench_now(), __ATOMIC_RELEASE);
        __atomic_store_n(&wake_word, i, __ATOMIC_SEQ_CST);
        syscall(SYS_futex, &wake_word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
    }
    pthread_join(t, NULL);
    qsort(wake_lat, WAKE_ROUNDS, sizeof wake_lat[0], cmp_u64);
    *p50 = (double)wake_lat[WAKE_ROUNDS / 2];
    *p99 = (double)wake_lat[WAKE_ROUNDS * 99 / 100];
}

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: %s IMPL barrier|region|graph|idle|pingpong|calibrate THREADS REPS\n",
                argv[0]);
        return 2;
    }
    const char *impl = argv[1], *w = argv[2];
    int t = atoi(argv[3]), reps = atoi(argv[4]);
    int k = lockstep_barrier_kind_parse(impl);
    if (k < 0 || t < 1 || reps < 1 || reps > BENCH_MAX_REPS) {
        fprintf(stderr, "%s: IMPL is central|counter|flat|tree|dissem|auto, THREADS >= 1, 1 <= REPS <= %d\n",
                argv[0], BENCH_MAX_REPS);
        return 2;
    }
    lockstep_barrier_kind_t kind = (lockstep_barrier_kind_t)k;
    graph_data_init(&G);
    double r[BENCH_MAX_REPS];
    int rc = 0;
    if (strcmp(w, "barrier") == 0) {
        rc = bench_barrier(kind, t, reps, r);
        if (rc == 0)
            bench_emit(w, impl, t, "ns", r, reps);
    } else if (strcmp(w, "region") == 0 || strcmp(w, "graph") == 0 || strcmp(w, "idle") == 0 ||
               strcmp(w, "graph-empty") == 0 || strcmp(w, "graph-private") == 0) {
        if (strcmp(w, "graph-private") == 0) {
            private_g = aligned_alloc(4096, sizeof(struct graph_data) * (size_t)t);
            if (!private_g) {
                perror("aligned_alloc");
                return 1;
            }
            for (int i = 0; i < t; i++)
                private_g[i] = G;
        }
        lockstep_pool_t *pool = make_pool(kind, t);
        if (!pool) {
            rc = -errno;
        } else if (w[0] == 'r') {
            long it = bench_iters(region_rep(pool, 100), 30e6, 20, 1000000);
            for (int i = 0; i < reps; i++)
                r[i] = region_rep(pool, it);
            bench_emit(w, impl, t, "ns", r, reps);
        } else if (w[0] == 'g') {
            long it = bench_iters(graph_rep(pool, w, t, 1) * GRAPH_NODES, 40e6, 1, 1000);
            for (int i = 0; i < reps; i++)
                r[i] = graph_rep(pool, w, t, it);
            bench_emit(w, impl, t, "ns/node", r, reps);
        } else {
            for (int i = 0; i < reps; i++)
                r[i] = idle_rep(pool);
            bench_emit(w, impl, t, "cpu_s/s", r, reps);
        }
        lockstep_pool_free(pool);
        free(private_g);
    } else if (strcmp(w, "pingpong") == 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        sched_getaffinity(0, sizeof set, &set);
        int cpus[2] = {-1, -1}, m = 0;
        for (int c = 0; c < CPU_SETSIZE && m < 2; c++)
            if (CPU_ISSET(c, &set))
                cpus[m++] = c;
        long it = bench_iters(pingpong_rep(2000, cpus[0], cpus[1]), 30e6, 1000, 5000000);
        for (int i = 0; i < reps; i++)
            r[i] = pingpong_rep(it, cpus[0], cpus[1]);
        bench_emit(w, "pingpong", 2, "ns", r, reps);
    } else if (strcmp(w, "calibrate") == 0) {
        for (int i = 0; i < reps; i++) {
            uint64_t t0 = bench_now();
            for (int j = 0; j < 1000000; j++)
                __builtin_ia32_pause();
            r[i] = (double)(bench_now() - t0) / 1e6;
        }
        bench_emit("pause", "calibrate", 1, "ns", r, reps);
        double p99[BENCH_MAX_REPS];
        for (int i = 0; i < reps; i++)
            wake_latency(&r[i], &p99[i]);
        bench_emit("wake_p50", "calibrate", 2, "ns", r, reps);
        bench_emit("wake_p99", "calibrate", 2, "ns", p99, reps);
    } else {
        fprintf(stderr, "%s: unknown workload %s\n", argv[0], w);
        return 2;
    }
    if (rc) {
        fprintf(stderr, "%s %s %d: %s\n", impl, w, t, lockstep_strerror(rc));
        return 1;
    }
    return 0;
}
