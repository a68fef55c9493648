/* Topology: the peers of a rank nearest first (LOCKSTEP_ORDER_TOPOLOGY), from the CPU
 * each rank ran on at create: SMT siblings, then the same L3, then the same NUMA node,
 * as sysfs lists them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm_impl.h"

/* Does the cpulist file (e.g. "0-3,8") name cpu? -1 when unreadable. */
static int cpulist_has(const char *path, int cpu)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    char buf[4096];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    for (char *p = buf; *p;) {
        char *end;
        long lo = strtol(p, &end, 10), hi = lo;
        if (end == p)
            break;
        if (*end == '-')
            hi = strtol(end + 1, &end, 10);
        if (cpu >= lo && cpu <= hi)
            return 1;
        p = *end == ',' ? end + 1 : end;
        if (*p == '\n')
            break;
    }
    return 0;
}

static int cpu_distance(int a, int b)
{
    if (a < 0 || b < 0)
        return 4;
    if (a == b)
        return 0;
    char path[128];
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/topology/thread_siblings_list", a);
    if (cpulist_has(path, b) == 1)
        return 1;
    for (int idx = 0; idx < 8; idx++) {
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/cache/index%d/level", a, idx);
        FILE *f = fopen(path, "r");
        if (!f)
            break;
        int level = 0;
        int got = fscanf(f, "%d", &level);
        fclose(f);
        if (got == 1 && level == 3) {
            snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/cache/index%d/shared_cpu_list", a, idx);
            if (cpulist_has(path, b) == 1)
                return 2;
        }
    }
    for (int node = 0; node < 64; node++) {
        snprintf(path, sizeof path, "/sys/devices/system/node/node%d/cpulist", node);
        int ha = cpulist_has(path, a);
        if (ha < 0)
            break;
        if (ha == 1)
            return cpulist_has(path, b) == 1 ? 3 : 4;
    }
    return 4;
}

void ls_comm_topology(lockstep_comm_t *c)
{
    int mycpu = ls_ctl(c, c->rank)->own.cpu, n = 0, dist[LOCKSTEP_COMM_MAX_RANKS];
    for (int k = 1; k < c->size; k++) { /* rotated order breaks ties */
        int r = (c->rank + k) % c->size;
        dist[n] = cpu_distance(mycpu, ls_ctl(c, r)->own.cpu);
        c->topo[n++] = r;
    }
    for (int i = 1; i < n; i++) /* stable insertion sort by distance */
        for (int j = i; j > 0 && dist[j - 1] > dist[j]; j--) {
            int t = dist[j]; dist[j] = dist[j - 1]; dist[j - 1] = t;
            t = c->topo[j]; c->topo[j] = c->topo[j - 1]; c->topo[j - 1] = t;
        }
}

