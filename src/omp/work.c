/* Work-sharing: the descriptor ring, and loops (every schedule, ordered, long and
 * unsigned long long).
 *
 * Every thread of a team meets the same work-share constructs in the same order, so
 * the k-th construct of a region is the team's construct number ws_base + k. Its
 * descriptor lives in ring[number % LS_OMP_WS_RING]:
 *   1. the first thread to move ws_claim from number to number + 1 (a CAS) sets the
 *      descriptor up, once the slot's previous construct has no thread left in it,
 *      then publishes ws_inited = number + 1;
 *   2. the others wait until ws_inited > number, and join it;
 *   3. each thread leaving the construct counts remaining down; 0 frees the slot.
 * ws_inited only grows, and in construct order: the thread that claims construct
 * k + 1 has seen construct k initialised (or initialised it). A loop is normalised to
 * iterations [0, count): value = start + i * incr, in 64-bit wrap-around arithmetic,
 * which is exact for long and unsigned long long loops alike. Entering a loop from
 * its bounds and the GOMP_loop entry points are loop.c's, sections and single
 * sections.c's. */
#define _GNU_SOURCE
#include <limits.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "omp_impl.h"

void ls_omp_ws_init(struct ls_omp_ws *ws, int sched, uint64_t start, uint64_t count,
                    uint64_t incr, uint64_t chunk, int n)
{
    ws->sched = sched & 0xff;
    ws->ordered = (sched & LS_WS_ORDERED) != 0;
    ws->start = start;
    ws->count = count;
    ws->incr = incr;
    ws->chunk = chunk;
    ws->n_chunks = chunk ? count / chunk + (count % chunk != 0) : 0;
    ws->copy = NULL;
    ws->copy_ready = 0;
    ws->task_red = NULL;
    ws->cancelled = 0;
    if (LS_UNLIKELY(ws->doacross != NULL)) { /* the slot's previous construct: all left it */
        free(ws->doacross);
        ws->doacross = NULL;
    }
    ls_store_relaxed(&ws->next, 0u);
    ls_store_relaxed(&ws->ordered_next, 0u);
    ls_store_relaxed(&ws->remaining, (uint32_t)n);
}

