/* The environment, read once when the runtime loads, as libgomp reads it: a malformed
 * value gets a one-line warning naming the variable, and the default stands. */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "omp_impl.h"

/* A positive int, or -1 (with a warning) when s is not one. */
static long parse_long(const char *name, const char *s, long lo, long hi)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    while (isspace((unsigned char)*end))
        end++;
    if (errno || end == s || *end || v < lo || v > hi) {
        ls_omp_warn("%s='%s' is not a number in [%ld, %ld]; using the default", name, s, lo, hi);
        return -1;
    }
    return v;
}

static int parse_bool(const char *name, const char *s, int *out)
{
    if (strcasecmp(s, "true") == 0 || strcmp(s, "1") == 0)
        *out = 1;
    else if (strcasecmp(s, "false") == 0 || strcmp(s, "0") == 0)
        *out = 0;
    else {
        ls_omp_warn("%s='%s' is neither true nor false; using the default", name, s);
        return -1;
    }
    return 0;
}

/* A comma-separated list of positive ints, into a new array; 0 on a bad list. */
static int parse_int_list(const char *name, const char *s, int **out, int (*one)(const char *))
{
    int cap = 1;
    for (const char *p = s; *p; p++)
        cap += *p == ',';
    int *v = calloc((size_t)cap, sizeof *v);
    if (!v)
        return 0;
    char *copy = strdup(s), *save = NULL;
    int n = 0;
    for (char *tok = copy ? strtok_r(copy, ",", &save) : NULL; tok; tok = strtok_r(NULL, ",", &save)) {
        int x = one(tok);
        if (x < 0) {
            n = -1;
            break;
        }
        v[n++] = x;
    }
    free(copy);
    if (n <= 0) {
        ls_omp_warn("%s='%s' is not a comma-separated list of valid values; using the "
                    "default", name, s);
        free(v);
        return 0;
    }
    *out = v;
    return n;
}

static int one_nthreads(const char *tok)
{
    char *end;
    errno = 0;
    long v = strtol(tok, &end, 10);
    while (isspace((unsigned char)*end))
        end++;
    return (errno || end == tok || *end || v < 1 || v > LS_OMP_MAX_THREADS) ? -1 : (int)v;
}

static int one_bind(const char *tok)
{
    while (isspace((unsigned char)*tok))
        tok++;
    static const struct { const char *name; int v; } names[] = {
        {"false", LS_BIND_FALSE}, {"true", LS_BIND_TRUE}, {"master", LS_BIND_PRIMARY},
        {"primary", LS_BIND_PRIMARY}, {"close", LS_BIND_CLOSE}, {"spread", LS_BIND_SPREAD}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcasecmp(tok, names[i].name) == 0)
            return names[i].v;
    return -1;
}

/* "[modifier:]kind[,chunk]" */
static void parse_schedule(const char *s)
{
    int mono = 0;
    const char *colon = strchr(s, ':');
    if (colon) {
        if (strncasecmp(s, "monotonic", (size_t)(colon - s)) == 0 && colon - s == 9)
            mono = 1;
        else if (!(strncasecmp(s, "nonmonotonic", (size_t)(colon - s)) == 0 && colon - s == 12))
            goto bad;
        s = colon + 1;
    }
    static const struct { const char *name; int v; } kinds[] = {
        {"static", LS_SCHED_STATIC}, {"dynamic", LS_SCHED_DYNAMIC},
        {"guided", LS_SCHED_GUIDED}, {"auto", LS_SCHED_AUTO}};
    const char *comma = strchr(s, ',');
    size_t len = comma ? (size_t)(comma - s) : strlen(s);
    int kind = 0;
    for (size_t i = 0; i < 4; i++)
        if (strlen(kinds[i].name) == len && strncasecmp(s, kinds[i].name, len) == 0)
            kind = kinds[i].v;
    if (!kind)
        goto bad;
    long chunk = 0;
    if (comma) {
        char *end;
        errno = 0;
        chunk = strtol(comma + 1, &end, 10);
        if (errno || end == comma + 1 || *end || chunk < 1)
            goto bad;
    }
    ls_omp_g.icv.run_sched = kind | (mono ? (int)LS_SCHED_MONOTONIC : 0);
    ls_omp_g.icv.run_chunk = chunk;
    return;
bad:
    ls_omp_warn("OMP_SCHEDULE='%s' is not [monotonic:|nonmonotonic:]static|dynamic|guided|auto"
                "[,chunk]; using the default", s);
}

