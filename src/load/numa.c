/* Where the loader's memory goes on machines with more than one NUMA node. Direct reads
 * write the tensors from the loader's own threads (and the pre-faulter touches the pages
 * first), which the pool spreads over the CPUs: left alone, the pages land on whatever
 * node those threads ran on, not on the node of the threads that will compute with
 * them (what mmap's first touch by the user gave for free). So the region is bound to
 * a node (mbind, preferred: a full node falls back rather than fail a fault) before
 * any of its pages is touched. No libnuma: two system calls and sysfs. */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "load_impl.h"

#define LS_MPOL_PREFERRED 1 /* linux/mempolicy.h */
#define LS_NODES_MAX 1024   /* nodes a mask can name (the kernel's default MAX_NUMNODES and more) */

/* The highest online node, from sysfs ("0", "0-3", "0,2-3"); 0 when unknown. */
int ls_numa_max_node(void)
{
    FILE *f = fopen("/sys/devices/system/node/online", "r");
    if (!f)
        return 0;
    int max = 0, a, b;
    char sep;
    while (fscanf(f, "%d", &a) == 1) {
        b = a;
        if (fscanf(f, "%c", &sep) == 1 && sep == '-' && fscanf(f, "%d", &b) == 1)
            (void)fscanf(f, "%c", &sep);
        max = b > max ? b : max;
    }
    fclose(f);
    return max;
}

int ls_numa_node_of_caller(void)
{
    unsigned cpu, node;
    return syscall(SYS_getcpu, &cpu, &node, NULL) == 0 ? (int)node : -1;
}

/* Bind [p, p + len) (page-aligned p) to node: 0, or -errno. */
int ls_numa_bind(void *p, size_t len, int node)
{
    if (node < 0 || node >= LS_NODES_MAX)
        return -EINVAL;
    unsigned long mask[LS_NODES_MAX / (8 * sizeof(unsigned long))] = {0};
    mask[(unsigned)node / (8 * sizeof(unsigned long))] = 1ul << ((unsigned)node % (8 * sizeof(unsigned long)));
    if (syscall(SYS_mbind, p, len, LS_MPOL_PREFERRED, mask, (unsigned long)LS_NODES_MAX + 1, 0ul) != 0)
        return -errno;
    return 0;
}
