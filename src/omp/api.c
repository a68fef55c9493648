/* The omp_* API: thread and team queries, ICVs (per data environment: a setter changes
 * the calling thread's value only), timing, places, devices (the host only), pause. */
#define _GNU_SOURCE
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "omp_impl.h"

static struct ls_omp_team *team_of(void)
{
    return ls_omp_thr()->c.team;
}

LS_OMP_EXPORT int omp_get_thread_num(void)
{
    return ls_omp_self.c.team ? ls_omp_self.c.tid : 0;
}

LS_OMP_EXPORT int omp_get_num_threads(void)
{
    struct ls_omp_team *team = ls_omp_self.c.team;
    return team ? team->n : 1;
}

LS_OMP_EXPORT int omp_get_max_threads(void)
{
    return ls_omp_thr()->c.icv.nthreads;
}

LS_OMP_EXPORT void omp_set_num_threads(int n)
{
    ls_omp_icv_write(ls_omp_thr())->nthreads = n > 0 ? n : 1;
}

LS_OMP_EXPORT int omp_get_num_procs(void)
{
    return ls_omp_g.n_cpus;
}

LS_OMP_EXPORT int omp_in_parallel(void)
{
    struct ls_omp_team *team = team_of();
    return team && team->active_level > 0;
}

LS_OMP_EXPORT void omp_set_dynamic(int dyn)
{
    ls_omp_icv_write(ls_omp_thr())->dyn = dyn != 0;
}

LS_OMP_EXPORT int omp_get_dynamic(void)
{
    return ls_omp_thr()->c.icv.dyn;
}

LS_OMP_EXPORT void omp_set_nested(int nested)
{
    struct ls_omp_icv *icv = ls_omp_icv_write(ls_omp_thr());
    if (nested)
        icv->max_active_levels = LS_OMP_MAX_LEVELS;
    else if (icv->max_active_levels > 1)
        icv->max_active_levels = 1;
}

/* nested parallelism is on while a region here could still add an active level */
LS_OMP_EXPORT int omp_get_nested(void)
{
    struct ls_omp_thread *t = ls_omp_thr();
    int active = t->c.team ? t->c.team->active_level : 0;
    return t->c.icv.max_active_levels > 1 && t->c.icv.max_active_levels > active;
}

LS_OMP_EXPORT void omp_set_schedule(int kind, int chunk)
{
    struct ls_omp_icv *icv = ls_omp_icv_write(ls_omp_thr());
    int k = kind & 0x7fffffff;
    if (k < LS_SCHED_STATIC || k > LS_SCHED_AUTO)
        return;
    icv->run_sched = kind;
    icv->run_chunk = chunk > 0 ? chunk : 0;
}

LS_OMP_EXPORT void omp_get_schedule(int *kind, int *chunk)
{
    const struct ls_omp_icv *icv = &ls_omp_thr()->c.icv;
    *kind = icv->run_sched;
    *chunk = (int)(icv->run_chunk > INT_MAX ? INT_MAX : icv->run_chunk);
}

LS_OMP_EXPORT int omp_get_thread_limit(void)
{
    return ls_omp_thr()->c.icv.thread_limit;
}

LS_OMP_EXPORT int omp_get_supported_active_levels(void)
{
    return LS_OMP_MAX_LEVELS;
}

LS_OMP_EXPORT void omp_set_max_active_levels(int levels)
{
    if (levels >= 0)
        ls_omp_icv_write(ls_omp_thr())->max_active_levels =
            levels > LS_OMP_MAX_LEVELS ? LS_OMP_MAX_LEVELS : levels;
}

LS_OMP_EXPORT int omp_get_max_active_levels(void)
{
    return ls_omp_thr()->c.icv.max_active_levels;
}

LS_OMP_EXPORT int omp_get_level(void)
{
    struct ls_omp_team *team = team_of();
    return team ? team->level : 0;
}

LS_OMP_EXPORT int omp_get_active_level(void)
{
    struct ls_omp_team *team = team_of();
    return team ? team->active_level : 0;
}

/* The team at nesting level `level` (1 = outermost) and this thread's ancestor's
 * number in it; NULL for level 0 or a level outside [0, current]. */