int ls_omp_ws_enter(struct ls_omp_thread *t, ls_omp_ws_initfn init, void *arg)
{
    struct ls_omp_team *team = t->c.team;
    uint32_t w = t->c.ws_count++;
    struct ls_omp_ws *ws = &team->ring[w % LS_OMP_WS_RING];
    t->c.static_k = 0;
    t->c.chunk_held = false;
    if (init)
        t->c.ws = ws;
    if (!ls_reached(ls_load_acquire(&team->ws_inited), w + 1u)) {
        uint32_t expect = w;
        if (__atomic_compare_exchange_n(&team->ws_claim, &expect, w + 1u, false,
                                        __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
            if (init) {
                /* acquire: the previous construct's threads are done with the slot */
                LS_OMP_SPIN_UNTIL(ls_load_acquire(&ws->remaining) == 0);
                init(ws, arg, team->n);
            }
            ls_store_release(&team->ws_inited, w + 1u); /* publishes the descriptor */
            return 1;
        }
        LS_OMP_SPIN_UNTIL(ls_reached(ls_load_acquire(&team->ws_inited), w + 1u));
    }
    return 0;
}

/* ---- ordered ------------------------------------------------------------------------ */

/* The chunk this thread holds is done: pass the turn on, in iteration order. */
void ls_omp_ordered_release(struct ls_omp_thread *t)
{
    struct ls_omp_ws *ws = t->c.ws;
    if (!t->c.chunk_held || !ws || !ws->ordered)
        return;
    t->c.chunk_held = false;
    LS_OMP_SPIN_UNTIL(ls_load_acquire(&ws->ordered_next) == t->c.chunk_lo);
    ls_store_release(&ws->ordered_next, t->c.chunk_hi);
}

void ls_omp_ws_leave(struct ls_omp_thread *t)
{
    struct ls_omp_ws *ws = t->c.ws;
    if (!ws)
        return;
    ls_omp_ordered_release(t);
    t->c.ws = NULL;
    ls_fetch_add(&ws->remaining, (uint32_t)-1, __ATOMIC_RELEASE);
}

LS_OMP_EXPORT void GOMP_ordered_start(void)
{
    struct ls_omp_thread *t = ls_omp_thr();
    struct ls_omp_ws *ws = t->c.ws;
    if (ws && ws->ordered && t->c.chunk_held)
        LS_OMP_SPIN_UNTIL(ls_load_acquire(&ws->ordered_next) == t->c.chunk_lo);
}

LS_OMP_EXPORT void GOMP_ordered_end(void)
{
    /* the turn passes when the chunk is done (ls_omp_ordered_release) */
}

/* ---- chunks -------------------------------------------------------------------------- */

/* chunk.h took the common dynamic loop */
bool ls_omp_loop_next_rest(struct ls_omp_thread *t, uint64_t *lo, uint64_t *hi)
{
    struct ls_omp_ws *ws = t->c.ws;
    if (!ws)
        return false;
    uint64_t count = ws->count, chunk = ws->chunk, i, q;
    ls_omp_ordered_release(t);
    uint64_t n = (uint64_t)t->c.team->n, tid = (uint64_t)t->c.tid;
    switch (ws->sched) {
    case LS_SCHED_STATIC:
        if (chunk == 0 || n == 1) { /* one block per thread, the first count % n one
                                     * longer (a team of one: its chunks, in order) */
            if (t->c.static_k++ != 0)
                return false;
            q = count / n;
            uint64_t r = count % n;
            i = tid * q + (tid < r ? tid : r);
            q += tid < r;
        } else {
            uint64_t k = tid + t->c.static_k++ * n;
            if (k >= ws->n_chunks)
                return false;
            i = k * chunk;
            q = chunk;
        }
        break;
    case LS_SCHED_DYNAMIC:
        if (count <= (UINT64_MAX >> 1)) { /* ordered: as above, and the chunk is held */
            i = ls_fetch_add(&ws->next, chunk, __ATOMIC_RELAXED);
            q = chunk;
            break;
        }
        /* loops of 2^63 iterations or more take guided's CAS */
        __attribute__((fallthrough));
    default: /* guided: a share of what is left, at least chunk (dynamic: chunk) */
        i = ls_load_relaxed(&ws->next);
        do {
            if (i >= count)
                return false;
            q = ws->sched == LS_SCHED_GUIDED ? (count - i + n - 1) / n : chunk;
            if (q < chunk)
                q = chunk;
        } while (!__atomic_compare_exchange_n(&ws->next, &i, count - i < q ? count : i + q, true,
                                              __ATOMIC_RELAXED, __ATOMIC_RELAXED));
        break;
    }
    if (i >= count || q == 0)
        return false;
    *lo = i;
    *hi = q > count - i ? count : i + q;
    t->c.chunk_lo = *lo;
    t->c.chunk_hi = *hi;
    t->c.chunk_held = true;
    return true;
}

/* ---- loops ------------------------------------------------------------------------------ */

int ls_omp_resolve_sched(int sched, long *chunk, const struct ls_omp_icv *icv)
{
    int kind = sched & 0x7fffffff;
    if (kind == 0) { /* runtime */
        kind = icv->run_sched & 0x7fffffff;
        *chunk = icv->run_chunk;
    }
    if (kind == LS_SCHED_AUTO || kind < LS_SCHED_STATIC || kind > LS_SCHED_AUTO) {
        kind = LS_SCHED_STATIC;
        *chunk = 0;
    }
    if (*chunk < 0)
        *chunk = 0;
    if (kind != LS_SCHED_STATIC && *chunk == 0)
        *chunk = 1;
    return kind;
}

struct loop_args {
    int sched;
    uint64_t start, count, incr, chunk;
    void **mem;
};

static void loop_init(struct ls_omp_ws *ws, void *arg, int n)
{
    struct loop_args *a = arg;
    ls_omp_ws_init(ws, a->sched, a->start, a->count, a->incr, a->chunk, n);
    if (a->mem) {
        size_t size = (size_t)(uintptr_t)*a->mem;
        if (size > ws->mem_size) {
            free(ws->mem);
            ws->mem = calloc(1, size);
            ws->mem_size = ws->mem ? size : 0;
            if (!ws->mem) {
                ls_omp_warn("out of memory for a loop's shared memory");
                abort();
            }
        } else if (ws->mem) {
            memset(ws->mem, 0, size);
        }
    }
}

void ls_omp_loop_enter(struct ls_omp_thread *t, int sched, uint64_t start, uint64_t count,
                       uint64_t incr, uint64_t chunk, void **mem)
{
    struct loop_args a = {sched, start, count, incr, chunk, mem};
    ls_omp_ws_enter(t, loop_init, &a);
    if (mem)
        *mem = t->c.ws->mem;
}