/* "N[B|K|M|G]" with K the default unit */
static void parse_stack(const char *name, const char *s)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    unsigned long long unit = 1024;
    while (isspace((unsigned char)*end))
        end++;
    switch (toupper((unsigned char)*end)) {
    case 0: break;
    case 'B': unit = 1; end++; break;
    case 'K': end++; break;
    case 'M': unit = 1024ull * 1024; end++; break;
    case 'G': unit = 1024ull * 1024 * 1024; end++; break;
    default: end = (char *)"?"; break;
    }
    while (isspace((unsigned char)*end))
        end++;
    if (errno || end == s || *end || v == 0 || v > SIZE_MAX / unit / 2) {
        ls_omp_warn("%s='%s' is not a size like 4M; using the default", name, s);
        return;
    }
    ls_omp_g.stacksize = (size_t)(v * unit);
}

/* `lockstep omp run` names the process it runs (LOCKSTEP_OMP_RUN_PID): if that one
 * never calls the runtime, it says so at exit. */
static void say_if_unused(void)
{
    if (!ls_load_relaxed(&ls_omp_used))
        fprintf(stderr, "lockstep-omp: %s made no OpenMP calls: it ran unchanged, without "
                "lockstep's runtime\n", program_invocation_short_name);
}

static void print_stats(void)
{
    fprintf(stderr,
            "lockstep-omp: stats: regions=%llu barriers=%llu tasks=%llu workers=%llu\n",
            (unsigned long long)__atomic_load_n(&ls_omp_stats.regions, __ATOMIC_RELAXED),
            (unsigned long long)__atomic_load_n(&ls_omp_stats.barriers, __ATOMIC_RELAXED),
            (unsigned long long)__atomic_load_n(&ls_omp_stats.tasks, __ATOMIC_RELAXED),
            (unsigned long long)__atomic_load_n(&ls_omp_stats.workers, __ATOMIC_RELAXED));
}

