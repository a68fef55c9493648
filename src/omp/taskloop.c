/* taskloop: a loop split into tasks, within a taskgroup unless nogroup, as gcc's
 * outlined loop body expects them (each task's data starts with its bounds). */
#include <stdlib.h>
#include <string.h>

#include "omp_impl.h"

/* Split [start, end) by step into tasks; each task's copy of data starts with its own
 * first and past-the-end values, as gcc's outlined body reads them. up: the direction. */
static void taskloop(void (*fn)(void *), void *data, void (*cpyfn)(void *, void *),
                     long arg_size, long arg_align, unsigned flags, unsigned long num_tasks,
                     uint64_t start, uint64_t end, uint64_t step, bool up, bool is_long)
{
    struct ls_omp_thread *t = ls_omp_thr();
    uint64_t span = up ? end - start : start - end;
    uint64_t stride = up ? step : 0u - step;
    bool empty = is_long ? (up ? (int64_t)start >= (int64_t)end : (int64_t)start <= (int64_t)end)
                         : (up ? start >= end : start <= end);
    if (empty || stride == 0) {
        /* no task: the compiler's code learns from d[2] = 0 that nothing registered */
        if ((flags & (LS_OMP_TF_REDUCTION | LS_OMP_TF_NOGROUP)) == LS_OMP_TF_REDUCTION)
            ((uintptr_t **)data)[2][2] = 0;
        return;
    }
    uint64_t iters = span / stride + (span % stride != 0);
    uint64_t ntasks, strict_len = 0;
    if ((flags & LS_OMP_TF_GRAINSIZE) && (flags & LS_OMP_TF_STRICT) && num_tasks) {
        /* every task has exactly the grain, the last one the rest */
        strict_len = num_tasks;
        ntasks = iters / num_tasks + (iters % num_tasks != 0);
    } else if (flags & LS_OMP_TF_GRAINSIZE)
        ntasks = num_tasks ? iters / num_tasks : iters;
    else if (num_tasks)
        ntasks = num_tasks;
    else
        ntasks = t->c.team ? (uint64_t)t->c.team->n : 1u;
    if (ntasks < 1)
        ntasks = 1;
    if (ntasks > iters)
        ntasks = iters;
    if (!(flags & LS_OMP_TF_NOGROUP)) {
        GOMP_taskgroup_start();
        if (flags & LS_OMP_TF_REDUCTION) /* the data starts {first, past-the-end, reductions} */
            GOMP_taskgroup_reduction_register(((uintptr_t **)data)[2]);
    }
    bool final = t->c.task->final;
    char *buf = malloc(ls_omp_copy_room(arg_size, arg_align));
    if (!buf) {
        ls_omp_warn("out of memory for a taskloop");
        abort();
    }
    void *copy = ls_omp_copy_at(buf, arg_align);
    uint64_t q = iters / ntasks, r = iters % ntasks, first = 0;
    for (uint64_t k = 0; k < ntasks; k++) {
        uint64_t len = strict_len ? (k + 1 < ntasks ? strict_len : iters - first) : q + (k < r);
        if (cpyfn)
            cpyfn(copy, data);
        else
            memcpy(copy, data, (size_t)arg_size);
        uint64_t lo = start + first * step, hi = start + (first + len) * step;
        if (is_long) {
            ((long *)copy)[0] = (long)lo;
            ((long *)copy)[1] = (long)hi;
        } else {
            ((unsigned long long *)copy)[0] = lo;
            ((unsigned long long *)copy)[1] = hi;
        }
        first += len;
        /* the copy is complete: no further copy function */
        ls_omp_task_create(fn, copy, NULL, arg_size, arg_align, (flags & LS_OMP_TF_IF) && !final, final, NULL,
                    NULL);
    }
    free(buf);
    if (!(flags & LS_OMP_TF_NOGROUP))
        GOMP_taskgroup_end();
}

LS_OMP_EXPORT void GOMP_taskloop(void (*fn)(void *), void *data, void (*cpyfn)(void *, void *),
                                 long arg_size, long arg_align, unsigned flags,
                                 unsigned long num_tasks, int priority, long start, long end,
                                 long step)
{
    (void)priority;
    taskloop(fn, data, cpyfn, arg_size, arg_align, flags, num_tasks, (uint64_t)start,
             (uint64_t)end, (uint64_t)step, step > 0, true);
}

LS_OMP_EXPORT void GOMP_taskloop_ull(void (*fn)(void *), void *data,
                                     void (*cpyfn)(void *, void *), long arg_size,
                                     long arg_align, unsigned flags, unsigned long num_tasks,
                                     int priority, unsigned long long start,
                                     unsigned long long end, unsigned long long step)
{
    (void)priority;
    taskloop(fn, data, cpyfn, arg_size, arg_align, flags, num_tasks, start, end, step,
             (flags & 256u) != 0, false);
}
