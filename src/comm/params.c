/* The communicator's params: defaults, the environment (launchers' rank variables,
 * LOCKSTEP_* switches), and the checks create applies. */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "comm_impl.h"

lockstep_comm_params_t lockstep_comm_params_default(void)
{
    lockstep_comm_params_t p;
    memset(&p, 0, sizeof p);
    p.rank = 0;
    p.size = 1;
    p.timeout_ms = 60000;
    p.wait_policy = LOCKSTEP_WAIT_DEFAULT;
    /* A broadcast or allgather gains nothing from the large path's chunks until they
     * pipeline, and pays one synchronisation more: small_bytes is where the pipeline
     * starts to pay. allreduce_small_bytes 0: see LS_SMALL_FITS. */
    p.small_bytes = 256 * 1024;
    p.allreduce_small_bytes = 0; /* rank 0 chooses: LS_SMALL_FITS */
    p.kernel_copy = LOCKSTEP_KERNEL_COPY_AUTO;
    p.distance = LOCKSTEP_DISTANCE_AUTO;
    p.chunk_bytes = 1024 * 1024;
    return p;
}

size_t lockstep_dtype_size(lockstep_dtype_t dtype)
{
    switch (dtype) {
    case LOCKSTEP_DTYPE_F32: case LOCKSTEP_DTYPE_I32: return 4;
    case LOCKSTEP_DTYPE_F16: case LOCKSTEP_DTYPE_BF16: return 2;
    default: return 0;
    }
}

int lockstep_comm_rank(const lockstep_comm_t *c) { return c ? c->rank : -EINVAL; }
int lockstep_comm_size(const lockstep_comm_t *c) { return c ? c->size : -EINVAL; }

int lockstep_comm_kernel_copy(const lockstep_comm_t *c)
{
    return c ? c->kcopy : -EINVAL;
}

int ls_kernel_copy_env(const char **bad)
{
    const char *s = getenv("LOCKSTEP_KERNEL_COPY");
    if (!s)
        return -2;
    if (strcasecmp(s, "auto") == 0 || !*s)
        return LOCKSTEP_KERNEL_COPY_AUTO;
    if (strcasecmp(s, "off") == 0)
        return LOCKSTEP_KERNEL_COPY_OFF;
    if (strcasecmp(s, "wide") == 0)
        return LOCKSTEP_KERNEL_COPY_WIDE;
    if (bad)
        *bad = s;
    return -1;
}

long long ls_threshold(const char *var, size_t given, size_t max, const char **bad)
{
    const char *s = getenv(var);
    if (!s || !*s)
        return given <= max ? (long long)given : -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (*end || errno || *s == '-' || v > max) {
        if (bad)
            *bad = var;
        return -1;
    }
    return (long long)v;
}

static char env_error[64];

const char *lockstep_comm_env_error(void) { return env_error; }

/* A non-negative decimal integer from the environment: 1 found, 0 absent, -EINVAL bad. */
static int env_int(const char *name, int *out)
{
    const char *s = getenv(name);
    if (!s)
        return 0;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (!*s || *end || errno || v < 0 || v > 1 << 20) {
        snprintf(env_error, sizeof env_error, "%s", name);
        return -EINVAL;
    }
    *out = (int)v;
    return 1;
}

static void job_append(char *job, const char *part)
{
    size_t n = strlen(job);
    for (const char *p = part; *p && n < LOCKSTEP_COMM_JOB_MAX; p++)
        job[n++] = (isalnum((unsigned char)*p) || *p == '.' || *p == '-' || *p == '_') ? *p : '_';
    job[n] = 0;
}

