/* Places: OMP_PLACES, the place routines, and where a team's threads are bound.
 *
 * A place is a set of CPUs. OMP_PLACES names them abstractly (threads, cores, sockets,
 * ll_caches, numa_domains, each with an optional count: the first n places), read from
 * the kernel's topology in /sys, or lists them: places {a,b,...} with intervals
 * a:len[:stride] and exclusions !a inside, place intervals {...}:len[:stride] and
 * excluded places !{...} between them. Only CPUs this process may use are kept, and
 * a place left with none is dropped. Read once at load; a malformed value gets a
 * warning naming the variable and no places, the default.
 *
 * Binding (OMP_PROC_BIND with places): a team's thread i goes to the place after its
 * master's by i (close), spread evenly over the places (spread), or to its master's
 * (primary). Workers are bound when created. */
#define _GNU_SOURCE
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "omp_impl.h"
#include "../workers/workers.h"

#define MAX_CPUS 1024 /* CPUs a place list covers (cpu_set_t's default size) */

static int *place_cpus;   /* every place's CPUs, one after another */
static int *place_start;  /* [n_places + 1]: where each place starts in place_cpus */
static int n_places;
static cpu_set_t allowed;

/* ---- building the list ---------------------------------------------------------------- */

struct builder {
    int cpus[MAX_CPUS * 4];
    int ncpus;
    int starts[MAX_CPUS + 1];
    int nplaces;
};

static void add_place(struct builder *b, const cpu_set_t *set)
{
    if (b->nplaces >= MAX_CPUS)
        return;
    int start = b->ncpus;
    for (int c = 0; c < MAX_CPUS && b->ncpus < (int)(sizeof b->cpus / sizeof b->cpus[0]); c++)
        if (CPU_ISSET(c, set) && CPU_ISSET(c, &allowed))
            b->cpus[b->ncpus++] = c;
    if (b->ncpus > start)
        b->starts[b->nplaces++] = start;
}

/* "0-3,8,10-11" (sysfs' cpulist form) into set; false when it does not read */
static bool read_cpulist(const char *path, cpu_set_t *set)
{
    char buf[4096];
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    bool ok = fgets(buf, sizeof buf, f) != NULL;
    fclose(f);
    CPU_ZERO(set);
    for (char *p = buf; ok && *p && *p != '\n';) {
        char *end;
        long a = strtol(p, &end, 10), z = a;
        if (end == p)
            return false;
        if (*end == '-')
            z = strtol(end + 1, &end, 10);
        for (long c = a; c <= z && c < MAX_CPUS; c++)
            CPU_SET((int)c, set);
        p = *end == ',' ? end + 1 : end;
    }
    return ok;
}

/* The sysfs file naming the CPUs that share CPU c's unit of the given kind. */
static bool unit_of(const char *kind, int c, cpu_set_t *set)
{
    char path[256];
    if (strcmp(kind, "threads") == 0) {
        CPU_ZERO(set);
        CPU_SET(c, set);
        return true;
    }
    if (strcmp(kind, "cores") == 0)
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/topology/thread_siblings_list", c);
    else if (strcmp(kind, "sockets") == 0)
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/topology/core_siblings_list", c);
    else if (strcmp(kind, "ll_caches") == 0) {
        int last = -1;
        for (int k = 0; k < 16; k++) {
            snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/cache/index%d/shared_cpu_list",
                     c, k);
            FILE *f = fopen(path, "r");
            if (!f)
                break;
            fclose(f);
            last = k;
        }
        if (last < 0)
            return false;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/cache/index%d/shared_cpu_list",
                 c, last);
    } else { /* numa_domains: the node whose cpulist holds c */
        for (int node = 0; node < MAX_CPUS; node++) {
            snprintf(path, sizeof path, "/sys/devices/system/node/node%d/cpulist", node);
            if (!read_cpulist(path, set))
                return false;
            if (CPU_ISSET(c, set))
                return true;
        }
        return false;
    }
    return read_cpulist(path, set);
}

