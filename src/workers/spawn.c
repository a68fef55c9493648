/* Starting a worker (workers.h): one way for the pool and the OpenMP teams. */
#define _GNU_SOURCE
#include <errno.h>

#include "../internal.h"
#include "workers.h"

int ls_cpu_after(const struct ls_cpus *c, int cpu, int i)
{
    if (c->n < 2 || ls_env_set("LOCKSTEP_NO_SPREAD"))
        return -1;
    int at = 0;
    for (int k = 0; k < c->n; k++)
        if (c->list[k] == cpu)
            at = k;
    return c->list[(at + i) % c->n];
}

int ls_start_cpu(const struct ls_cpus *c, int i)
{
    return c->n ? ls_cpu_after(c, c->list[c->here], i) : -1;
}

int ls_pin(pthread_t thread, int cpu)
{
    if (cpu < 0 || cpu >= CPU_SETSIZE)
        return -EINVAL;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    return -pthread_setaffinity_np(thread, sizeof one, &one);
}

static int create(pthread_t *thread, const struct ls_spawn *s, const cpu_set_t *cpus)
{
    pthread_attr_t attr;
    int rc = pthread_attr_init(&attr);
    if (rc)
        return -rc;
    if (s->stack) /* a size the system refuses: its default, as without one */
        pthread_attr_setstacksize(&attr, s->stack);
    if (cpus)
        rc = pthread_attr_setaffinity_np(&attr, sizeof *cpus, cpus);
    if (!rc)
        rc = pthread_create(thread, &attr, s->fn, s->arg);
    pthread_attr_destroy(&attr);
    return -rc;
}

int ls_spawn(pthread_t *thread, const struct ls_spawn *s)
{
    if (s->bind || s->start_cpu < 0 || s->start_cpu >= CPU_SETSIZE)
        return create(thread, s, s->bind);
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(s->start_cpu, &one);
    int rc = create(thread, s, &one);
    return rc ? create(thread, s, NULL) : 0; /* that CPU was refused: start anywhere */
}
