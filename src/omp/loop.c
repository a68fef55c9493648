/* The loop constructs' entry points: a loop entered from its bounds (long or unsigned
 * long long, counted in 64-bit wrap-around arithmetic), GOMP_loop_* (each schedule,
 * ordered, OpenMP 5.0's generic ones with task reductions) and the combined parallel
 * loops, which fork a region with its loop set up (GOMP_parallel_loop_*). The
 * work-share descriptors and the chunks are work.c's and chunk.h's. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "omp_impl.h"
#include "chunk.h"

/* Iterations of start, start + incr, ... before end; up is the direction. */
static uint64_t trip_count(uint64_t start, uint64_t end, uint64_t incr, bool up)
{
    uint64_t span, step;
    if (up) {
        if (start >= end || incr == 0)
            return 0;
        span = end - start;
        step = incr;
    } else {
        if (start <= end || incr == 0)
            return 0;
        span = start - end;
        step = 0u - incr;
    }
    return span / step + (span % step != 0);
}

static uint64_t count_long(long start, long end, long incr)
{
    bool up = incr > 0;
    if (up ? start >= end : start <= end)
        return 0;
    /* the span as an unsigned difference, exact where end - start overflows long */
    uint64_t span = up ? (uint64_t)end - (uint64_t)start : (uint64_t)start - (uint64_t)end;
    return up ? trip_count(0, span, (uint64_t)incr, true)
              : trip_count(span, 0, (uint64_t)incr, false);
}

/* GOMP_loop_start's memory for a loop outside any region: this thread's, zeroed. */
static void *orphan_mem(size_t size)
{
    static __thread void *mem;
    static __thread size_t cap;
    if (size > cap) {
        free(mem);
        mem = calloc(1, size);
        cap = mem ? size : 0;
        if (!mem) {
            ls_omp_warn("out of memory for a loop's shared memory");
            abort();
        }
    } else if (mem) {
        memset(mem, 0, size);
    }
    return mem;
}

/* Enter a loop construct; the first chunk into *lo, *hi. */
static bool loop_start(int sched, long chunk, bool ordered, uint64_t start, uint64_t count,
                       uint64_t incr, void **mem, uint64_t *lo, uint64_t *hi)
{
    struct ls_omp_thread *t = ls_omp_thr();
    int kind = ls_omp_resolve_sched(sched, &chunk, &t->c.icv) | (ordered ? LS_WS_ORDERED : 0);
    if (!t->c.team) { /* an orphaned loop outside any region: a team of one */
        if (mem)
            *mem = orphan_mem((size_t)(uintptr_t)*mem);
        if (!lo)
            return true;
        *lo = 0;
        *hi = count;
        return count != 0;
    }
    ls_omp_loop_enter(t, kind, start, count, incr, (uint64_t)chunk, mem);
    if (!lo)
        return true;
    return ls_omp_loop_next(t, lo, hi);
}

/* Enter a loop given as start, end (past the last), incr, in either type's bit
 * pattern; the first chunk's values into *vs, *ve (NULL vs: only enter). */
static bool start_values(int sched, bool ordered, uint64_t start, uint64_t end, uint64_t count,
                         uint64_t incr, long chunk, void **mem, uint64_t *vs, uint64_t *ve)
{
    uint64_t lo, hi;
    if (!loop_start(sched, chunk, ordered, start, count, incr, mem, vs ? &lo : NULL, &hi))
        return false;
    if (!vs)
        return true;
    if (!ls_omp_self.c.team) { /* orphaned: the whole loop */
        *vs = start;
        *ve = end;
    } else {
        *vs = start + lo * incr;
        *ve = start + hi * incr;
    }
    return true;
}

bool ls_omp_start_long(int sched, bool ordered, long start, long end, long incr, long chunk,
                       long *istart, long *iend, void **mem)
{
    uint64_t vs = 0, ve = 0;
    if (!start_values(sched, ordered, (uint64_t)start, (uint64_t)end, count_long(start, end, incr),
                      (uint64_t)incr, chunk, mem, istart ? &vs : NULL, &ve))
        return false;
    if (istart) {
        *istart = (long)vs;
        *iend = (long)ve;
    }
    return true;
}

