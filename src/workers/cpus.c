/* Which CPUs a thread may use (workers.h): its affinity, and for the count the cgroup's
 * CPU quota as well. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lockstep/wait.h"
#include "workers.h"

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

void ls_cpus_read(struct ls_cpus *c)
{
    int n = ls_allowed_cpus(&c->set, c->list, CPU_SETSIZE);
    c->n = n > 0 ? n : 0;
    c->here = 0;
    int cpu = sched_getcpu();
    for (int k = 0; k < c->n; k++)
        if (c->list[k] == cpu)
            c->here = k;
}

/* The cgroup CPU quota in whole CPUs (rounded up), or 0 when there is none. */
static int cgroup_cpu_limit(void)
{
    FILE *f = fopen("/sys/fs/cgroup/cpu.max", "r");
    if (f) {
        char quota[32] = {0};
        long long period = 0;
        int got = fscanf(f, "%31s %lld", quota, &period);
        fclose(f);
        if (got == 2 && strcmp(quota, "max") != 0 && period > 0) {
            long long q = atoll(quota);
            if (q > 0)
                return (int)((q + period - 1) / period);
        }
        return 0;
    }
    f = fopen("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "r");
    if (f) {
        long long q = -1, period = 0;
        int got = fscanf(f, "%lld", &q);
        fclose(f);
        FILE *p = fopen("/sys/fs/cgroup/cpu/cpu.cfs_period_us", "r");
        if (p) {
            if (fscanf(p, "%lld", &period) != 1)
                period = 0;
            fclose(p);
        }
        if (got == 1 && q > 0 && period > 0)
            return (int)((q + period - 1) / period);
    }
    return 0;
}

int lockstep_cpus_available(void)
{
    static int cached; /* 0 = not yet computed; benign race: every thread computes the same */
    int n = __atomic_load_n(&cached, __ATOMIC_RELAXED);
    if (n > 0)
        return n;
    cpu_set_t set;
    CPU_ZERO(&set);
    n = 0;
    if (sched_getaffinity(0, sizeof set, &set) == 0)
        n = CPU_COUNT(&set);
    if (n <= 0) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        n = c > 0 ? (int)c : 1;
    }
    int quota = cgroup_cpu_limit();
    if (quota > 0 && quota < n)
        n = quota;
    __atomic_store_n(&cached, n, __ATOMIC_RELAXED);
    return n;
}
