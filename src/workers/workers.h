/* The worker core: what the thread pool (src/pool) and the OpenMP teams (src/omp) both
 * need from the threads they run on. Internal; for sources that define _GNU_SOURCE.
 *
 *   cpus.c   which CPUs a thread may use (affinity, then the cgroup's quota)
 *   spawn.c  starting a worker: bound for life, or begun on a CPU of its own and then
 *            given back its creator's CPUs or, past one thread per CPU, kept there
 *   budget.c the process's count of running threads, which every spinning wait checks
 *   ../common/fork.c  which process an object was made in (fork(2))
 *
 * The pool and a team each keep their own fork/join protocol and barrier on top
 * (shared/DESIGN.md, "One worker core"). */
#ifndef LOCKSTEP_WORKERS_H
#define LOCKSTEP_WORKERS_H

#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stddef.h>

#include "budget.h"

/* The calling thread's affinity into *set, and its CPUs, ascending, into cpus (the
 * first max of them). Returns how many went into cpus, or -errno. */
int ls_allowed_cpus(cpu_set_t *set, int *cpus, int max);

/* The calling thread's CPUs, read when a team or pool starts workers. */
struct ls_cpus {
    cpu_set_t set;
    int n;              /* CPUs in list; 0 when the affinity could not be read */
    int here;           /* index in list of the CPU the caller runs on (0 if not in it) */
    int list[CPU_SETSIZE];
};
void ls_cpus_read(struct ls_cpus *c);

/* Where unbound worker i (1, 2, ...) begins: the CPUs in turn after its creator's,
 * wrapping, so that workers start spread; -1 (anywhere) with one CPU or when
 * LOCKSTEP_NO_SPREAD is set. Left to the scheduler, a new thread often began on its
 * creator's CPU and stayed there while another CPU idled, and every spinning wait then
 * took hundreds of times its usual time until the scheduler moved it. */
int ls_start_cpu(const struct ls_cpus *c, int i);

/* The same turn after CPU `cpu` (the one the creator runs on now), or -1 as above */
int ls_cpu_after(const struct ls_cpus *c, int cpu, int i);

/* Whether the unbound workers of a team of `threads` (its creator among them) keep one
 * CPU each instead of taking back the creator's CPUs: when they outnumber the CPUs.
 * Set free, the scheduler often left the creator's CPU a thread more than the others
 * for seconds (3 against 1 at 4 threads on 2 CPUs), and every episode waited for that
 * CPU's extra hand-off. The team keeps them after its creator's CPU (ls_cpu_after),
 * and arranges them again when the creator has moved. */
static inline bool ls_keeps_cpu(const struct ls_cpus *c, int threads)
{
    return threads > c->n;
}

/* Keep a thread on one CPU: 0 or -errno */
int ls_pin(pthread_t thread, int cpu);

struct ls_spawn {
    void *(*fn)(void *);
    void *arg;
    const cpu_set_t *bind; /* the thread's CPUs for life, or NULL */
    int start_cpu;         /* an unbound thread: the CPU it begins on, or -1 */
    size_t stack;          /* bytes, or 0 for the default */
};

/* Start a worker. A start CPU the kernel refuses is dropped (the thread starts
 * anywhere); a refused binding is an error. 0, or -errno (nothing started). */
int ls_spawn(pthread_t *thread, const struct ls_spawn *s);

/* A worker begun on a start CPU takes back its creator's CPUs, once it runs there. */
static inline void ls_unpin(const cpu_set_t *creator)
{
    pthread_setaffinity_np(pthread_self(), sizeof *creator, creator);
}

#endif
