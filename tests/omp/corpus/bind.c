/* OMP_PROC_BIND without OMP_PLACES: the places are the default list, and a team of as
 * many threads as the process has CPUs covers them all (a libgomp loaded beside the
 * runtime binds the initial thread to one place before main; that must not shrink the
 * team's CPUs to that one). Prints "ok places=P cpus=C": the places, and the CPUs in
 * the union of the members' affinity masks. */
#define _GNU_SOURCE
#include <omp.h>
#include <sched.h>
#include <stdio.h>

#include "check.h"

int main(void)
{
    corpus_start();
    cpu_set_t all;
    CPU_ZERO(&all);
    int places = omp_get_num_places();
#pragma omp parallel
    {
        cpu_set_t mine;
        CHECK(sched_getaffinity(0, sizeof mine, &mine) == 0);
#pragma omp critical
        CPU_OR(&all, &all, &mine);
    }
    printf("ok places=%d cpus=%d\n", places, CPU_COUNT(&all));
    return 0;
}