bool ls_omp_start_ull(int sched, bool ordered, bool up, unsigned long long start,
                      unsigned long long end, unsigned long long incr, unsigned long long chunk,
                      unsigned long long *istart, unsigned long long *iend, void **mem)
{
    long ch = chunk > (unsigned long long)LONG_MAX ? LONG_MAX : (long)chunk;
    uint64_t vs = 0, ve = 0;
    if (!start_values(sched, ordered, start, end, trip_count(start, end, incr, up), incr, ch, mem,
                      istart ? &vs : NULL, &ve))
        return false;
    if (istart) {
        *istart = vs;
        *iend = ve;
    }
    return true;
}

/* The next chunk's first and past-the-end values, as 64-bit patterns. */
static inline bool next_values(uint64_t *vs, uint64_t *ve)
{
    struct ls_omp_thread *t = &ls_omp_self; /* inside a loop: initialised */
    uint64_t lo, hi;
    if (!ls_omp_loop_next(t, &lo, &hi))
        return false;
    struct ls_omp_ws *ws = t->c.ws;
    *vs = ws->start + lo * ws->incr;
    *ve = ws->start + hi * ws->incr;
    return true;
}

static bool next_long(long *istart, long *iend)
{
    uint64_t vs, ve;
    if (!next_values(&vs, &ve))
        return false;
    *istart = (long)vs;
    *iend = (long)ve;
    return true;
}

static bool next_ull(unsigned long long *istart, unsigned long long *iend)
{
    return next_values((uint64_t *)istart, (uint64_t *)iend);
}

/* The legacy entries, one per schedule: GOMP_loop_<s>_start/_next, the ordered ones,
 * and the unsigned long long ones. */
#define LOOP_ENTRIES(name, sched)                                                            \
    LS_OMP_EXPORT bool GOMP_loop_##name##_start(long s, long e, long inc, long ch, long *is,    \
                                                long *ie)                                      \
    {                                                                                           \
        return ls_omp_start_long(sched, false, s, e, inc, ch, is, ie, NULL);                          \
    }                                                                                           \
    LS_OMP_EXPORT bool GOMP_loop_##name##_next(long *is, long *ie) { return next_long(is, ie); } \
    LS_OMP_EXPORT bool GOMP_loop_ull_##name##_start(bool up, unsigned long long s,              \
                                                    unsigned long long e, unsigned long long inc, \
                                                    unsigned long long ch,                       \
                                                    unsigned long long *is,                      \
                                                    unsigned long long *ie)                      \
    {                                                                                           \
        return ls_omp_start_ull(sched, false, up, s, e, inc, ch, is, ie, NULL);                       \
    }                                                                                           \
    LS_OMP_EXPORT bool GOMP_loop_ull_##name##_next(unsigned long long *is, unsigned long long *ie) \
    {                                                                                           \
        return next_ull(is, ie);                                                                \
    }

#define ORDERED_ENTRIES(name, sched)                                                         \
    LS_OMP_EXPORT bool GOMP_loop_ordered_##name##_start(long s, long e, long inc, long ch,      \
                                                        long *is, long *ie)                    \
    {                                                                                           \
        return ls_omp_start_long(sched, true, s, e, inc, ch, is, ie, NULL);                           \
    }                                                                                           \
    LS_OMP_EXPORT bool GOMP_loop_ordered_##name##_next(long *is, long *ie)                      \
    {                                                                                           \
        return next_long(is, ie);                                                               \
    }                                                                                           \
    LS_OMP_EXPORT bool GOMP_loop_ull_ordered_##name##_start(                                    \
        bool up, unsigned long long s, unsigned long long e, unsigned long long inc,            \
        unsigned long long ch, unsigned long long *is, unsigned long long *ie)                  \
    {                                                                                           \
        return ls_omp_start_ull(sched, true, up, s, e, inc, ch, is, ie, NULL);                        \
    }                                                                                           \
    LS_OMP_EXPORT bool GOMP_loop_ull_ordered_##name##_next(unsigned long long *is,              \
                                                           unsigned long long *ie)              \
    {                                                                                           \
        return next_ull(is, ie);                                                                \
    }

