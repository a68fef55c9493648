/* Target constructs and device memory on a machine whose only device is the host.
 *
 * There is no offload device: omp_get_num_devices() is 0 and the host, the initial
 * device, is numbered 0 as well. Every target region runs on the host (host fallback)
 * as the initial thread of a new contention group: outside any team (level 0), with
 * the initial ICVs, its firstprivate data copied; `nowait` makes it a deferred task.
 * Mapping is the identity, so target data, enter/exit data and update only honour
 * their depend clauses. The device memory routines act on host memory. */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "omp_impl.h"

/* gcc's encodings (include/gomp-constants.h, the ABI) */
#define MAP_FIRSTPRIVATE 0x0c       /* GOMP_MAP_FIRSTPRIVATE: copy, do not map */
#define TARGET_NOWAIT 1u            /* GOMP_TARGET_FLAG_NOWAIT */
#define ARG_DEVICE_MASK 0x7f        /* GOMP_TARGET_ARG_DEVICE_MASK; 0 = every device */
#define ARG_SUBSEQUENT (1 << 7)     /* the value follows in the next slot */
#define ARG_ID_MASK (0xff << 8)
#define ARG_THREAD_LIMIT (2 << 8)
#define ARG_VALUE_SHIFT 16

/* The host's number (omp_get_initial_device()), or OpenMP 5.2's omp_initial_device. */
static bool is_host(int device)
{
    return device == 0 || device == -1;
}

/* The thread_limit clause of a target construct, from its argument list. */
static int thread_limit_arg(void **args)
{
    if (!args)
        return 0;
    while (*args) {
        intptr_t id = (intptr_t)*args++, val;
        if (id & ARG_SUBSEQUENT)
            val = (intptr_t)*args++;
        else
            val = id >> ARG_VALUE_SHIFT;
        if ((id & ARG_DEVICE_MASK) == 0 && (id & ARG_ID_MASK) == ARG_THREAD_LIMIT)
            return val > INT_MAX ? INT_MAX : (int)val;
    }
    return 0;
}

/* Run a target region's host version as a new initial thread, then restore the
 * caller's place. */
static void fallback(void (*fn)(void *), void **hostaddrs, int thread_limit)
{
    struct ls_omp_thread *t = ls_omp_thr();
    struct ls_omp_ctx saved = t->c;
    struct ls_omp_task implicit;
    memset(&implicit, 0, sizeof implicit);
    memset(&t->c, 0, sizeof t->c);
    t->c.task = &implicit;
    t->c.icv = ls_omp_g.icv;
    t->icv_dirty = true; /* the initial ICVs, not its team's */
    if (thread_limit > 0)
        t->c.icv.thread_limit = thread_limit;
    fn(hostaddrs);
    ls_omp_taskwait(t); /* the region's tasks end with it */
    t->c = saved;
}

/* Bytes and alignment that private copies of the firstprivate entries need. */
static size_t firstprivate_room(size_t mapnum, const size_t *sizes, const unsigned short *kinds,
                                size_t *align)
{
    size_t room = 0;
    *align = 1;
    for (size_t i = 0; i < mapnum; i++) {
        if ((kinds[i] & 0xff) != MAP_FIRSTPRIVATE)
            continue;
        size_t a = (size_t)1 << (kinds[i] >> 8);
        if (a > *align)
            *align = a;
        room = (room + a - 1) & ~(a - 1);
        room += sizes[i];
    }
    return room;
}

/* Copy each firstprivate entry into buf (aligned as its kind says) and point
 * hostaddrs at the copy. */
static void firstprivate_copy(char *buf, size_t mapnum, void **hostaddrs, const size_t *sizes,
                              const unsigned short *kinds)
{
    size_t at = 0;
    for (size_t i = 0; i < mapnum; i++) {
        if ((kinds[i] & 0xff) != MAP_FIRSTPRIVATE || !hostaddrs[i])
            continue;
        size_t a = (size_t)1 << (kinds[i] >> 8);
        at = (at + a - 1) & ~(a - 1);
        memcpy(buf + at, hostaddrs[i], sizes[i]);
        hostaddrs[i] = buf + at;
        at += sizes[i];
    }
}

/* A deferred target region's task data: the function, its limit, its own array of
 * addresses, then the firstprivate copies. */
struct target_task {
    void (*fn)(void *);
    int thread_limit;
    size_t mapnum;
    void **addrs;
};

static void run_target_task(void *arg)
{
    struct target_task *tt = *(struct target_task **)arg;
    fallback(tt->fn, tt->addrs, tt->thread_limit);
    free(tt);
}