LS_OMP_EXPORT int omp_get_ancestor_thread_num(int level)
{
    int tid = 0;
    if (level == 0)
        return 0;
    return ls_omp_ancestor(level, &tid) ? tid : -1;
}

LS_OMP_EXPORT int omp_get_team_size(int level)
{
    int tid;
    if (level == 0)
        return 1;
    struct ls_omp_team *team = ls_omp_ancestor(level, &tid);
    return team ? team->n : -1;
}

LS_OMP_EXPORT int omp_in_final(void)
{
    return ls_omp_thr()->c.task->final;
}

LS_OMP_EXPORT int omp_get_proc_bind(void)
{
    return ls_omp_thr()->c.icv.bind;
}

LS_OMP_EXPORT double omp_get_wtime(void)
{
    return (double)lockstep_now_ns() * 1e-9;
}

LS_OMP_EXPORT double omp_get_wtick(void)
{
    struct timespec ts;
    clock_getres(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Devices: this runtime has the host only; the host is the initial device, numbered
 * omp_get_num_devices() (0). */
LS_OMP_EXPORT int omp_get_num_devices(void) { return 0; }
LS_OMP_EXPORT int omp_get_initial_device(void) { return 0; }
LS_OMP_EXPORT int omp_get_device_num(void) { return 0; }
LS_OMP_EXPORT int omp_is_initial_device(void) { return 1; }
LS_OMP_EXPORT int omp_get_default_device(void) { return ls_omp_thr()->c.icv.default_device; }
LS_OMP_EXPORT void omp_set_default_device(int d) { ls_omp_icv_write(ls_omp_thr())->default_device = d; }
LS_OMP_EXPORT int omp_get_max_teams(void) { return ls_load_relaxed(&ls_omp_g.nteams); }
LS_OMP_EXPORT int omp_get_teams_thread_limit(void)
{
    return ls_load_relaxed(&ls_omp_g.teams_thread_limit);
}
/* nteams-var and teams-thread-limit-var are device-wide: a setter changes them for all */
LS_OMP_EXPORT void omp_set_num_teams(int n)
{
    if (n > 0)
        ls_store_relaxed(&ls_omp_g.nteams, n);
}
LS_OMP_EXPORT void omp_set_teams_thread_limit(int n)
{
    if (n > 0)
        ls_store_relaxed(&ls_omp_g.teams_thread_limit, n);
}
LS_OMP_EXPORT int omp_get_max_task_priority(void) { return ls_omp_g.max_task_priority; }

/* omp_pause_resource(kind, device): the calling initial thread's idle workers end. */
LS_OMP_EXPORT int omp_pause_resource(int kind, int device)
{
    if ((kind != 1 && kind != 2) || device != 0)
        return -1;
    ls_omp_pause_pool();
    return 0;
}

LS_OMP_EXPORT int omp_pause_resource_all(int kind)
{
    return omp_pause_resource(kind, 0);
}

LS_OMP_EXPORT void omp_display_env(int verbose)
{
    ls_omp_display_env(verbose);
}

/* fork(): the child has one thread, so no other team runs there, and no other thread
 * holds a lock it could release */
static void in_child(void)
{
    ls_budget_omp_reset();
    ls_omp_locks_reset();
}

__attribute__((constructor)) static void ls_omp_load(void)
{
    ls_omp_env_init();
    pthread_atfork(NULL, NULL, in_child);
}

/* ---- error directives ---------------------------------------------------------------- */

/* msg is len bytes, or NUL-terminated when len is (size_t)-1 */
static void print_directive(const char *what, const char *msg, size_t len)
{
    /* libgomp's form, which programs' tests match: a blank line, then the message */
    if (!msg)
        fprintf(stderr, "\n%s\n", what);
    else if (len == (size_t)-1)
        fprintf(stderr, "\n%s: %s\n", what, msg);
    else
        fprintf(stderr, "\n%s: %.*s\n", what, (int)(len > INT_MAX ? INT_MAX : len), msg);
}

LS_OMP_EXPORT void GOMP_warning(const char *msg, size_t len)
{
    print_directive("libgomp: error directive encountered", msg, len);
}

LS_OMP_EXPORT void GOMP_error(const char *msg, size_t len)
{
    print_directive("libgomp: fatal error: error directive encountered", msg, len);
    exit(EXIT_FAILURE);
}