LOOP_ENTRIES(static, LS_SCHED_STATIC)
LOOP_ENTRIES(dynamic, LS_SCHED_DYNAMIC)
LOOP_ENTRIES(guided, LS_SCHED_GUIDED)
LOOP_ENTRIES(nonmonotonic_dynamic, LS_SCHED_DYNAMIC)
LOOP_ENTRIES(nonmonotonic_guided, LS_SCHED_GUIDED)
ORDERED_ENTRIES(static, LS_SCHED_STATIC)
ORDERED_ENTRIES(dynamic, LS_SCHED_DYNAMIC)
ORDERED_ENTRIES(guided, LS_SCHED_GUIDED)

/* runtime schedules take no chunk */
#define RUNTIME_ENTRIES(name, ordered)                                                       \
    LS_OMP_EXPORT bool GOMP_loop_##name##_start(long s, long e, long inc, long *is, long *ie)   \
    {                                                                                           \
        return ls_omp_start_long(0, ordered, s, e, inc, 0, is, ie, NULL);                             \
    }                                                                                           \
    LS_OMP_EXPORT bool GOMP_loop_##name##_next(long *is, long *ie) { return next_long(is, ie); } \
    LS_OMP_EXPORT bool GOMP_loop_ull_##name##_start(bool up, unsigned long long s,              \
                                                    unsigned long long e, unsigned long long inc, \
                                                    unsigned long long *is,                      \
                                                    unsigned long long *ie)                      \
    {                                                                                           \
        return ls_omp_start_ull(0, ordered, up, s, e, inc, 0, is, ie, NULL);                          \
    }                                                                                           \
    LS_OMP_EXPORT bool GOMP_loop_ull_##name##_next(unsigned long long *is, unsigned long long *ie) \
    {                                                                                           \
        return next_ull(is, ie);                                                                \
    }

RUNTIME_ENTRIES(runtime, false)
RUNTIME_ENTRIES(nonmonotonic_runtime, false)
RUNTIME_ENTRIES(maybe_nonmonotonic_runtime, false)
RUNTIME_ENTRIES(ordered_runtime, true)

/* OpenMP 5.0's generic entries; sched is 0 (runtime) to 4, maybe with the monotonic bit. */
LS_OMP_EXPORT bool GOMP_loop_start(long s, long e, long inc, long sched, long ch, long *is,
                                   long *ie, uintptr_t *reductions, void **mem)
{
    bool more = ls_omp_start_long((int)(sched & 0x7fffffff), false, s, e, inc, ch, is, ie, mem);
    if (reductions)
        ls_omp_ws_reductions(ls_omp_thr(), reductions);
    return more;
}

LS_OMP_EXPORT bool GOMP_loop_ordered_start(long s, long e, long inc, long sched, long ch,
                                           long *is, long *ie, uintptr_t *reductions, void **mem)
{
    bool more = ls_omp_start_long((int)(sched & 0x7fffffff), true, s, e, inc, ch, is, ie, mem);
    if (reductions)
        ls_omp_ws_reductions(ls_omp_thr(), reductions);
    return more;
}

LS_OMP_EXPORT bool GOMP_loop_ull_start(bool up, unsigned long long s, unsigned long long e,
                                       unsigned long long inc, long sched, unsigned long long ch,
                                       unsigned long long *is, unsigned long long *ie,
                                       uintptr_t *reductions, void **mem)
{
    bool more = ls_omp_start_ull((int)(sched & 0x7fffffff), false, up, s, e, inc, ch, is, ie, mem);
    if (reductions)
        ls_omp_ws_reductions(ls_omp_thr(), reductions);
    return more;
}

