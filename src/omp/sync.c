/* Mutual exclusion: critical (unnamed and named), atomic, and the omp_*_lock API in
 * libgomp's layouts (a simple lock is one 32-bit word; a nestable lock is that word,
 * a count and the owner), with the OpenMP 2.5 versions of the lock functions beside
 * the 3.0 ones (symbol versions OMP_1.0 and OMP_3.0).
 *
 * The lock word: 0 free, 1 held, 2 held with waiters parked on it (futex). A thread
 * takes it with a CAS 0 -> 1; a contended locker spins (src/wait's loop, the wait
 * policy's budget), looking at the word at doubling intervals, then marks it 2 and
 * parks; unlock swaps in 0 and wakes one waiter when the word was 2. */
#define _GNU_SOURCE
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "omp_impl.h"
#include "../wait/loop.h"

/* Take a free word, storing mark. acquire: the previous holder's writes before its
 * unlock. */
static bool mutex_take(uint32_t *w, uint32_t mark)
{
    uint32_t free_ = 0;
    return __atomic_compare_exchange_n(w, &free_, mark, false, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED);
}

static bool mutex_try(uint32_t *w)
{
    return mutex_take(w, 1u);
}

/* A contended locker waits through src/wait's loop: the hooks take the word and park on
 * it. Once it has parked it takes the word as 2, not 1, since others may still sleep
 * there and the unlock must wake the next.
 *
 * Each look that finds the word held doubles the gap to the next, up to
 * LS_WAIT_BACKOFF_NS: a look pulls the holder's line away, and a holder that unlocks
 * and locks again (the contended case) would pay a transfer for each. */
struct mutex_wait {
    uint32_t *w;
    uint32_t mark;     /* what the waiter stores when it takes the word */
    bool held;
    uint32_t skip;     /* calls of mutex_done left before the next look */
    uint32_t gap;      /* the last gap, in calls (each one PAUSE of the loop) */
    uint32_t max_gap;
};

static bool mutex_done(void *arg)
{
    struct mutex_wait *m = arg;
    if (m->held)
        return true;
    if (m->skip) {
        m->skip--;
        return false;
    }
    if (ls_load_relaxed(m->w) == 0 && mutex_take(m->w, m->mark))
        return true;
    m->gap = m->gap < m->max_gap / 2 ? m->gap * 2 + 1 : m->max_gap;
    m->skip = m->gap;
    return false;
}

static void mutex_park(void *arg)
{
    struct mutex_wait *m = arg;
    m->mark = 2u;
    m->skip = m->gap = 0; /* woken by an unlock: look at once */
    if (__atomic_exchange_n(m->w, 2u, __ATOMIC_ACQUIRE) == 0)
        m->held = true; /* it was free: ours, marked */
    else
        ls_futex_wait(m->w, 2u, NULL, 1);
}

static const struct ls_wait_hooks mutex_hooks = {mutex_done, NULL, NULL, mutex_park};

static void mutex_lock(uint32_t *w)
{
    if (LS_LIKELY(mutex_try(w)))
        return;
    const lockstep_wait_t *lw = &ls_omp_g.lock_wait;
    struct mutex_wait m = {w, 1u, false, 0, 0, 0};
    uint32_t spins = LS_WAIT_SHORT_SPIN; /* the holder may be waiting for this CPU */
    if (ls_omp_may_spin()) {
        spins = lw->spin;
        m.max_gap = ls_wait_pauses_for(LS_WAIT_BACKOFF_NS);
    }
    /* no yields: past the spin the holder is slow, and the futex hands over */
    ls_wait_loop(lw, spins, 0, &mutex_hooks, &m);
}

static void mutex_unlock(uint32_t *w)
{
    /* release: this holder's writes happen-before the next holder's */
    if (__atomic_exchange_n(w, 0u, __ATOMIC_RELEASE) == 2u)
        ls_futex_wake(w, 1, 1);
}

/* ---- critical and atomic ------------------------------------------------------------- */

static uint32_t critical_lock, atomic_lock;

void ls_omp_locks_reset(void)
{
    ls_store_relaxed(&critical_lock, 0u);
    ls_store_relaxed(&atomic_lock, 0u);
}

LS_OMP_EXPORT void GOMP_critical_start(void) { mutex_lock(&critical_lock); }
LS_OMP_EXPORT void GOMP_critical_end(void) { mutex_unlock(&critical_lock); }
LS_OMP_EXPORT void GOMP_atomic_start(void) { mutex_lock(&atomic_lock); }
LS_OMP_EXPORT void GOMP_atomic_end(void) { mutex_unlock(&atomic_lock); }

/* A named critical's pointer-sized common variable, zero at load, is itself the lock
 * word (its first 32 bits). */
LS_OMP_EXPORT void GOMP_critical_name_start(void **pptr)
{
    mutex_lock((uint32_t *)(void *)pptr);
}

LS_OMP_EXPORT void GOMP_critical_name_end(void **pptr)
{
    mutex_unlock((uint32_t *)(void *)pptr);
}

/* ---- locks ------------------------------------------------------------------------------ */

/* OpenMP 3.0 layout (omp.h: 16 bytes, 8-aligned) */
struct nest_lock30 {
    uint32_t lock;
    int count;
    void *owner;
};

/* OpenMP 2.5 layout of a nestable lock (8 bytes): the owner word is the lock */
struct nest_lock25 {
    uintptr_t owner_and_count;
};

/* a nonzero identity per thread (OpenMP 2.5 nestable locks are owned by threads) */
static void *self_id(void)
{
    return &ls_omp_self;
}

/* the owner of an OpenMP 3.0 nestable lock: the task that set it */
static void *task_id(void)
{
    return ls_omp_thr()->c.task;
}

