/* The CPUs a thread may run on, as a list. Internal; for sources that define
 * _GNU_SOURCE (cpu_set_t). */
#ifndef LOCKSTEP_COMMON_CPUS_H
#define LOCKSTEP_COMMON_CPUS_H

#include <sched.h>

/* The calling thread's affinity into *set, and its CPUs, ascending, into cpus (the
 * first max of them). Returns how many went into cpus, or -errno. */
int ls_allowed_cpus(cpu_set_t *set, int *cpus, int max);

#endif