void ls_omp_env_init(void)
{
    struct ls_omp_global *g = &ls_omp_g;
    const char *s;
    g->n_cpus = lockstep_cpus_available();
    g->icv.nthreads = g->n_cpus;
    g->icv.run_sched = LS_SCHED_DYNAMIC;
    g->icv.run_chunk = 0;
    g->icv.dyn = 0;
    g->icv.max_active_levels = 1;
    g->icv.def_allocator = 1; /* omp_default_mem_alloc */
    g->icv.bind = LS_BIND_FALSE;
    g->thread_limit = INT_MAX;
    g->spincount = -1;
    g->wait_policy = LOCKSTEP_WAIT_AUTO;

    if ((s = getenv("OMP_NUM_THREADS")) && *s) {
        int *list = NULL;
        int n = parse_int_list("OMP_NUM_THREADS", s, &list, one_nthreads);
        if (n > 0) {
            g->nthreads_list = list;
            g->n_nthreads_list = n;
            g->icv.nthreads = list[0];
        }
    }
    if ((s = getenv("OMP_SCHEDULE")) && *s)
        parse_schedule(s);
    int b;
    if ((s = getenv("OMP_DYNAMIC")) && *s && parse_bool("OMP_DYNAMIC", s, &b) == 0)
        g->icv.dyn = b;
    /* max-active-levels-var: OMP_MAX_ACTIVE_LEVELS, else OMP_NESTED, else every level
     * when OMP_NUM_THREADS or OMP_PROC_BIND lists more than one level, else one */
    long v;
    bool levels_from_lists = false;
    if ((s = getenv("OMP_MAX_ACTIVE_LEVELS")) && *s &&
        (v = parse_long("OMP_MAX_ACTIVE_LEVELS", s, 0, INT_MAX)) >= 0)
        g->icv.max_active_levels = v > LS_OMP_MAX_LEVELS ? LS_OMP_MAX_LEVELS : (int)v;
    else if ((s = getenv("OMP_NESTED")) && *s && parse_bool("OMP_NESTED", s, &b) == 0)
        g->icv.max_active_levels = b ? LS_OMP_MAX_LEVELS : 1;
    else
        levels_from_lists = true;
    if ((s = getenv("OMP_THREAD_LIMIT")) && *s &&
        (v = parse_long("OMP_THREAD_LIMIT", s, 1, INT_MAX)) >= 0)
        g->thread_limit = (int)v;
    g->icv.thread_limit = g->thread_limit;
    if ((s = getenv("OMP_ALLOCATOR")) && *s && ls_omp_allocator_parse(s, &g->icv.def_allocator))
        ls_omp_warn("OMP_ALLOCATOR='%s' is not a predefined allocator or a memory space with "
                    "traits; using omp_default_mem_alloc", s);
    if ((s = getenv("OMP_AFFINITY_FORMAT")) && ls_omp_affinity_init(s) != 0)
        ls_omp_warn("OMP_AFFINITY_FORMAT='%s' has a field that is not one of %%t %%T %%L %%n "
                    "%%N %%a %%H %%P %%i %%A (or their long names); using the default", s);
    if ((s = getenv("OMP_DISPLAY_AFFINITY")) && *s &&
        parse_bool("OMP_DISPLAY_AFFINITY", s, &b) == 0)
        g->display_affinity = b;
    if ((s = getenv("OMP_NUM_TEAMS")) && *s &&
        (v = parse_long("OMP_NUM_TEAMS", s, 1, INT_MAX)) >= 0)
        g->nteams = (int)v;
    if ((s = getenv("OMP_TEAMS_THREAD_LIMIT")) && *s &&
        (v = parse_long("OMP_TEAMS_THREAD_LIMIT", s, 1, INT_MAX)) >= 0)
        g->teams_thread_limit = (int)v;
    if ((s = getenv("OMP_CANCELLATION")) && *s && parse_bool("OMP_CANCELLATION", s, &b) == 0)
        g->cancellation = b;
    if ((s = getenv("OMP_MAX_TASK_PRIORITY")) && *s &&
        (v = parse_long("OMP_MAX_TASK_PRIORITY", s, 0, INT_MAX)) >= 0)
        g->max_task_priority = (int)v;
    if ((s = getenv("OMP_DEFAULT_DEVICE")) && *s &&
        (v = parse_long("OMP_DEFAULT_DEVICE", s, 0, INT_MAX)) >= 0)
        g->icv.default_device = (int)v;
    if ((s = getenv("OMP_PROC_BIND")) && *s) {
        int *list = NULL;
        int n = parse_int_list("OMP_PROC_BIND", s, &list, one_bind);
        if (n > 0) {
            g->bind_list = list;
            g->n_bind_list = n;
            g->icv.bind = list[0];
        }
    }
    if (levels_from_lists && (g->n_nthreads_list > 1 || g->n_bind_list > 1))
        g->icv.max_active_levels = LS_OMP_MAX_LEVELS;
    if ((s = getenv("OMP_PLACES")) && *s) {
        if (ls_omp_places_init(s) != 0)
            ls_omp_warn("OMP_PLACES='%s' is not threads, cores, sockets, ll_caches, "
                        "numa_domains (each with an optional (count)) or a list of places; "
                        "using the default", s);
        else
            g->places = ls_omp_num_places();
        if (g->icv.bind == LS_BIND_FALSE && g->places && !getenv("OMP_PROC_BIND"))
            g->icv.bind = LS_BIND_TRUE;
    }
    /* binding without OMP_PLACES: a place per core, libgomp's default */
    if (g->icv.bind != LS_BIND_FALSE && !g->places && ls_omp_places_init("cores") == 0)
        g->places = ls_omp_num_places();
    if ((s = getenv("GOMP_STACKSIZE")) && *s)
        parse_stack("GOMP_STACKSIZE", s);
    if ((s = getenv("OMP_STACKSIZE")) && *s)
        parse_stack("OMP_STACKSIZE", s);
    if ((s = getenv("OMP_WAIT_POLICY")) && *s) {
        if (strcasecmp(s, "active") == 0)
            g->wait_policy = LOCKSTEP_WAIT_ACTIVE;
        else if (strcasecmp(s, "passive") == 0)
            g->wait_policy = LOCKSTEP_WAIT_PASSIVE;
        else
            ls_omp_warn("OMP_WAIT_POLICY='%s' is neither active nor passive; using the default", s);
    }
    if ((s = getenv("LOCKSTEP_WAIT_POLICY")) && *s) {
        lockstep_wait_t probe;
        if (lockstep_wait_init(&probe, LOCKSTEP_WAIT_DEFAULT, 1, 0) == 0)
            g->wait_policy = (lockstep_wait_policy_t)probe.policy;
        else
            ls_omp_warn("LOCKSTEP_WAIT_POLICY='%s' is not auto, active or passive; using the "
                        "default", s);
    }
    if ((s = getenv("GOMP_SPINCOUNT")) && *s) {
        if (strcasecmp(s, "infinite") == 0 || strcasecmp(s, "infinity") == 0)
            g->wait_policy = LOCKSTEP_WAIT_ACTIVE;
        else if ((v = parse_long("GOMP_SPINCOUNT", s, 0, LONG_MAX)) >= 0)
            g->spincount = v;
    }
    if ((s = getenv("LOCKSTEP_OMP_RUN_PID")) && atol(s) == (long)getpid())
        atexit(say_if_unused);
    ls_omp_init_wait(&g->lock_wait);
    g->stats = ls_env_set("LOCKSTEP_OMP_STATS");
    if (g->stats)
        atexit(print_stats);
    if ((s = getenv("OMP_DISPLAY_ENV")) && *s) {
        if (strcasecmp(s, "verbose") == 0)
            ls_omp_display_env(1);
        else if (parse_bool("OMP_DISPLAY_ENV", s, &b) == 0 && b)
            ls_omp_display_env(0);
    }
}

