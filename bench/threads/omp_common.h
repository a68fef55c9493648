/* Workloads shared by the OpenMP baselines of `bench threads` and by `bench omp`, which
 * time the same code. */
#ifndef LOCKSTEP_BENCH_OMP_COMMON_H
#define LOCKSTEP_BENCH_OMP_COMMON_H
#include <omp.h>
#include "bench_common.h"

/* The graph as ggml's OpenMP build runs it: the whole graph in one region, a barrier
 * after every node. ns per node. */
static double omp_graph_rep(struct graph_data *g, int t, long graphs)
{
    uint64_t t0 = bench_now();
    for (long k = 0; k < graphs; k++) {
#pragma omp parallel num_threads(t)
        {
            int ith = omp_get_thread_num(), nth = omp_get_num_threads();
            for (int node = 0; node < GRAPH_NODES; node++) {
                graph_node_share(g, node, ith, nth);
#pragma omp barrier
            }
        }
    }
    return (double)(bench_now() - t0) / ((double)graphs * GRAPH_NODES);
}
/* CPU-seconds per second the process burns from 10 ms to 210 ms after a region */
static double omp_idle_rep(int t)
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
#endif
