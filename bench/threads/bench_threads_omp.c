/* The OpenMP baselines, compiled once with gcc -fopenmp (libgomp) and once with
 * clang -fopenmp (LLVM libomp), run at the runtime's default settings.
 * usage: bench_threads_omp IMPL WORKLOAD THREADS REPS
 *   barrier — ns per `#pragma omp barrier` inside one region
 *   region  — ns per empty `#pragma omp parallel`
 *   graph   — ns per node: the whole graph in one region, a barrier after every node,
 *             as ggml's OpenMP build runs it
 *   idle    — CPU-seconds per second burned from 10 ms to 210 ms after a region */
#include <omp.h>
#include "bench_common.h"

static struct graph_data G;

static double barrier_rep(int t, long iters)
{
    uint64_t t0 = 0, t1 = 0;
#pragma omp parallel num_threads(t)
    {
#pragma omp barrier
#pragma omp master
        t0 = bench_now();
        for (long i = 0; i < iters; i++) {
#pragma omp barrier
        }
#pragma omp master
        t1 = bench_now();
    }
    return (double)(t1 - t0) / (double)iters;
}

static double region_rep(int t, long iters)
{
    uint64_t t0 = bench_now();
    for (long i = 0; i < iters; i++) {
#pragma omp parallel num_threads(t)
        {
            __asm__ __volatile__("" ::: "memory");
        }
    }
    return (double)(bench_now() - t0) / (double)iters;
}

static double graph_rep(int t, long graphs)
{
    uint64_t t0 = bench_now();
    for (long g = 0; g < graphs; g++) {
#pragma omp parallel num_threads(t)
        {
            int ith = omp_get_thread_num(), nth = omp_get_num_threads();
            for (int node = 0; node < GRAPH_NODES; node++) {
                graph_node_share(&G, node, ith, nth);
#pragma omp barrier
            }
        }
    }
    return (double)(bench_now() - t0) / ((double)graphs * GRAPH_NODES);
}

static double idle_rep(int t)
{
#pragma omp parallel num_threads(t)
    {
        __asm__ __volatile__("" ::: "memory");
    }
    bench_sleep_ms(10);
    double c0 = bench_cpu_seconds();
    bench_sleep_ms(200);
    return (bench_cpu_seconds() - c0) / 0.2;
}

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: %s IMPL barrier|region|graph|idle THREADS REPS\n", argv[0]);
        return 2;
    }
    const char *impl = argv[1], *w = argv[2];
    int t = atoi(argv[3]), reps = atoi(argv[4]);
    if (t < 1 || reps < 1 || reps > BENCH_MAX_REPS) {
        fprintf(stderr, "%s: THREADS >= 1 and 1 <= REPS <= %d\n", argv[0], BENCH_MAX_REPS);
        return 2;
    }
    graph_data_init(&G);
    double r[BENCH_MAX_REPS];
    if (strcmp(w, "barrier") == 0) {
        long it = bench_iters(barrier_rep(t, 200), 30e6, 50, 2000000);
        for (int i = 0; i < reps; i++)
            r[i] = barrier_rep(t, it);
        bench_emit(w, impl, t, "ns", r, reps);
    } else if (strcmp(w, "region") == 0) {
        long it = bench_iters(region_rep(t, 100), 30e6, 20, 1000000);
        for (int i = 0; i < reps; i++)
            r[i] = region_rep(t, it);
        bench_emit(w, impl, t, "ns", r, reps);
    } else if (strcmp(w, "graph") == 0) {
        long it = bench_iters(graph_rep(t, 1) * GRAPH_NODES, 40e6, 1, 1000);
        for (int i = 0; i < reps; i++)
            r[i] = graph_rep(t, it);
        bench_emit(w, impl, t, "ns/node", r, reps);
    } else if (strcmp(w, "idle") == 0) {
        for (int i = 0; i < reps; i++)
            r[i] = idle_rep(t);
        bench_emit(w, impl, t, "cpu_s/s", r, reps);
    } else {
        fprintf(stderr, "%s: unknown workload %s\n", argv[0], w);
        return 2;
    }
    return 0;
}