static void target_deferred(void (*fn)(void *), size_t mapnum, void **hostaddrs,
                            const size_t *sizes, const unsigned short *kinds, int thread_limit)
{
    size_t align;
    size_t room = firstprivate_room(mapnum, sizes, kinds, &align);
    size_t head = sizeof(struct target_task) + mapnum * sizeof(void *);
    size_t total = head + align + room;
    char *buf = malloc(total);
    if (!buf) { /* no memory for a deferred copy: run it now, which is also conforming */
        ls_omp_warn("out of memory for a deferred target task; it runs undeferred");
        char tmp[room + align];
        char *at = (char *)(((uintptr_t)tmp + align - 1) & ~(uintptr_t)(align - 1));
        firstprivate_copy(at, mapnum, hostaddrs, sizes, kinds);
        fallback(fn, hostaddrs, thread_limit);
        return;
    }
    struct target_task *tt = (void *)buf; /* malloc's alignment */
    tt->fn = fn;
    tt->thread_limit = thread_limit;
    tt->mapnum = mapnum;
    tt->addrs = (void **)(void *)(buf + sizeof *tt);
    memcpy(tt->addrs, hostaddrs, mapnum * sizeof(void *));
    char *fp = (char *)(((uintptr_t)(buf + head) + align - 1) & ~(uintptr_t)(align - 1));
    firstprivate_copy(fp, mapnum, tt->addrs, sizes, kinds);
    /* the task's data is the pointer to the block: the block points into itself */
    GOMP_task(run_target_task, &tt, NULL, sizeof tt, _Alignof(struct target_task *), true, 0,
              NULL, 0, NULL);
}

LS_OMP_EXPORT void GOMP_target_ext(int device, void (*fn)(void *), size_t mapnum,
                                   void **hostaddrs, size_t *sizes, unsigned short *kinds,
                                   unsigned flags, void **depend, void **args)
{
    (void)device;
    int limit = thread_limit_arg(args);
    struct ls_omp_thread *t = ls_omp_thr();
    if (depend)
        ls_omp_wait_depend(t, depend);
    if ((flags & TARGET_NOWAIT) && !depend && t->c.team && t->c.team->n > 1 &&
        !t->c.task->final) {
        target_deferred(fn, mapnum, hostaddrs, sizes, kinds, limit);
        return;
    }
    size_t align;
    size_t room = firstprivate_room(mapnum, sizes, kinds, &align);
    char buf[room + align];
    char *at = (char *)(((uintptr_t)buf + align - 1) & ~(uintptr_t)(align - 1));
    firstprivate_copy(at, mapnum, hostaddrs, sizes, kinds);
    fallback(fn, hostaddrs, limit);
}

/* OpenMP 4.0's entry: no firstprivate kinds existed, nothing to copy */
LS_OMP_EXPORT void GOMP_target(int device, void (*fn)(void *), const void *unused,
                               size_t mapnum, void **hostaddrs, size_t *sizes,
                               unsigned char *kinds)
{
    (void)device, (void)unused, (void)mapnum, (void)sizes, (void)kinds;
    fallback(fn, hostaddrs, 0);
}

/* Mapping on the host is the identity: only depend clauses have an effect. */
LS_OMP_EXPORT void GOMP_target_data(int device, const void *unused, size_t mapnum,
                                    void **hostaddrs, size_t *sizes, unsigned char *kinds)
{
    (void)device, (void)unused, (void)mapnum, (void)hostaddrs, (void)sizes, (void)kinds;
}

LS_OMP_EXPORT void GOMP_target_data_ext(int device, size_t mapnum, void **hostaddrs,
                                        size_t *sizes, unsigned short *kinds)
{
    (void)device, (void)mapnum, (void)hostaddrs, (void)sizes, (void)kinds;
}

LS_OMP_EXPORT void GOMP_target_end_data(void) {}

LS_OMP_EXPORT void GOMP_target_update(int device, const void *unused, size_t mapnum,
                                      void **hostaddrs, size_t *sizes, unsigned char *kinds)
{
    (void)device, (void)unused, (void)mapnum, (void)hostaddrs, (void)sizes, (void)kinds;
}

LS_OMP_EXPORT void GOMP_target_update_ext(int device, size_t mapnum, void **hostaddrs,
                                          size_t *sizes, unsigned short *kinds, unsigned flags,
                                          void **depend)
{
    (void)device, (void)mapnum, (void)hostaddrs, (void)sizes, (void)kinds, (void)flags;
    if (depend)
        ls_omp_wait_depend(ls_omp_thr(), depend);
}

LS_OMP_EXPORT void GOMP_target_enter_exit_data(int device, size_t mapnum, void **hostaddrs,
                                               size_t *sizes, unsigned short *kinds,
                                               unsigned flags, void **depend)
{
    (void)device, (void)mapnum, (void)hostaddrs, (void)sizes, (void)kinds, (void)flags;
    if (depend)
        ls_omp_wait_depend(ls_omp_thr(), depend);
}

