/* The OpenMP runtime benchmark: one gcc -fopenmp binary, run under libgomp, under LLVM
 * libomp (preloaded: it exports the GOMP entry points) and under lockstep's runtime
 * (preloaded), so the three differ only in the runtime.
 * usage: bench_omp IMPL WORKLOAD THREADS REPS
 *   sync-<construct>  EPCC-style overhead (us) of one construct over the same delay
 *                     without it: parallel, for, parallel-for, barrier, single,
 *                     critical, lock, atomic, reduction
 *   sched-<kind>-<c>  overhead (us) of one loop of THREADS * 128 delay iterations
 *                     under schedule(kind, c): static, dynamic, guided; c 1, 8, 64
 *   graph             ns per node of the 2000-node graph: one region, a barrier after
 *                     every node (ggml's OpenMP build)
 *   task-fan          us per fan of 10,000 small tasks from a single
 *   task-fib          ms per fib(25), two tasks and a taskwait per call
 *   idle              CPU-seconds per second burned from 10 ms to 210 ms after a region
 *   handoff           the host's floor for threads that outnumber the CPUs: us for one
 *                     sched_yield hand-off between two threads pinned to one CPU (no
 *                     OpenMP; a barrier of t threads on c CPUs needs t / c per CPU)
 *   floor-region      the host's floor for a region of THREADS threads: the EPCC
 *                     overhead (us) of a fork/join written by hand (no OpenMP):
 *                     threads pinned round-robin to the CPUs, one epoch word and one
 *                     arrival count, every wait a sched_yield loop
 * One JSON line per measurement (bench/threads/bench_common.h). */
#define _GNU_SOURCE
#include <omp.h>
#include <pthread.h>
#include <sched.h>
#include "bench_common.h"
#include "omp_common.h"

static struct graph_data G;
static int delay_length = 64; /* EPCC's delay: about 0.1 us of dependent adds */

/* Out of line, as EPCC's: inlined, the construct and its reference each had a copy,
 * and the copies' store forwarding of `a` ran at different speeds by where they sat,
 * so a row read the difference of the copies, not the construct's cost. */
__attribute__((noinline)) static void delay(int n)
{
    volatile float a = 0.0f;
    for (int i = 0; i < n; i++)
        a += (float)i;
}

/* ---- EPCC-style synchronisation overheads ------------------------------------------ */

typedef void (*construct_fn)(int t, long reps);

static void c_parallel(int t, long reps)
{
    for (long j = 0; j < reps; j++) {
#pragma omp parallel num_threads(t)
        delay(delay_length);
    }
}

static void c_for(int t, long reps)
{
#pragma omp parallel num_threads(t)
    for (long j = 0; j < reps; j++) {
#pragma omp for
        for (int i = 0; i < t; i++)
            delay(delay_length);
    }
}

static void c_parallel_for(int t, long reps)
{
    for (long j = 0; j < reps; j++) {
#pragma omp parallel for num_threads(t)
        for (int i = 0; i < t; i++)
            delay(delay_length);
    }
}

static void c_barrier(int t, long reps)
{
#pragma omp parallel num_threads(t)
    for (long j = 0; j < reps; j++) {
        delay(delay_length);
#pragma omp barrier
    }
}

static void c_single(int t, long reps)
{
#pragma omp parallel num_threads(t)
    for (long j = 0; j < reps; j++) {
#pragma omp single
        delay(delay_length);
    }
}

/* critical, lock and atomic: reps in all, shared out among the threads, as EPCC */
static void c_critical(int t, long reps)
{
#pragma omp parallel num_threads(t)
    for (long j = 0; j < reps / t; j++) {
#pragma omp critical
        delay(delay_length);
    }
}

static omp_lock_t lock;

static void c_lock(int t, long reps)
{
#pragma omp parallel num_threads(t)
    for (long j = 0; j < reps / t; j++) {
        omp_set_lock(&lock);
        delay(delay_length);
        omp_unset_lock(&lock);
    }
}

static double atomic_sum;

static void c_atomic(int t, long reps)
{
#pragma omp parallel num_threads(t)
    for (long j = 0; j < reps / t; j++) {
#pragma omp atomic
        atomic_sum += 1.0;
    }
}

static void c_reduction(int t, long reps)
{
    int aaaa = 0;
    for (long j = 0; j < reps; j++) {
#pragma omp parallel reduction(+ : aaaa) num_threads(t)
        {
            delay(delay_length);
            aaaa += 1;
        }
    }
    if (aaaa != (int)(reps * t))
        abort();
}

