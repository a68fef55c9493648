/* Doacross loops: ordered(n) with depend(sink: ...) and depend(source).
 *
 * The work-shared loop runs over the first of the n counts (its iterations numbered
 * from 0); the others are the nested loops each iteration runs in order. Iterations
 * are handed out in blocks that one thread runs in lexicographic order: a chunk for
 * dynamic and chunked static schedules, one outer iteration otherwise. So a block's
 * progress is one number, 1 + the flattened iteration vector (relative to the block)
 * of the last iteration that posted (depend(source)), and waiting for an iteration
 * (depend(sink)) is waiting until its block's number passes it. The first thread in
 * the construct sets the blocks up (ws->doacross, under the same agreement as task
 * reductions'); a team of one needs none of it. */
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "omp_impl.h"

struct ls_omp_doacross {
    uint64_t block;         /* outer iterations per block */
    uint64_t inner;         /* iterations of the nested loops per outer iteration */
    unsigned ncounts;
    uint64_t counts[8];     /* the nested loops' counts (counts[0] unused), or more below */
    uint64_t *dims;         /* = counts, or a longer array after progress */
    uint64_t *progress;     /* per block, 1 + the last posted flattened vector */
};

#define DOACROSS_BUSY ((struct ls_omp_doacross *)1)

static struct ls_omp_doacross *make(unsigned ncounts, const uint64_t *counts, uint64_t block)
{
    uint64_t inner = 1, nblocks = counts[0] / block + (counts[0] % block != 0);
    for (unsigned i = 1; i < ncounts; i++)
        if (__builtin_mul_overflow(inner, counts[i], &inner))
            return NULL;
    uint64_t span;
    if (__builtin_mul_overflow(block, inner, &span) || span == UINT64_MAX)
        return NULL;
    size_t extra = ncounts > 8 ? ncounts * sizeof(uint64_t) : 0;
    struct ls_omp_doacross *d = calloc(1, sizeof *d + extra + nblocks * sizeof(uint64_t));
    if (!d)
        return NULL;
    d->block = block;
    d->inner = inner;
    d->ncounts = ncounts;
    d->dims = ncounts > 8 ? (uint64_t *)(d + 1) : d->counts;
    memcpy(d->dims, counts, ncounts * sizeof(uint64_t));
    d->progress = (uint64_t *)(void *)((char *)(d + 1) + extra); /* extra: 8-byte units */
    return d;
}