/* threads, cores, ... with an optional "(n)"; 0, or -1 when s is not such a name */
static int abstract(const char *s, struct builder *b)
{
    static const char *const names[] = {"threads", "cores", "sockets", "ll_caches",
                                        "numa_domains"};
    for (unsigned k = 0; k < sizeof names / sizeof names[0]; k++) {
        size_t len = strlen(names[k]);
        if (strncasecmp(s, names[k], len) != 0)
            continue;
        const char *p = s + len;
        long count = -1;
        while (isspace((unsigned char)*p))
            p++;
        if (*p == '(') {
            char *end;
            count = strtol(p + 1, &end, 10);
            if (end == p + 1 || *end != ')' || count < 1)
                return -1;
            p = end + 1;
        }
        while (isspace((unsigned char)*p))
            p++;
        if (*p)
            return -1;
        cpu_set_t done;
        CPU_ZERO(&done);
        for (int c = 0; c < MAX_CPUS && (count < 0 || b->nplaces < count); c++) {
            if (!CPU_ISSET(c, &allowed) || CPU_ISSET(c, &done))
                continue;
            cpu_set_t unit;
            if (!unit_of(names[k], c, &unit)) {
                CPU_ZERO(&unit);
                CPU_SET(c, &unit);
            }
            CPU_OR(&done, &done, &unit);
            add_place(b, &unit);
        }
        return 0;
    }
    return -1;
}

static bool number(const char **p, long *v)
{
    char *end;
    while (isspace((unsigned char)**p))
        (*p)++;
    *v = strtol(*p, &end, 10);
    if (end == *p)
        return false;
    *p = end;
    while (isspace((unsigned char)**p))
        (*p)++;
    return true;
}

/* ":len[:stride]" after an item, if any; false when malformed */
static bool interval(const char **p, long *len, long *stride)
{
    *len = 1;
    *stride = 1;
    if (**p != ':')
        return true;
    (*p)++;
    if (!number(p, len) || *len < 1)
        return false;
    if (**p == ':') {
        (*p)++;
        if (!number(p, stride))
            return false;
    }
    return true;
}

/* "{res,res,...}" into set, *p past the brace */
static bool place(const char **p, cpu_set_t *set)
{
    CPU_ZERO(set);
    if (**p != '{')
        return false;
    (*p)++;
    do {
        while (isspace((unsigned char)**p))
            (*p)++;
        bool exclude = **p == '!';
        if (exclude)
            (*p)++;
        long a, len, stride;
        if (!number(p, &a) || a < 0 || (!exclude && !interval(p, &len, &stride)))
            return false;
        if (exclude) {
            if (a < MAX_CPUS)
                CPU_CLR((int)a, set);
            continue;
        }
        for (long i = 0; i < len; i++) {
            long c = a + i * stride;
            if (c < 0 || c >= MAX_CPUS)
                return false;
            CPU_SET((int)c, set);
        }
    } while (**p == ',' && (*p)++);
    if (**p != '}')
        return false;
    (*p)++;
    return true;
}

static bool explicit_list(const char *s, struct builder *b)
{
    cpu_set_t sets[64], excluded;
    int nsets = 0;
    CPU_ZERO(&excluded);
    const char *p = s;
    do {
        while (isspace((unsigned char)*p))
            p++;
        bool exclude = *p == '!';
        if (exclude)
            p++;
        cpu_set_t one;
        long len, stride;
        if (!place(&p, &one) || (!exclude && !interval(&p, &len, &stride)))
            return false;
        if (exclude) {
            CPU_OR(&excluded, &excluded, &one);
            continue;
        }
        for (long k = 0; k < len; k++) { /* the place shifted by k * stride CPUs */
            if (nsets == 64)
                return false;
            CPU_ZERO(&sets[nsets]);
            for (int c = 0; c < MAX_CPUS; c++) {
                long to = c + k * stride;
                if (CPU_ISSET(c, &one) && to >= 0 && to < MAX_CPUS)
                    CPU_SET((int)to, &sets[nsets]);
            }
            nsets++;
        }
        while (isspace((unsigned char)*p))
            p++;
    } while (*p == ',' && p++);
    if (*p)
        return false;
    for (int i = 0; i < nsets; i++) {
        cpu_set_t keep;
        CPU_ZERO(&keep);
        for (int c = 0; c < MAX_CPUS; c++)
            if (CPU_ISSET(c, &sets[i]) && !CPU_ISSET(c, &excluded))
                CPU_SET(c, &keep);
        add_place(b, &keep);
    }
    return true;
}