static const struct {
    const char *name;
    construct_fn fn;
    int ref_delays; /* delays per rep the reference runs: 1, or 0 for atomic */
} constructs[] = {
    {"parallel", c_parallel, 1},   {"for", c_for, 1},           {"parallel-for", c_parallel_for, 1},
    {"barrier", c_barrier, 1},     {"single", c_single, 1},     {"critical", c_critical, 1},
    {"lock", c_lock, 1},           {"atomic", c_atomic, 0},     {"reduction", c_reduction, 1},
};

/* The reference: the same delays, on one thread, without the construct. */
static double reference_us(long reps, int delays)
{
    uint64_t t0 = bench_now();
    for (long j = 0; j < reps * delays; j++)
        delay(delay_length);
    return (double)(bench_now() - t0) / 1e3;
}

static double sync_rep(construct_fn fn, int ref_delays, int t, long reps)
{
    uint64_t t0 = bench_now();
    fn(t, reps);
    double us = (double)(bench_now() - t0) / 1e3;
    double ref = reference_us(reps, ref_delays);
    return (us - ref) / (double)reps;
}

/* ---- loop schedules ------------------------------------------------------------------ */

enum { SCHED_ITERS_PER_THREAD = 128 };

static void s_loop(int t, long reps, omp_sched_t kind, int chunk)
{
    omp_set_schedule(kind, chunk);
#pragma omp parallel num_threads(t)
    for (long j = 0; j < reps; j++) {
#pragma omp for schedule(runtime)
        for (int i = 0; i < t * SCHED_ITERS_PER_THREAD; i++)
            delay(delay_length / 4);
    }
}

static double sched_rep(int t, long reps, omp_sched_t kind, int chunk)
{
    uint64_t t0 = bench_now();
    s_loop(t, reps, kind, chunk);
    double us = (double)(bench_now() - t0) / 1e3;
    /* the reference: one thread's share of the iterations, without the loop */
    uint64_t r0 = bench_now();
    for (long j = 0; j < reps * SCHED_ITERS_PER_THREAD; j++)
        delay(delay_length / 4);
    return (us - (double)(bench_now() - r0) / 1e3) / (double)reps;
}

/* ---- graph, tasks, idle ---------------------------------------------------------------- */

enum { FAN = 10000 };
float fan_out[FAN]; /* external: the tasks' stores are not dead code */

static double fan_rep(int t, long fans)
{
    uint64_t t0 = bench_now();
    for (long f = 0; f < fans; f++) {
#pragma omp parallel num_threads(t)
#pragma omp single
        for (int i = 0; i < FAN; i++) {
#pragma omp task firstprivate(i)
            fan_out[i] = (float)i * 0.5f + 1.0f;
        }
    }
    return (double)(bench_now() - t0) / 1e3 / (double)fans;
}

static long fib(int n)
{
    if (n < 2)
        return n;
    long x, y;
#pragma omp task shared(x)
    x = fib(n - 1);
#pragma omp task shared(y)
    y = fib(n - 2);
#pragma omp taskwait
    return x + y;
}

static double fib_rep(int t, long runs)
{
    long r = 0;
    uint64_t t0 = bench_now();
    for (long k = 0; k < runs; k++) {
#pragma omp parallel num_threads(t)
#pragma omp single
        r = fib(25);
    }
    if (r != 75025)
        abort();
    return (double)(bench_now() - t0) / 1e6 / (double)runs;
}

/* Nested regions: 2 outer threads, each opening a region of t inner threads around a
 * delay; us per outer region. */
static double nested_rep(int t, long regions)
{
    uint64_t t0 = bench_now();
    for (long k = 0; k < regions; k++) {
#pragma omp parallel num_threads(2)
#pragma omp parallel num_threads(t)
        delay(delay_length);
    }
    return (double)(bench_now() - t0) / 1e3 / (double)regions;
}

/* A taskgroup with a task reduction over 64 tasks (in_reduction), in a single; us per
 * taskgroup. */
enum { RED_TASKS = 64 };

static double task_reduction_rep(int t, long groups)
{
    long sum = 0;
    uint64_t t0 = bench_now();
#pragma omp parallel num_threads(t)
#pragma omp single
    for (long g = 0; g < groups; g++) {
        long x = 0;
#pragma omp taskgroup task_reduction(+ : x)
        for (int i = 0; i < RED_TASKS; i++) {
#pragma omp task in_reduction(+ : x) firstprivate(i)
            x += i;
        }
        sum += x;
    }
    if (sum != groups * (RED_TASKS * (RED_TASKS - 1) / 2))
        abort();
    return (double)(bench_now() - t0) / 1e3 / (double)groups;
}

