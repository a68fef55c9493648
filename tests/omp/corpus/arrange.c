/* Unbound workers of a team that outnumbers the CPUs: each is kept on one CPU, worker i
 * on the i-th CPU after the master's (wrapping), and when the master has moved they are
 * arranged after its new CPU at the next region. With LOCKSTEP_NO_SPREAD set (argv[1]
 * "free"), every member keeps the process's CPUs. Prints "ok cpus=C", or exits 77 with
 * one CPU. */
#define _GNU_SOURCE
#include <omp.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>

#include "check.h"

static int list[CPU_SETSIZE], n;

static void set_self(const cpu_set_t *set)
{
    CHECK(sched_setaffinity(0, sizeof *set, set) == 0);
}

static int index_of(int cpu)
{
    for (int k = 0; k < n; k++)
        if (list[k] == cpu)
            return k;
    return -1;
}

/* A region of `threads`; returns the index of the CPU the workers sit after (worker i
 * on list[(k + i) % n], each on that CPU alone), or -1 when they do not; a free run
 * returns 0 when every worker keeps the process's CPUs. */
static int team_k(int threads, int free_run)
{
    int cpu_of[64], count_of[64];
    CHECK(threads <= 64);
#pragma omp parallel num_threads(threads)
    {
        cpu_set_t mine;
        CHECK(sched_getaffinity(0, sizeof mine, &mine) == 0);
        int tid = omp_get_thread_num(), first = -1;
        for (int cpu = 0; cpu < CPU_SETSIZE && first < 0; cpu++)
            if (CPU_ISSET(cpu, &mine))
                first = cpu;
        CHECK(omp_get_num_threads() == threads);
        cpu_of[tid] = first;
        count_of[tid] = CPU_COUNT(&mine);
    }
    int k = free_run ? 0 : (index_of(cpu_of[1]) - 1 + n) % n;
    for (int i = 1; i < threads; i++) {
        if (free_run ? count_of[i] != n : count_of[i] != 1 || cpu_of[i] != list[(k + i) % n])
            return -1;
    }
    return k;
}

int main(int argc, char **argv)
{
    corpus_start();
    int free_run = argc > 1 && strcmp(argv[1], "free") == 0;
    cpu_set_t all;
    CHECK(sched_getaffinity(0, sizeof all, &all) == 0);
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++)
        if (CPU_ISSET(cpu, &all))
            list[n++] = cpu;
    if (n < 2)
        return 77;
    int t = 2 * n + 1 < 64 ? 2 * n + 1 : 63;
    int k = team_k(t, free_run);
    CHECK(k >= 0);
    /* the master moves to another CPU: the next region arranges after it */
    int to = list[(k + 1) % n];
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(to, &one);
    set_self(&one);
    int moved = team_k(t, free_run);
    CHECK(free_run ? moved == 0 : moved == (k + 1) % n);
    set_self(&all);
    CHECK(team_k(2, free_run) >= 0); /* a smaller team later: still arranged */
    printf("ok cpus=%d\n", n);
    return 0;
}