LS_OMP_EXPORT bool GOMP_loop_ull_ordered_start(bool up, unsigned long long s,
                                               unsigned long long e, unsigned long long inc,
                                               long sched, unsigned long long ch,
                                               unsigned long long *is, unsigned long long *ie,
                                               uintptr_t *reductions, void **mem)
{
    bool more = ls_omp_start_ull((int)(sched & 0x7fffffff), true, up, s, e, inc, ch, is, ie, mem);
    if (reductions)
        ls_omp_ws_reductions(ls_omp_thr(), reductions);
    return more;
}

LS_OMP_EXPORT void GOMP_loop_end_nowait(void)
{
    struct ls_omp_thread *t = ls_omp_thr();
    if (t->c.team)
        ls_omp_ws_leave(t);
}

LS_OMP_EXPORT void GOMP_loop_end(void)
{
    GOMP_loop_end_nowait();
    ls_omp_barrier();
}

/* ---- combined parallel loops ---------------------------------------------------------- */

static void parallel_loop(void (*fn)(void *), void *data, unsigned nt, long s, long e,
                          long inc, int sched, long ch, unsigned flags, bool run)
{
    struct ls_omp_thread *t = ls_omp_thr();
    sched = ls_omp_resolve_sched(sched, &ch, &t->c.icv);
    ls_omp_fork(fn, data, nt, flags, sched, (uint64_t)s, count_long(s, e, inc), (uint64_t)inc,
                (uint64_t)ch);
    if (run) {
        fn(data);
        ls_omp_join();
    }
}

#define PARALLEL_LOOP(name, sched)                                                           \
    LS_OMP_EXPORT void GOMP_parallel_loop_##name(void (*fn)(void *), void *data, unsigned nt,   \
                                                 long s, long e, long inc, long ch,            \
                                                 unsigned flags)                               \
    {                                                                                           \
        parallel_loop(fn, data, nt, s, e, inc, sched, ch, flags, true);                        \
    }
PARALLEL_LOOP(static, LS_SCHED_STATIC)
PARALLEL_LOOP(dynamic, LS_SCHED_DYNAMIC)
PARALLEL_LOOP(guided, LS_SCHED_GUIDED)
PARALLEL_LOOP(nonmonotonic_dynamic, LS_SCHED_DYNAMIC)
PARALLEL_LOOP(nonmonotonic_guided, LS_SCHED_GUIDED)

#define PARALLEL_LOOP_RUNTIME(name)                                                          \
    LS_OMP_EXPORT void GOMP_parallel_loop_##name(void (*fn)(void *), void *data, unsigned nt,   \
                                                 long s, long e, long inc, unsigned flags)     \
    {                                                                                           \
        parallel_loop(fn, data, nt, s, e, inc, 0, 0, flags, true);                             \
    }
PARALLEL_LOOP_RUNTIME(runtime)
PARALLEL_LOOP_RUNTIME(nonmonotonic_runtime)
PARALLEL_LOOP_RUNTIME(maybe_nonmonotonic_runtime)

/* GOMP 1.0: the master runs fn itself and calls GOMP_parallel_end */
#define PARALLEL_LOOP_START(name, sched)                                                     \
    LS_OMP_EXPORT void GOMP_parallel_loop_##name##_start(void (*fn)(void *), void *data,        \
                                                         unsigned nt, long s, long e, long inc, \
                                                         long ch)                              \
    {                                                                                           \
        parallel_loop(fn, data, nt, s, e, inc, sched, ch, 0, false);                           \
    }
PARALLEL_LOOP_START(static, LS_SCHED_STATIC)
PARALLEL_LOOP_START(dynamic, LS_SCHED_DYNAMIC)
PARALLEL_LOOP_START(guided, LS_SCHED_GUIDED)

LS_OMP_EXPORT void GOMP_parallel_loop_runtime_start(void (*fn)(void *), void *data, unsigned nt,
                                                    long s, long e, long inc)
{
    parallel_loop(fn, data, nt, s, e, inc, 0, 0, 0, false);
}
