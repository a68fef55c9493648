/* Shared by the lockstep and OpenMP thread benchmarks, so both run the same workloads
 * and report the same way: one JSON line per measurement,
 *   {"workload": W, "impl": I, "param": threads, "unit": U, "reps": [...]}
 * The driver (tools/lockstep bench threads) takes medians and ratios. */
#ifndef LOCKSTEP_BENCH_COMMON_H
#define LOCKSTEP_BENCH_COMMON_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define BENCH_MAX_REPS 32
#define GRAPH_NODES 2000
#define ROWS_A 64   /* node 2k:   y[64]  = A[64x128] * x[128] */
#define COLS_A 128
#define ROWS_B 128  /* node 2k+1: x[128] = B[128x64] * y[64] */
#define COLS_B 64

static inline uint64_t bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline double bench_cpu_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline void bench_sleep_us(unsigned us)
{
    struct timespec ts = {(time_t)(us / 1000000), (long)(us % 1000000) * 1000L};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

static inline void bench_sleep_ms(unsigned ms)
{
    bench_sleep_us(ms * 1000u);
}

static inline void bench_emit(const char *workload, const char *impl, int param,
                              const char *unit, const double *reps, int n)
{
    printf("{\"workload\": \"%s\", \"impl\": \"%s\", \"param\": %d, \"unit\": \"%s\", \"reps\": [",
           workload, impl, param, unit);
    for (int i = 0; i < n; i++)
        printf("%s%.6g", i ? ", " : "", reps[i]);
    printf("]}\n");
    fflush(stdout);
}

/* The OpenMP benchmarks' arguments: IMPL WORKLOAD THREADS REPS. 0, or 2 after a usage
 * message. */
static inline int bench_args(int argc, char **argv, const char **impl, const char **w, int *t,
                             int *reps)
{
    if (argc < 5) {
        fprintf(stderr, "usage: %s IMPL WORKLOAD THREADS REPS\n", argv[0]);
        return 2;
    }
    *impl = argv[1];
    *w = argv[2];
    *t = atoi(argv[3]);
    *reps = atoi(argv[4]);
    if (*t < 1 || *reps < 1 || *reps > BENCH_MAX_REPS) {
        fprintf(stderr, "%s: THREADS >= 1 and 1 <= REPS <= %d\n", argv[0], BENCH_MAX_REPS);
        return 2;
    }
    return 0;
}

/* Iterations so that one repetition takes about target_ns, from a pilot's ns/op. */
static inline long bench_iters(double ns_per_op, double target_ns, long lo, long hi)
{
    double it = ns_per_op > 0 ? target_ns / ns_per_op : (double)hi;
    if (it < (double)lo)
        return lo;
    if (it > (double)hi)
        return hi;
    return (long)it;
}

/* ---- the graph workload (ggml's barrier benchmark shape) ---------------------------- */

struct graph_data {
    float a[ROWS_A * COLS_A];
    float b[ROWS_B * COLS_B];
    float x[COLS_A]; /* == ROWS_B */
    float y[ROWS_A]; /* == COLS_B */
};

static inline void graph_data_init(struct graph_data *g)
{
    uint32_t s = 12345;
    for (int i = 0; i < ROWS_A * COLS_A; i++) {
        s = s * 1664525u + 1013904223u;
        g->a[i] = ((float)(s >> 8) / 16777216.0f - 0.5f) / 64.0f;
    }
    for (int i = 0; i < ROWS_B * COLS_B; i++) {
        s = s * 1664525u + 1013904223u;
        g->b[i] = ((float)(s >> 8) / 16777216.0f - 0.5f) / 32.0f;
    }
    for (int i = 0; i < COLS_A; i++)
        g->x[i] = 1.0f;
    memset(g->y, 0, sizeof g->y);
}

/* Share ith of nth of node `node`: rows split into near-equal contiguous blocks.
 * Defined in graph_kernel.c, compiled once by the project's C compiler and linked into
 * every benchmark binary, so lockstep and both OpenMP runtimes run the same machine
 * code for the work and differ only in how threads meet. */
void graph_node_share(struct graph_data *g, int node, int ith, int nth);

#endif