/* ---- device memory routines: the host's memory ---------------------------------------- */

LS_OMP_EXPORT void *omp_target_alloc(size_t size, int device)
{
    if (!is_host(device))
        return NULL;
    return malloc(size);
}

LS_OMP_EXPORT void omp_target_free(void *ptr, int device)
{
    if (ptr && is_host(device))
        free(ptr);
}

LS_OMP_EXPORT int omp_target_is_present(const void *ptr, int device)
{
    return ptr == NULL || is_host(device);
}

LS_OMP_EXPORT int omp_target_is_accessible(const void *ptr, size_t size, int device)
{
    (void)ptr, (void)size;
    return is_host(device);
}

LS_OMP_EXPORT void *omp_get_mapped_ptr(const void *ptr, int device)
{
    return is_host(device) ? (void *)ptr : NULL;
}

LS_OMP_EXPORT int omp_target_memcpy(void *dst, const void *src, size_t length,
                                    size_t dst_offset, size_t src_offset, int dst_device,
                                    int src_device)
{
    if (!is_host(dst_device) || !is_host(src_device))
        return EINVAL;
    memmove((char *)dst + dst_offset, (const char *)src + src_offset, length);
    return 0;
}

/* One dimension at a time; the innermost is a contiguous copy. */
static void copy_rect(char *dst, const char *src, size_t elem, int dims, const size_t *volume,
                      const size_t *dst_off, const size_t *src_off, const size_t *dst_dims,
                      const size_t *src_dims)
{
    if (dims == 1) {
        memmove(dst + dst_off[0] * elem, src + src_off[0] * elem, volume[0] * elem);
        return;
    }
    size_t dst_row = elem, src_row = elem;
    for (int i = 1; i < dims; i++) {
        dst_row *= dst_dims[i];
        src_row *= src_dims[i];
    }
    for (size_t j = 0; j < volume[0]; j++)
        copy_rect(dst + (dst_off[0] + j) * dst_row, src + (src_off[0] + j) * src_row, elem,
                  dims - 1, volume + 1, dst_off + 1, src_off + 1, dst_dims + 1, src_dims + 1);
}

LS_OMP_EXPORT int omp_target_memcpy_rect(void *dst, const void *src, size_t elem, int dims,
                                         const size_t *volume, const size_t *dst_off,
                                         const size_t *src_off, const size_t *dst_dims,
                                         const size_t *src_dims, int dst_device, int src_device)
{
    if (!dst && !src)
        return INT_MAX; /* the number of dimensions supported */
    if (!dst || !src || dims < 1 || elem == 0 || !is_host(dst_device) || !is_host(src_device))
        return EINVAL;
    copy_rect(dst, src, elem, dims, volume, dst_off, src_off, dst_dims, src_dims);
    return 0;
}

/* Associating host memory with the host is meaningless: the spec's error. */
LS_OMP_EXPORT int omp_target_associate_ptr(const void *host_ptr, const void *device_ptr,
                                           size_t size, size_t device_offset, int device)
{
    (void)host_ptr, (void)device_ptr, (void)size, (void)device_offset, (void)device;
    return EINVAL;
}

LS_OMP_EXPORT int omp_target_disassociate_ptr(const void *ptr, int device)
{
    (void)ptr, (void)device;
    return EINVAL;
}

/* OpenMP 5.1's asynchronous copies: done before they return, once the tasks the
 * depend objects name have completed (a conforming schedule of their target task). */
LS_OMP_EXPORT int omp_target_memcpy_async(void *dst, const void *src, size_t length,
                                          size_t dst_offset, size_t src_offset, int dst_device,
                                          int src_device, int depobj_count, void *depobj_list)
{
    (void)depobj_list;
    if (depobj_count > 0)
        ls_omp_taskwait(ls_omp_thr());
    return omp_target_memcpy(dst, src, length, dst_offset, src_offset, dst_device, src_device);
}

LS_OMP_EXPORT int omp_target_memcpy_rect_async(void *dst, const void *src, size_t elem, int dims,
                                               const size_t *volume, const size_t *dst_off,
                                               const size_t *src_off, const size_t *dst_dims,
                                               const size_t *src_dims, int dst_device,
                                               int src_device, int depobj_count,
                                               void *depobj_list)
{
    (void)depobj_list;
    if (depobj_count > 0)
        ls_omp_taskwait(ls_omp_thr());
    return omp_target_memcpy_rect(dst, src, elem, dims, volume, dst_off, src_off, dst_dims,
                                  src_dims, dst_device, src_device);
}

/* An indirect function's host address is its address. */
LS_OMP_EXPORT void *GOMP_target_map_indirect_ptr(void *ptr)
{
    return ptr;
}
