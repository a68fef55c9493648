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
#include "omp_common.h"

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

int main(int argc, char **argv)
{
    const char *impl, *w;
    int t, reps;
    if (bench_args(argc, argv, &impl, &w, &t, &reps) != 0)
        return 2;
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
        long it = bench_iters(omp_graph_rep(&G, t, 1) * GRAPH_NODES, 40e6, 1, 1000);
        for (int i = 0; i < reps; i++)
            r[i] = omp_graph_rep(&G, t, it);
        bench_emit(w, impl, t, "ns/node", r, reps);
    } else if (strcmp(w, "idle") == 0) {
        for (int i = 0; i < reps; i++)
            r[i] = omp_idle_rep(t);
        bench_emit(w, impl, t, "cpu_s/s", r, reps);
    } else {
        fprintf(stderr, "%s: unknown workload %s\n", argv[0], w);
        return 2;
    }
    return 0;
}