int lockstep_comm_params_from_env(lockstep_comm_params_t *p)
{
    if (!p)
        return -EINVAL;
    env_error[0] = 0;
    static const struct { const char *rank, *size, *alt_rank, *alt_size; } sets[] = {
        {"LOCAL_RANK", "LOCAL_WORLD_SIZE", "RANK", "WORLD_SIZE"},
        {"OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE", NULL, NULL},
        {"LOCKSTEP_RANK", "LOCKSTEP_SIZE", NULL, NULL},
    };
    for (unsigned i = 0; i < sizeof sets / sizeof sets[0]; i++) {
        int rank = 0, size = 0;
        const char *rn = sets[i].rank, *sn = sets[i].size; /* the pair in use */
        int hr = env_int(rn, &rank), hs = env_int(sn, &size);
        if (hr < 0 || hs < 0)
            return -EINVAL;
        if (hr == 0 && sets[i].alt_rank) { /* torchrun without LOCAL_*: one node assumed */
            rn = sets[i].alt_rank;
            sn = sets[i].alt_size;
            hr = env_int(rn, &rank);
            hs = env_int(sn, &size);
            if (hr < 0 || hs < 0)
                return -EINVAL;
        }
        if (hr == 0 && hs == 0)
            continue;
        /* blame what is missing, else an impossible size, else a rank past the size */
        const char *bad = NULL;
        if (hr == 0)
            bad = rn;
        else if (hs == 0 || size < 1 || size > LOCKSTEP_COMM_MAX_RANKS)
            bad = sn;
        else if (rank >= size)
            bad = rn;
        if (bad) {
            snprintf(env_error, sizeof env_error, "%s", bad);
            return -EINVAL;
        }
        p->rank = rank;
        p->size = size;
        p->job[0] = 0;
        if (i == 0) {
            const char *addr = getenv("MASTER_ADDR"), *port = getenv("MASTER_PORT");
            const char *run = getenv("TORCHELASTIC_RUN_ID");
            job_append(p->job, "torch-");
            job_append(p->job, addr ? addr : "local");
            job_append(p->job, "-");
            job_append(p->job, port ? port : "0");
            if (run) {
                job_append(p->job, "-");
                job_append(p->job, run);
            }
            /* torchrun's node: nodes emulated on one machine (--nnodes 2 twice on one host)
             * share MASTER_* and the run id, and would otherwise meet in one segment,
             * where a rank of one node could take another's place */
            const char *node = getenv("GROUP_RANK");
            if (node && *node && strcmp(node, "0") != 0) {
                job_append(p->job, "-node");
                job_append(p->job, node);
            }
        } else if (i == 1) {
            const char *id = getenv("OMPI_MCA_orte_ess_jobid");
            if (!id)
                id = getenv("PMIX_NAMESPACE");
            job_append(p->job, "ompi-");
            job_append(p->job, id ? id : "job");
        } else {
            const char *job = getenv("LOCKSTEP_JOB");
            job_append(p->job, job && *job ? job : "default");
        }
        return 0;
    }
    snprintf(env_error, sizeof env_error, "LOCAL_RANK");
    return -ENOENT;
}


#define SLOT_MAX ((size_t)1 << 30)
#define BUFFER_MAX ((size_t)1 << 40)
#define RELAY_MAX ((size_t)1 << 31)