#define SYMVER(impl, name, ver) __asm__(".symver " #impl "," #name ver)

#define SIMPLE_LOCK(sfx, ver)                                                                 \
    LS_OMP_EXPORT void ls_init_lock##sfx(uint32_t *l) { *l = 0; }                                \
    LS_OMP_EXPORT void ls_destroy_lock##sfx(uint32_t *l) { (void)l; }                            \
    LS_OMP_EXPORT void ls_set_lock##sfx(uint32_t *l) { mutex_lock(l); }                          \
    LS_OMP_EXPORT void ls_unset_lock##sfx(uint32_t *l) { mutex_unlock(l); }                      \
    LS_OMP_EXPORT int ls_test_lock##sfx(uint32_t *l) { return mutex_try(l); }                    \
    SYMVER(ls_init_lock##sfx, omp_init_lock, ver);                                              \
    SYMVER(ls_destroy_lock##sfx, omp_destroy_lock, ver);                                        \
    SYMVER(ls_set_lock##sfx, omp_set_lock, ver);                                                \
    SYMVER(ls_unset_lock##sfx, omp_unset_lock, ver);                                            \
    SYMVER(ls_test_lock##sfx, omp_test_lock, ver);

SIMPLE_LOCK(30, "@@OMP_3.0")
SIMPLE_LOCK(25, "@OMP_1.0")

LS_OMP_EXPORT void ls_init_nest_lock30(struct nest_lock30 *l) { memset(l, 0, sizeof *l); }
LS_OMP_EXPORT void ls_destroy_nest_lock30(struct nest_lock30 *l) { (void)l; }

LS_OMP_EXPORT int ls_test_nest_lock30(struct nest_lock30 *l)
{
    void *me = task_id();
    if (__atomic_load_n(&l->owner, __ATOMIC_RELAXED) == me)
        return ++l->count;
    if (!mutex_try(&l->lock))
        return 0;
    __atomic_store_n(&l->owner, me, __ATOMIC_RELAXED);
    return l->count = 1;
}

LS_OMP_EXPORT void ls_set_nest_lock30(struct nest_lock30 *l)
{
    void *me = task_id();
    if (__atomic_load_n(&l->owner, __ATOMIC_RELAXED) == me) {
        l->count++;
        return;
    }
    mutex_lock(&l->lock);
    __atomic_store_n(&l->owner, me, __ATOMIC_RELAXED);
    l->count = 1;
}

LS_OMP_EXPORT void ls_unset_nest_lock30(struct nest_lock30 *l)
{
    if (--l->count == 0) {
        __atomic_store_n(&l->owner, NULL, __ATOMIC_RELAXED);
        mutex_unlock(&l->lock);
    }
}

SYMVER(ls_init_nest_lock30, omp_init_nest_lock, "@@OMP_3.0");
SYMVER(ls_destroy_nest_lock30, omp_destroy_nest_lock, "@@OMP_3.0");
SYMVER(ls_set_nest_lock30, omp_set_nest_lock, "@@OMP_3.0");
SYMVER(ls_unset_nest_lock30, omp_unset_nest_lock, "@@OMP_3.0");
SYMVER(ls_test_nest_lock30, omp_test_nest_lock, "@@OMP_3.0");

/* 2.5: the owner's identity in the word's upper bits would not fit 8 bytes with a
 * pointer, so the word holds a per-thread id and the count sits in its low 16 bits. */
static uintptr_t id25(void)
{
    return ((uintptr_t)self_id() >> 4) << 16;
}

LS_OMP_EXPORT void ls_init_nest_lock25(struct nest_lock25 *l) { l->owner_and_count = 0; }
LS_OMP_EXPORT void ls_destroy_nest_lock25(struct nest_lock25 *l) { (void)l; }

LS_OMP_EXPORT int ls_test_nest_lock25(struct nest_lock25 *l)
{
    uintptr_t me = id25(), cur = __atomic_load_n(&l->owner_and_count, __ATOMIC_RELAXED);
    if (cur != 0 && (cur & ~(uintptr_t)0xffff) == me) {
        __atomic_store_n(&l->owner_and_count, cur + 1, __ATOMIC_RELAXED);
        return (int)((cur + 1) & 0xffff);
    }
    uintptr_t zero = 0;
    return __atomic_compare_exchange_n(&l->owner_and_count, &zero, me | 1u, false,
                                       __ATOMIC_ACQUIRE, __ATOMIC_RELAXED) ? 1 : 0;
}

LS_OMP_EXPORT void ls_set_nest_lock25(struct nest_lock25 *l)
{
    for (unsigned i = 0; ls_test_nest_lock25(l) == 0; i++) {
        if (i < LS_WAIT_SHORT_SPIN)
            ls_cpu_relax();
        else
            ls_yield();
    }
}

LS_OMP_EXPORT void ls_unset_nest_lock25(struct nest_lock25 *l)
{
    uintptr_t cur = __atomic_load_n(&l->owner_and_count, __ATOMIC_RELAXED);
    __atomic_store_n(&l->owner_and_count, (cur & 0xffff) == 1 ? 0 : cur - 1, __ATOMIC_RELEASE);
}

SYMVER(ls_init_nest_lock25, omp_init_nest_lock, "@OMP_1.0");
SYMVER(ls_destroy_nest_lock25, omp_destroy_nest_lock, "@OMP_1.0");
SYMVER(ls_set_nest_lock25, omp_set_nest_lock, "@OMP_1.0");
SYMVER(ls_unset_nest_lock25, omp_unset_nest_lock, "@OMP_1.0");
SYMVER(ls_test_nest_lock25, omp_test_nest_lock, "@OMP_1.0");