static const char *bind_name(int b)
{
    static const char *names[] = {"FALSE", "TRUE", "PRIMARY", "CLOSE", "SPREAD"};
    return b >= 0 && b <= 4 ? names[b] : "?";
}

void ls_omp_display_env(int verbose)
{
    const struct ls_omp_global *g = &ls_omp_g;
    static const char *sched[] = {"?", "STATIC", "DYNAMIC", "GUIDED", "AUTO"};
    FILE *f = stderr;
    fprintf(f, "\nOPENMP DISPLAY ENVIRONMENT BEGIN\n  _OPENMP = '201511'\n");
    fprintf(f, "  OMP_DYNAMIC = '%s'\n", g->icv.dyn ? "TRUE" : "FALSE");
    fprintf(f, "  OMP_NUM_THREADS = '");
    if (g->n_nthreads_list)
        for (int i = 0; i < g->n_nthreads_list; i++)
            fprintf(f, "%s%d", i ? "," : "", g->nthreads_list[i]);
    else
        fprintf(f, "%d", g->icv.nthreads);
    int k = g->icv.run_sched & 0x7fffffff;
    fprintf(f, "'\n  OMP_SCHEDULE = '%s%s", (g->icv.run_sched & (int)LS_SCHED_MONOTONIC) ?
            "MONOTONIC:" : "", sched[k >= 1 && k <= 4 ? k : 0]);
    if (g->icv.run_chunk)
        fprintf(f, ",%ld", g->icv.run_chunk);
    fprintf(f, "'\n  OMP_PROC_BIND = '%s'\n", bind_name(g->icv.bind));
    fprintf(f, "  OMP_STACKSIZE = '%zu'\n", g->stacksize);
    fprintf(f, "  OMP_WAIT_POLICY = '%s'\n",
            g->wait_policy == LOCKSTEP_WAIT_ACTIVE ? "ACTIVE" :
            g->wait_policy == LOCKSTEP_WAIT_PASSIVE ? "PASSIVE" : "AUTO");
    fprintf(f, "  OMP_THREAD_LIMIT = '%d'\n", g->thread_limit);
    fprintf(f, "  OMP_MAX_ACTIVE_LEVELS = '%d'\n", g->icv.max_active_levels);
    fprintf(f, "  OMP_CANCELLATION = '%s'\n  OMP_DEFAULT_DEVICE = '%d'\n",
            g->cancellation ? "TRUE" : "FALSE", g->icv.default_device);
    fprintf(f, "  OMP_MAX_TASK_PRIORITY = '%d'\n", g->max_task_priority);
    fprintf(f, "  OMP_ALLOCATOR = '%s'\n", ls_omp_allocator_name(g->icv.def_allocator));
    fprintf(f, "  OMP_NUM_TEAMS = '%d'\n  OMP_TEAMS_THREAD_LIMIT = '%d'\n", g->nteams,
            g->teams_thread_limit);
    if (verbose)
        fprintf(f, "  GOMP_SPINCOUNT = '%ld'\n  LOCKSTEP_OMP_STATS = '%d'\n", g->spincount,
                g->stats);
    fprintf(f, "OPENMP DISPLAY ENVIRONMENT END\n");
}