int lockstep_comm_params_check(const lockstep_comm_params_t *p, char *msg, size_t len)
{
    char dummy[1];
    const char *bad_isa = "", *bad_copy = "", *bad_var = "";
    if (!msg || !len) {
        msg = dummy;
        len = sizeof dummy;
    }
    if (!p)
        snprintf(msg, len, "no params");
    else if (!p->job[0] || memchr(p->job, 0, sizeof p->job) == NULL)
        snprintf(msg, len, "job must be 1 to %d characters", LOCKSTEP_COMM_JOB_MAX);
    else if (p->size < 1 || p->size > LOCKSTEP_COMM_MAX_RANKS || p->rank < 0 || p->rank >= p->size)
        snprintf(msg, len, "need 0 <= rank < size <= %d (got rank=%d size=%d)", LOCKSTEP_COMM_MAX_RANKS,
                 p->rank, p->size);
    else if (p->small_bytes < 256 || p->small_bytes > SLOT_MAX || p->small_bytes % 64)
        snprintf(msg, len, "small_bytes must be a multiple of 64 from 256 to 2**30 (got %zu)", p->small_bytes);
    else if (p->chunk_bytes < 4096 || p->chunk_bytes > SLOT_MAX || p->chunk_bytes % 64)
        snprintf(msg, len, "chunk_bytes must be a multiple of 64 from 4096 to 2**30 (got %zu)", p->chunk_bytes);
    else if (p->allreduce_small_bytes && (p->allreduce_small_bytes < 256 || p->allreduce_small_bytes > SLOT_MAX))
        snprintf(msg, len, "allreduce_small_bytes must be 0 (automatic) or from 256 to 2**30 (got %zu)",
                 p->allreduce_small_bytes);
    else if (p->buffer_bytes > BUFFER_MAX)
        snprintf(msg, len, "buffer_bytes must be at most 2**40 (got %zu)", p->buffer_bytes);
    else if (p->broadcast_eager_bytes > LS_EAGER_MAX)
        snprintf(msg, len, "broadcast_eager_bytes must be at most 65536 (got %zu)", p->broadcast_eager_bytes);
    else if (p->cpu_sharers && p->cpu_sharers < p->size)
        snprintf(msg, len, "cpu_sharers must be 0 (size) or at least size (got %d, size %d)", p->cpu_sharers,
                 p->size);
    else if (ls_isa_cap(&bad_isa) < 0)
        snprintf(msg, len, "environment variable LOCKSTEP_ISA must be avx512, avx2, base or unset (got \"%s\")",
                 bad_isa);
    else if ((unsigned)p->kernel_copy > LOCKSTEP_KERNEL_COPY_WIDE)
        snprintf(msg, len, "kernel_copy must be LOCKSTEP_KERNEL_COPY_AUTO, _OFF or _WIDE (got %d)",
                 (int)p->kernel_copy);
    else if (p->relay_bytes > RELAY_MAX || p->zero_copy_min_bytes > SLOT_MAX || p->prefetch_max_bytes > SLOT_MAX)
        snprintf(msg, len, "relay_bytes must be at most 2**31, zero_copy_min_bytes and prefetch_max_bytes at most "
                 "2**30 (0: the route table's)");
    else if (ls_threshold("LOCKSTEP_COMM_RELAY_BYTES", 0, RELAY_MAX, &bad_var) < 0 ||
             ls_threshold("LOCKSTEP_COMM_ZERO_COPY_MIN_BYTES", 0, SLOT_MAX, &bad_var) < 0 ||
             ls_threshold("LOCKSTEP_COMM_PREFETCH_MAX_BYTES", 0, SLOT_MAX, &bad_var) < 0)
        snprintf(msg, len, "environment variable %s must be a byte count (decimal) up to 2**%d, 0 for the route "
                 "table's, or unset (got \"%s\")", bad_var, strcmp(bad_var, "LOCKSTEP_COMM_RELAY_BYTES") ? 30 : 31,
                 getenv(bad_var));
    else if ((unsigned)p->distance > LOCKSTEP_DISTANCE_AUTO)
        snprintf(msg, len, "distance must be LOCKSTEP_DISTANCE_AUTO, _CLOSE or _FAR (got %d)", (int)p->distance);
    else if (ls_kernel_copy_env(&bad_copy) == -1)
        snprintf(msg, len, "environment variable LOCKSTEP_KERNEL_COPY must be auto, off, wide or unset (got \"%s\")",
                 bad_copy);
    else if (ls_distance_env(&bad_copy) == -1)
        snprintf(msg, len, "environment variable LOCKSTEP_COMM_DISTANCE must be auto, close, far or unset (got \"%s\")",
                 bad_copy);
    else {
        msg[0] = 0;
        return 0;
    }
    return -EINVAL;
}

/* A joiner whose params give another layout than rank 0's header: record the
 * mismatch as the segment's failure, so the ranks already waiting in create see it
 * between two wait slices and fail with it too, instead of waiting out their
 * deadline. The header and the state are the segment's first two lines, inside its
 * first page. */