/* ---- the host's context-switch floor --------------------------------------------------- */

static volatile int turn;

static void *handoff_thread(void *arg)
{
    int me = (int)(intptr_t)arg; /* pinned with its creator: the affinity is inherited */
    for (int i = 0; i < 20000; i++) {
        while (turn != me)
            sched_yield();
        turn = !me;
    }
    return NULL;
}

static double handoff_rep(void)
{
    cpu_set_t one, old;
    pthread_getaffinity_np(pthread_self(), sizeof old, &old);
    CPU_ZERO(&one);
    CPU_SET(sched_getcpu(), &one);
    pthread_setaffinity_np(pthread_self(), sizeof one, &one); /* the threads inherit it */
    pthread_t th[2];
    turn = 0;
    uint64_t t0 = bench_now();
    for (intptr_t i = 0; i < 2; i++)
        pthread_create(&th[i], NULL, handoff_thread, (void *)i);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    double us = (double)(bench_now() - t0) / 1e3 / 40000.0;
    pthread_setaffinity_np(pthread_self(), sizeof old, &old);
    return us;
}

/* A region by hand: the master publishes an epoch, every thread runs the delay, the
 * workers count their arrivals, the master waits for all of them. What a runtime's
 * region cannot do without where threads outnumber the CPUs: t / c of them per CPU
 * run one after another (hand-offs and delays), and the epoch and the count cross
 * between the CPUs. */
struct floor_region {
    _Alignas(64) unsigned long epoch;
    _Alignas(64) unsigned long arrived;
    long episodes;
    int cpu_of[64];
};

struct floor_arg {
    struct floor_region *f;
    int id;
};

static void floor_pin(int cpu)
{
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    pthread_setaffinity_np(pthread_self(), sizeof one, &one);
}

static void floor_wait(unsigned long *word, unsigned long value)
{
    while (__atomic_load_n(word, __ATOMIC_ACQUIRE) < value)
        sched_yield();
}

static void *floor_worker(void *arg)
{
    struct floor_arg *a = arg;
    struct floor_region *f = a->f;
    floor_pin(f->cpu_of[a->id]);
    for (unsigned long e = 1; e <= (unsigned long)f->episodes; e++) {
        floor_wait(&f->epoch, e);
        delay(delay_length);
        __atomic_fetch_add(&f->arrived, 1ul, __ATOMIC_RELEASE);
    }
    return NULL;
}

static double floor_region_rep(int t, long episodes)
{
    static struct floor_region f;
    struct floor_arg args[64];
    pthread_t th[64];
    cpu_set_t old;
    if (t < 1 || t > 64)
        return -1.0;
    pthread_getaffinity_np(pthread_self(), sizeof old, &old);
    for (int i = 0, cpu = -1; i < t; i++) { /* round-robin over the allowed CPUs */
        do
            cpu = (cpu + 1) % CPU_SETSIZE;
        while (!CPU_ISSET(cpu, &old));
        f.cpu_of[i] = cpu;
    }
    f.epoch = f.arrived = 0;
    f.episodes = episodes;
    for (int i = 1; i < t; i++) {
        args[i] = (struct floor_arg){&f, i};
        pthread_create(&th[i], NULL, floor_worker, &args[i]);
    }
    floor_pin(f.cpu_of[0]);
    uint64_t t0 = bench_now();
    for (unsigned long e = 1; e <= (unsigned long)episodes; e++) {
        __atomic_store_n(&f.epoch, e, __ATOMIC_RELEASE);
        delay(delay_length);
        floor_wait(&f.arrived, e * (unsigned long)(t - 1));
    }
    double us = (double)(bench_now() - t0) / 1e3;
    for (int i = 1; i < t; i++)
        pthread_join(th[i], NULL);
    pthread_setaffinity_np(pthread_self(), sizeof old, &old);
    return (us - reference_us(episodes, 1)) / (double)episodes;
}

/* Every runtime's first tens of milliseconds of barriers in a new process run slow on
 * these VMs (the host has the other vCPU to bring up): untimed, before the pilot. */
static void warm_up(int t)
{
    uint64_t until = bench_now() + 100000000ull;
    int go = 1;
#pragma omp parallel num_threads(t) shared(go)
    while (go) {
#pragma omp barrier
#pragma omp single
        go = bench_now() < until;
        /* the single's barrier publishes go */
    }
}