int ls_omp_places_init(const char *s)
{
    int tmp[MAX_CPUS];
    if (ls_allowed_cpus(&allowed, tmp, MAX_CPUS) < 0)
        return -1;
    /* a libgomp loaded beside this runtime may have bound this thread to its first
     * place already (its constructor runs first): the places span the CPUs the
     * process's cgroup allows, of which this thread's are a part */
    cpu_set_t wide;
    if (read_cpulist("/sys/fs/cgroup/cpuset.cpus.effective", &wide) ||
        read_cpulist("/sys/devices/system/cpu/online", &wide)) {
        cpu_set_t both;
        CPU_AND(&both, &wide, &allowed);
        if (CPU_EQUAL(&both, &allowed))
            allowed = wide;
    }
    struct builder *b = calloc(1, sizeof *b);
    if (!b)
        return -1;
    int rc = abstract(s, b) == 0 || explicit_list(s, b) ? 0 : -1;
    if (rc == 0 && b->nplaces > 0) {
        place_cpus = malloc((size_t)b->ncpus * sizeof *place_cpus);
        place_start = malloc((size_t)(b->nplaces + 1) * sizeof *place_start);
        if (place_cpus && place_start) {
            memcpy(place_cpus, b->cpus, (size_t)b->ncpus * sizeof *place_cpus);
            memcpy(place_start, b->starts, (size_t)b->nplaces * sizeof *place_start);
            place_start[b->nplaces] = b->ncpus;
            n_places = b->nplaces;
        }
    }
    free(b);
    return rc;
}

int ls_omp_num_places(void)
{
    return n_places;
}

/* The place a team's thread tid is bound to, its master at place `at`; -1 for none. */
int ls_omp_place_for(int tid, int nth, int at, int bind)
{
    if (n_places == 0)
        return -1;
    if (at < 0)
        at = 0;
    if (bind == LS_BIND_PRIMARY)
        return at;
    if (bind == LS_BIND_SPREAD && nth > 0)
        return (at + (int)((long)tid * n_places / nth)) % n_places;
    return (at + tid) % n_places;
}

/* The CPUs of place p into set; false for no such place. */
bool ls_omp_place_set(int p, cpu_set_t *set)
{
    if (p < 0 || p >= n_places)
        return false;
    CPU_ZERO(set);
    for (int i = place_start[p]; i < place_start[p + 1]; i++)
        CPU_SET(place_cpus[i], set);
    return true;
}

/* ---- the routines ---------------------------------------------------------------------- */

LS_OMP_EXPORT int omp_get_num_places(void)
{
    return n_places;
}

LS_OMP_EXPORT int omp_get_place_num_procs(int p)
{
    return p < 0 || p >= n_places ? 0 : place_start[p + 1] - place_start[p];
}

LS_OMP_EXPORT void omp_get_place_proc_ids(int p, int *ids)
{
    if (p < 0 || p >= n_places || !ids)
        return;
    for (int i = place_start[p]; i < place_start[p + 1]; i++)
        ids[i - place_start[p]] = place_cpus[i];
}

LS_OMP_EXPORT int omp_get_place_num(void)
{
    return ls_omp_thr()->place;
}

/* Every thread's place partition is the whole list. */
LS_OMP_EXPORT int omp_get_partition_num_places(void)
{
    return n_places;
}

LS_OMP_EXPORT void omp_get_partition_place_nums(int *ids)
{
    for (int i = 0; ids && i < n_places; i++)
        ids[i] = i;
}