/* After entering the loop: the first thread makes the blocks, the others wait for them. */
static void setup(unsigned ncounts, const uint64_t *counts, int sched, uint64_t chunk)
{
    struct ls_omp_thread *t = ls_omp_thr();
    struct ls_omp_team *team = t->c.team;
    if (!team || team->n == 1 || !t->c.ws || ncounts == 0)
        return;
    struct ls_omp_ws *ws = t->c.ws;
    struct ls_omp_doacross *expect = NULL;
    if (__atomic_compare_exchange_n(&ws->doacross, &expect, DOACROSS_BUSY, false,
                                    __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
        for (unsigned i = 0; i < ncounts; i++)
            if (counts[i] == 0) { /* no iteration runs: nothing posts or waits */
                ls_store_release(&ws->doacross, NULL);
                return;
            }
        bool chunked = sched == LS_SCHED_DYNAMIC || (sched == LS_SCHED_STATIC && chunk > 0);
        struct ls_omp_doacross *d = make(ncounts, counts, chunked ? chunk : 1);
        if (!d && chunked)
            d = make(ncounts, counts, 1);
        if (!d) {
            ls_omp_warn("no memory for a doacross loop of %llu iterations",
                        (unsigned long long)counts[0]);
            abort();
        }
        ls_store_release(&ws->doacross, d); /* publishes the zeroed progress */
    } else {
        LS_OMP_SPIN_UNTIL(ls_load_acquire(&ws->doacross) != DOACROSS_BUSY);
    }
}

static struct ls_omp_doacross *current(void)
{
    struct ls_omp_ws *ws = ls_omp_self.c.ws;
    struct ls_omp_doacross *d = ws ? ls_load_acquire(&ws->doacross) : NULL;
    return d == DOACROSS_BUSY ? NULL : d;
}

/* The block of outer iteration v0, and v's place in it. */
static uint64_t *locate(struct ls_omp_doacross *d, uint64_t v0, const uint64_t *rest,
                        uint64_t *flat)
{
    uint64_t b = v0 / d->block, f = v0 - b * d->block;
    for (unsigned i = 1; i < d->ncounts; i++)
        f = f * d->dims[i] + rest[i - 1];
    *flat = f;
    return &d->progress[b];
}

static void post(const uint64_t *v)
{
    struct ls_omp_doacross *d = current();
    if (!d)
        return; /* a team of one, or no iteration: nobody waits for another */
    uint64_t flat, *p = locate(d, v[0], v + 1, &flat);
    /* release: the iteration's writes before its number; blocks post in order */
    ls_store_release(p, flat + 1u);
}

static void wait_for(uint64_t first, const uint64_t *rest)
{
    struct ls_omp_doacross *d = current();
    if (!d)
        return; /* a team of one, or no iteration: nobody waits for another */
    if (first >= d->dims[0])
        return; /* outside the iteration space: nothing to wait for */
    uint64_t flat, *p = locate(d, first, rest, &flat);
    LS_OMP_SPIN_UNTIL(ls_load_acquire(p) > flat);
}

LS_OMP_EXPORT void GOMP_doacross_post(long *counts)
{
    struct ls_omp_doacross *d = current();
    uint64_t v[d ? d->ncounts : 1];
    for (unsigned i = 0; i < (d ? d->ncounts : 1u); i++)
        v[i] = (uint64_t)counts[i];
    post(v);
}

LS_OMP_EXPORT void GOMP_doacross_ull_post(unsigned long long *counts)
{
    post((const uint64_t *)counts);
}

/* The sink's other iteration numbers from the argument list (long or unsigned long
 * long: the same 64 bits on the ABIs gcc emits this for). */
static void wait_va(uint64_t first, va_list ap, bool ull)
{
    struct ls_omp_doacross *d = current();
    unsigned n = d ? d->ncounts : 1u;
    uint64_t rest[n];
    for (unsigned i = 1; i < n; i++)
        rest[i - 1] = ull ? va_arg(ap, unsigned long long) : (uint64_t)va_arg(ap, long);
    wait_for(first, rest);
}

LS_OMP_EXPORT void GOMP_doacross_wait(long first, ...)
{
    va_list ap;
    va_start(ap, first);
    wait_va((uint64_t)first, ap, false);
    va_end(ap);
}

LS_OMP_EXPORT void GOMP_doacross_ull_wait(unsigned long long first, ...)
{
    va_list ap;
    va_start(ap, first);
    wait_va(first, ap, true);
    va_end(ap);
}

/* ---- the loops' entry points ------------------------------------------------------------ */

static bool start_l(unsigned ncounts, long *counts, int sched, long chunk, long *is, long *ie,
                    uintptr_t *reductions, void **mem)
{
    struct ls_omp_thread *t = ls_omp_thr();
    long ch = chunk;
    int kind = ls_omp_resolve_sched(sched, &ch, &t->c.icv);
    bool more = ls_omp_start_long(kind, false, 0, counts[0], 1, ch, is, ie, mem);
    uint64_t c[ncounts ? ncounts : 1];
    for (unsigned i = 0; i < ncounts; i++)
        c[i] = counts[i] > 0 ? (uint64_t)counts[i] : 0u;
    setup(ncounts, c, kind, (uint64_t)ch);
    if (reductions)
        ls_omp_ws_reductions(t, reductions);
    return more;
}

static bool start_u(unsigned ncounts, unsigned long long *counts, int sched,
                    unsigned long long chunk, unsigned long long *is, unsigned long long *ie,
                    uintptr_t *reductions, void **mem)
{
    struct ls_omp_thread *t = ls_omp_thr();
    long ch = chunk > (unsigned long long)LONG_MAX ? LONG_MAX : (long)chunk;
    int kind = ls_omp_resolve_sched(sched, &ch, &t->c.icv);
    bool more = ls_omp_start_ull(kind, false, true, 0, counts[0], 1, (unsigned long long)ch, is,
                                 ie, mem);
    setup(ncounts, (const uint64_t *)counts, kind, (uint64_t)ch);
    if (reductions)
        ls_omp_ws_reductions(t, reductions);
    return more;
}

#define DOACROSS_ENTRIES(name, sched)                                                       \
    LS_OMP_EXPORT bool GOMP_loop_doacross_##name##_start(unsigned n, long *counts, long ch,    \
                                                         long *is, long *ie)                  \
    {                                                                                          \
        return start_l(n, counts, sched, ch, is, ie, NULL, NULL);                              \
    }                                                                                          \
    LS_OMP_EXPORT bool GOMP_loop_ull_doacross_##name##_start(                                  \
        unsigned n, unsigned long long *counts, unsigned long long ch, unsigned long long *is, \
        unsigned long long *ie)                                                                \
    {                                                                                          \
        return start_u(n, counts, sched, ch, is, ie, NULL, NULL);                              \
    }

DOACROSS_ENTRIES(static, LS_SCHED_STATIC)
DOACROSS_ENTRIES(dynamic, LS_SCHED_DYNAMIC)
DOACROSS_ENTRIES(guided, LS_SCHED_GUIDED)

LS_OMP_EXPORT bool GOMP_loop_doacross_runtime_start(unsigned n, long *counts, long *is, long *ie)
{
    return start_l(n, counts, 0, 0, is, ie, NULL, NULL);
}

LS_OMP_EXPORT bool GOMP_loop_ull_doacross_runtime_start(unsigned n, unsigned long long *counts,
                                                        unsigned long long *is,
                                                        unsigned long long *ie)
{
    return start_u(n, counts, 0, 0, is, ie, NULL, NULL);
}

LS_OMP_EXPORT bool GOMP_loop_doacross_start(unsigned n, long *counts, long sched, long ch,
                                            long *is, long *ie, uintptr_t *reductions,
                                            void **mem)
{
    return start_l(n, counts, (int)(sched & 0x7fffffff), ch, is, ie, reductions, mem);
}

LS_OMP_EXPORT bool GOMP_loop_ull_doacross_start(unsigned n, unsigned long long *counts,
                                                long sched, unsigned long long ch,
                                                unsigned long long *is, unsigned long long *ie,
                                                uintptr_t *reductions, void **mem)
{
    return start_u(n, counts, (int)(sched & 0x7fffffff), ch, is, ie, reductions, mem);
}