/* Repetitions of about 30 ms each, sized by a pilot. */
#define TIMED(per_op_ns, call_with_iters, lo, hi)                                         \
    do {                                                                                 \
        long it_ = bench_iters((per_op_ns), 30e6, (lo), (hi));                           \
        for (int i_ = 0; i_ < reps; i_++) {                                              \
            long it = it_;                                                               \
            r[i_] = (call_with_iters);                                                   \
        }                                                                                \
    } while (0)

int main(int argc, char **argv)
{
    const char *impl, *w;
    int t, reps;
    if (bench_args(argc, argv, &impl, &w, &t, &reps) != 0)
        return 2;
    double r[BENCH_MAX_REPS];
    if (strcmp(w, "handoff") == 0) {
        for (int i = 0; i < reps; i++)
            r[i] = handoff_rep();
        bench_emit(w, impl, t, "us", r, reps);
        return 0;
    }
    if (strcmp(w, "floor-region") == 0) {
        TIMED(floor_region_rep(t, 200) * 1e3 + 200.0, floor_region_rep(t, it), 100, 1000000);
        bench_emit(w, impl, t, "us", r, reps);
        return 0;
    }
    graph_data_init(&G);
    omp_init_lock(&lock);
    warm_up(t);
    if (strncmp(w, "sync-", 5) == 0) {
        for (size_t k = 0; k < sizeof constructs / sizeof constructs[0]; k++) {
            if (strcmp(w + 5, constructs[k].name) != 0)
                continue;
            construct_fn fn = constructs[k].fn;
            int ref = constructs[k].ref_delays;
            double pilot = sync_rep(fn, ref, t, 200) * 1e3 + 200.0;
            TIMED(pilot, sync_rep(fn, ref, t, it), 100, 2000000);
            bench_emit(w, impl, t, "us", r, reps);
            return 0;
        }
    } else if (strncmp(w, "sched-", 6) == 0) {
        char kind[16] = {0};
        int chunk = 0;
        if (sscanf(w + 6, "%15[a-z]-%d", kind, &chunk) == 2 && chunk > 0) {
            omp_sched_t k = strcmp(kind, "static") == 0    ? omp_sched_static
                            : strcmp(kind, "dynamic") == 0 ? omp_sched_dynamic
                            : strcmp(kind, "guided") == 0  ? omp_sched_guided
                                                           : (omp_sched_t)0;
            if (k) {
                double pilot = sched_rep(t, 50, k, chunk) * 1e3 + 2000.0;
                TIMED(pilot, sched_rep(t, it, k, chunk), 20, 200000);
                bench_emit(w, impl, t, "us", r, reps);
                return 0;
            }
        }
    } else if (strcmp(w, "graph") == 0) {
        TIMED(omp_graph_rep(&G, t, 1) * GRAPH_NODES, omp_graph_rep(&G, t, it), 1, 1000);
        bench_emit(w, impl, t, "ns/node", r, reps);
        return 0;
    } else if (strcmp(w, "task-fan") == 0) {
        TIMED(fan_rep(t, 1) * 1e3, fan_rep(t, it), 1, 10000);
        bench_emit(w, impl, t, "us", r, reps);
        return 0;
    } else if (strcmp(w, "task-fib") == 0) {
        TIMED(fib_rep(t, 1) * 1e6, fib_rep(t, it), 1, 1000);
        bench_emit(w, impl, t, "ms", r, reps);
        return 0;
    } else if (strcmp(w, "nested") == 0) {
        omp_set_max_active_levels(2);
        double pilot = nested_rep(t, 20) * 1e3 + 1000.0;
        TIMED(pilot, nested_rep(t, it), 10, 200000);
        bench_emit(w, impl, t, "us", r, reps);
        return 0;
    } else if (strcmp(w, "task-reduction") == 0) {
        double pilot = task_reduction_rep(t, 20) * 1e3 + 1000.0;
        TIMED(pilot, task_reduction_rep(t, it), 10, 100000);
        bench_emit(w, impl, t, "us", r, reps);
        return 0;
    } else if (strcmp(w, "idle") == 0) {
        for (int i = 0; i < reps; i++)
            r[i] = omp_idle_rep(t);
        bench_emit(w, impl, t, "cpu_s/s", r, reps);
        return 0;
    }
    fprintf(stderr, "%s: unknown workload %s\n", argv[0], w);
    return 2;
}
