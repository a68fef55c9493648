/* The CPUs a thread may run on (cpus.h): the pool's placement and start CPUs and the
 * collectives' CPU count list them alike. */
#define _GNU_SOURCE
#include <errno.h>

#include "cpus.h"

int ls_allowed_cpus(cpu_set_t *set, int *cpus, int max)
{
    CPU_ZERO(set);
    if (sched_getaffinity(0, sizeof *set, set) != 0)
        return -errno;
    int n = 0;
    for (int cpu = 0; cpu < CPU_SETSIZE && n < max; cpu++)
        if (CPU_ISSET(cpu, set))
            cpus[n++] = cpu;
    return n;
}
