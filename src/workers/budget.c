/* The process's count of running threads (workers.h).
 *
 * One 64-bit word: the OpenMP threads inside regions in the low half, the live pools'
 * participants in the high half, so that a region's reservation checks OMP_THREAD_LIMIT
 * against its own half and the total in one compare-and-swap.
 *
 * liblockstep and liblockstep-omp each build this file. The word is exported from both
 * under one name and version and reached through the GOT, so the dynamic linker binds
 * both libraries to the first one loaded: a process that runs a pool and OpenMP regions
 * counts both in one budget. Not an API. */
#include <stdint.h>

#include "../internal.h"
#include "budget.h"

#define POOL_ONE ((uint64_t)1 << 32)
#define OMP_MASK (POOL_ONE - 1u)

__attribute__((visibility("default"))) uint64_t lockstep_running_threads_;

static int total(uint64_t w)
{
    return (int)(uint32_t)(w & OMP_MASK) + (int)(uint32_t)(w >> 32);
}

int ls_budget_running(void)
{
    return total(__atomic_load_n(&lockstep_running_threads_, __ATOMIC_RELAXED));
}

int ls_budget_pools(void)
{
    return (int)(uint32_t)(__atomic_load_n(&lockstep_running_threads_, __ATOMIC_RELAXED) >> 32);
}

void ls_budget_pool_add(int delta)
{
    __atomic_add_fetch(&lockstep_running_threads_, (uint64_t)(int64_t)delta * POOL_ONE,
                       __ATOMIC_RELAXED);
}

int ls_budget_omp_reserve(int want, bool nested, int limit)
{
    uint64_t cur = __atomic_load_n(&lockstep_running_threads_, __ATOMIC_RELAXED);
    int got;
    do {
        long omp = (long)(uint32_t)(cur & OMP_MASK);
        /* a nested region's master is counted already; a region outside any other
         * starts a contention group of its own */
        long room = nested ? (long)limit - omp + 1 : limit;
        got = want < room ? want : (int)(room < 1 ? 1 : room);
    } while (!__atomic_compare_exchange_n(&lockstep_running_threads_, &cur,
                                          cur + (uint64_t)(got - (nested ? 1 : 0)), true,
                                          __ATOMIC_RELAXED, __ATOMIC_RELAXED));
    return got;
}

void ls_budget_omp_add(int delta)
{
    __atomic_add_fetch(&lockstep_running_threads_, (uint64_t)(int64_t)delta, __ATOMIC_RELAXED);
}

void ls_budget_omp_reset(void)
{
    uint64_t cur = __atomic_load_n(&lockstep_running_threads_, __ATOMIC_RELAXED);
    while (!__atomic_compare_exchange_n(&lockstep_running_threads_, &cur, cur & ~OMP_MASK, true,
                                        __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        ;
}
