/* The pipelined loader (lockstep_load). One load goes through these states:
 *
 * 1. open and parse the file (model.c), select the tensors, measure how much of the
 *    selection is already in the page cache (mincore on the model's mapping);
 * 2. resolve the mode; ALIAS and MAP end here (tensors point into the mapping);
 * 3. plan the chunks:
 *    - in place (host sink, the loader allocates): one region mirrors the file's
 *      layout, so aligned file ranges are read straight to their final place; chunks
 *      are aligned ranges over the selection's extents (gaps above a chunk are skipped);
 *    - staged (caller destinations, or the CUDA sink): a chunk holds whole tensors or
 *      one piece of a big tensor, cut at element/block boundaries so each piece can be
 *      checked on its own; it is read into a staging buffer and copied out;
 * 4. run on a pool: n_readers threads claim chunks from one counter; in place, one
 *    more thread pre-faults the region ahead of them (MADV_POPULATE_WRITE, which never
 *    changes data already there, so it may race the reads harmlessly);
 * 5. each chunk: read (direct I/O; when it is refused, buffered from the same offset
 *    on, for every thread), deliver, check, count progress (which may cancel).
 *
 * The defaults (huge pages where direct reads land, 4 KiB pages where the CPU copies
 * to, 4 MiB requests, 2 readers in place and 6 staged, one thread pre-faulting ahead,
 * reader threads rather than io_uring, whose depth did not help) were chosen by
 * `lockstep bench load`; its figures are in docs/performance.md.
 *
 * Test hook: LOCKSTEP_LOAD_REFUSE_DIRECT_AT=<offset> makes direct reads at or past
 * that file offset fail as a file system that refuses them would (EINVAL). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "pipeline.h"

/* ---- setting up ------------------------------------------------------------------------ */

lockstep_load_params_t lockstep_load_params_default(void)
{
    lockstep_load_params_t p;
    memset(&p, 0, sizeof p);
    p.mode = LOCKSTEP_LOAD_AUTO;
    p.sink = LOCKSTEP_SINK_HOST;
    return p;
}

static lockstep_load_error_t *set_err(lockstep_load_error_t *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static lockstep_load_error_t *set_err(lockstep_load_error_t *err, int code, const char *fmt, ...)
{
    err->code = code;
    err->offset = 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    return err;
}

/* Make view v (of a tensor of m) arrive as kind to: F32, F16 and BF16 convert (*from
 * = 1 + their kind), other types stay as they are, except packed ones (quantized
 * blocks, sub-byte floats), which have no element to convert: -EINVAL. */
static int convert_to(const lockstep_model_t *m, lockstep_tensor_info_t *v, int to, unsigned char *from,
                      lockstep_load_error_t *err)
{
    int kind = ls_float_kind(v->type_name);
    uint64_t ue = 1, ub;
    if (kind < 0) {
        if (m->format == LOCKSTEP_FORMAT_GGUF ? ls_gguf_unit(v->type, &ue, &ub) : ls_st_unit(v->type, &ue, &ub))
            ue = 2;
        if (ue > 1) {
            set_err(err, -EINVAL, "cannot convert tensor \"%s\" (%s) to %s: its values are packed in "
                    "blocks (no dequantisation); load it without to_type, or leave it out (names)",
                    v->name, v->type_name, ls_float_kind_name(to));
            return -EINVAL;
        }
        return 0;
    }
    if (kind == to)
        return 0;
    *from = (unsigned char)(kind + 1);
    v->size = v->size / ls_float_kind_bytes(kind) * ls_float_kind_bytes(to);
    v->type_name = ls_float_kind_name(to);
    v->type = (uint32_t)(m->format == LOCKSTEP_FORMAT_GGUF ? ls_gguf_type_code(v->type_name)
                                                           : ls_st_type_code(v->type_name));
    return 0;
}

/* Bind the loader's region to the node params ask for, before it is touched. */
static int place(lockstep_loaded_t *l, const lockstep_load_params_t *p, lockstep_load_error_t *err)
{
    int max = ls_numa_max_node(), node = -1;
    if (p->numa == LOCKSTEP_NUMA_NODE) {
        if (p->numa_node < 0 || p->numa_node > max) {
            set_err(err, -EINVAL, "NUMA node %d: this machine has nodes 0..%d", p->numa_node, max);
            return -EINVAL;
        }
        node = p->numa_node;
    } else if (p->numa == LOCKSTEP_NUMA_LOCAL && max > 0) {
        node = ls_numa_node_of_caller();
    }
    if (node < 0)
        return 0;
    int rc = ls_numa_bind(l->region, l->region_len ? l->region_len : 1, node);
    if (rc && !(max == 0 && (rc == -ENOSYS || rc == -EPERM)) && p->numa == LOCKSTEP_NUMA_NODE) {
        set_err(err, rc, "cannot bind the tensors' memory to NUMA node %d: %s", node, strerror(-rc));
        return rc; /* asked for by name; LOCAL is best effort, and one node needs none */
    }
    l->stats.numa_node = rc ? -1 : node;
    return 0;
}

static int cmp_sel(const void *a, const void *b, void *ctx)
{
    return ls_cmp_offsets(a, b, ctx);
}

/* Alignment for direct reads of fd: statx's DIOALIGN when the kernel tells it (0 means
 * this file refuses direct I/O), else the file system's block size. */
static uint64_t dio_align(int fd)
{
    uint64_t a = 0;
#ifdef STATX_DIOALIGN
    struct statx sx;
    if (statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &sx) == 0 && (sx.stx_mask & STATX_DIOALIGN)) {
        if (sx.stx_dio_offset_align == 0)
            return 0;
        a = sx.stx_dio_offset_align > sx.stx_dio_mem_align ? sx.stx_dio_offset_align : sx.stx_dio_mem_align;
    }
#endif
    if (!a) {
        struct stat st;
        a = fstat(fd, &st) == 0 && st.st_blksize > 0 ? (uint64_t)st.st_blksize : 4096;
    }
    if (a < 512 || (a & (a - 1)) || a > HUGE_PAGE)
        a = 4096;
    return a;
}

/* Anonymous memory aligned to 2 MiB; huge: transparent huge pages asked for, for the
 * buffers direct reads land in (the staging buffers, the region read in place): a
 * read then takes few segments and pins few pages. A region the CPU copies into
 * (converted or gathered tensors) gains nothing from them and pays their first
 * touch, 3-5x slower than 4 KiB pages' on the machines we measure (0.5-0.8 GB/s
 * against 2.1-2.8 in a new process: a VM's balloon hands free 2 MiB blocks back to
 * the host, which must back them again). */
static void *map_aligned(size_t len, int huge, void **map, size_t *map_len)
{
    size_t ml = len + HUGE_PAGE;
    void *m = mmap(NULL, ml, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return NULL;
    unsigned char *p = (unsigned char *)align_up((uintptr_t)m, HUGE_PAGE);
    if (huge)
        madvise(p, len, MADV_HUGEPAGE); /* advice: fine if refused */
    *map = m;
    *map_len = ml;
    return p;
}

void lockstep_loaded_free(lockstep_loaded_t *l)
{
    if (!l)
        return;
    if (l->region_map)
        munmap(l->region_map, l->region_map_len);
    ls_cuda_free(l->device);
    free(l->data);
    free(l->parts);
    free(l->views);
    lockstep_model_free(l->model);
    free(l);
}

static lockstep_loaded_t *give_up(lockstep_loaded_t *l, lockstep_load_error_t *err)
{
    int e = err->code < 0 ? -err->code : EIO;
    lockstep_loaded_free(l);
    errno = e == LOCKSTEP_EBADFILE ? EBADMSG : e;
    return NULL;
}

static int run_job(struct job *j)
{
    const lockstep_load_params_t *p = j->p;
    uint64_t chunk = p->chunk_bytes ? p->chunk_bytes : (4u << 20);
    chunk = align_up(chunk, j->align);
    if (chunk < 2 * j->align)
        chunk = 2 * j->align;
    int rc = j->in_place ? ls_load_plan_in_place(j, chunk) : ls_load_plan_staged(j, chunk);
    if (rc)
        return ls_load_fail(j, rc, 0, "out of memory planning the reads");
    if (j->in_place && p->check) {
        j->remaining = calloc(j->n_sel ? j->n_sel : 1, sizeof *j->remaining);
        if (!j->remaining)
            return ls_load_fail(j, -ENOMEM, 0, "out of memory");
        for (size_t k = 0; k < j->n_sel; k++) {
            const lockstep_tensor_info_t *t = &j->t[j->sel[k]];
            atomic_init(&j->remaining[k], t->size);
        }
    }
    int staging = !j->in_place && (j->cuda || j->fd_direct >= 0 || j->to_kind >= 0);
    int readers = p->n_readers ? p->n_readers : staging && !j->cuda ? STAGED_READERS : IN_PLACE_READERS;
    if ((size_t)readers > j->n_chunks)
        readers = j->n_chunks ? (int)j->n_chunks : 1;
    j->n_readers = readers;
    void *maps[MAX_READERS][LS_CUDA_RING];
    size_t map_lens[MAX_READERS][LS_CUDA_RING];
    int pinned[MAX_READERS][LS_CUDA_RING];
    memset(maps, 0, sizeof maps);
    memset(pinned, 0, sizeof pinned);
    j->stage_bytes = chunk + 2 * j->align;
    int ring = j->cuda ? LS_CUDA_RING : 1;
    for (int r = 0; staging && r < readers && !rc; r++)
        for (int b = 0; b < ring && !rc; b++) {
            if (!(j->stage[r][b] = map_aligned(j->stage_bytes, 1, &maps[r][b], &map_lens[r][b])))
                rc = ls_load_fail(j, -ENOMEM, 0, "out of memory for staging buffers");
            else if (j->cuda && ls_cuda_pin(j->stage[r][b], j->stage_bytes) != 0)
                rc = ls_load_fail(j, -EIO, 0, "CUDA: cannot pin a staging buffer");
            else
                pinned[r][b] = j->cuda;
        }
    if (!rc && j->n_chunks) {
        lockstep_pool_params_t pp = lockstep_pool_params_default();
        pp.n_threads = readers + ((j->in_place && !j->alias) || j->packed ? 1 : 0); /* + the pre-faulter */
        pp.wait_policy = LOCKSTEP_WAIT_PASSIVE; /* readers sleep in read(2), not on us */
        lockstep_pool_t *pool = lockstep_pool_create(&pp);
        if (!pool)
            rc = ls_load_fail(j, -errno, 0, "cannot start %d reader threads: %s", pp.n_threads, strerror(errno));
        else {
            lockstep_pool_run(pool, ls_load_worker, j);
            lockstep_pool_free(pool);
            rc = atomic_load(&j->failed);
        }
    }
    for (int r = 0; r < MAX_READERS; r++)
        for (int b = 0; b < LS_CUDA_RING; b++) {
            if (pinned[r][b])
                ls_cuda_unpin(j->stage[r][b]);
            if (maps[r][b])
                munmap(maps[r][b], map_lens[r][b]);
        }
    return rc ? rc : atomic_load(&j->failed);
}

lockstep_loaded_t *lockstep_load(const char *path, const lockstep_load_params_t *params,
                                 lockstep_load_error_t *err)
{
    double t0 = ls_load_now(), c0 = ls_load_cpu_now();
    lockstep_load_error_t scratch;
    if (!err)
        err = &scratch;
    memset(err, 0, sizeof *err);
    lockstep_load_params_t defaults = lockstep_load_params_default();
    const lockstep_load_params_t *p = params ? params : &defaults;
    int maps = p->mode == LOCKSTEP_LOAD_ALIAS || p->mode == LOCKSTEP_LOAD_MAP;
    if (!path || (unsigned)p->mode > LOCKSTEP_LOAD_MAP || (unsigned)p->sink > LOCKSTEP_SINK_CUDA ||
        p->n_readers < 0 || p->n_readers > MAX_READERS || (p->n_names && !p->names) ||
        (maps && (p->sink != LOCKSTEP_SINK_HOST || p->dest)) ||
        (p->to_type && (ls_float_kind(p->to_type) < 0 || maps || p->sink == LOCKSTEP_SINK_CUDA)) ||
        (unsigned)p->numa > LOCKSTEP_NUMA_OFF) {
        set_err(err, -EINVAL, "%s", !path ? "no path given"
                : (unsigned)p->numa > LOCKSTEP_NUMA_OFF ? "numa must be LOCKSTEP_NUMA_LOCAL, _NODE or _OFF"
                : p->to_type && ls_float_kind(p->to_type) < 0 ? "to_type must be \"F32\", \"F16\" or \"BF16\""
                : p->to_type ? "to_type converts while copying: not with alias or map mode or the CUDA sink"
                : maps ? "alias and map modes map the file: host sink, no dest"
                : "bad load params (mode, sink, n_readers 0..64, names)");
        errno = EINVAL;
        return NULL;
    }
    if (p->shard && ls_shard_check(p->shard, err)) { /* before any tensor is looked at */
        errno = EINVAL;
        return NULL;
    }
    lockstep_loaded_t *l = calloc(1, sizeof *l);
    if (!l) {
        set_err(err, -ENOMEM, "out of memory");
        errno = ENOMEM;
        return NULL;
    }
    if (!(l->model = lockstep_model_open(path, err)))
        return give_up(l, err);
    const lockstep_model_t *m = l->model;
    struct job j;
    memset(&j, 0, sizeof j);
    j.l = l;
    j.p = p;
    j.t = m->tensors;
    j.err = err;
    j.fd_direct = j.fd_buf = -1;
    j.file_size = m->map_len;
    atomic_init(&j.fallback_at, UINT64_MAX);
    pthread_mutex_init(&j.mu, NULL);

    /* 1. the selection */
    size_t nt1 = m->n_tensors ? m->n_tensors : 1;
    l->data = calloc(nt1, sizeof *l->data);
    l->parts = calloc(nt1, sizeof *l->parts);
    l->views = calloc(nt1, sizeof *l->views);
    j.sel = calloc(nt1, sizeof *j.sel);
    j.from_kind = calloc(nt1, 1);
    j.to_kind = p->to_type ? ls_float_kind(p->to_type) : -1;
    if (!l->data || !l->parts || !l->views || !j.sel || !j.from_kind) {
        set_err(err, -ENOMEM, "out of memory");
        goto out;
    }
    if (p->names) {
        for (size_t i = 0; i < p->n_names; i++) {
            const lockstep_tensor_info_t *t = p->names[i] ? lockstep_model_tensor_find(m, p->names[i]) : NULL;
            if (!t) {
                set_err(err, -ENOENT, "no tensor named \"%s\" in %s", p->names[i] ? p->names[i] : "(null)", path);
                goto out;
            }
            size_t idx = (size_t)(t - m->tensors);
            if (!l->data[idx]) { /* a name given twice counts once */
                l->data[idx] = (void *)1;
                j.sel[j.n_sel++] = idx;
            }
        }
        memset(l->data, 0, m->n_tensors * sizeof *l->data);
    } else {
        for (size_t i = 0; i < m->n_tensors; i++)
            j.sel[j.n_sel++] = i;
    }
    int gathered = 0, converting = 0; /* some part is more than one range; some converts */
    for (size_t k = 0; k < j.n_sel; k++) {
        size_t i = j.sel[k];
        lockstep_shard_part_t *pt = &l->parts[i];
        if (lockstep_shard_part(m, i, p->shard, pt, err) != 0)
            goto out;
        lockstep_tensor_info_t *v = &l->views[i];
        *v = m->tensors[i];
        for (uint32_t d = 0; d < v->n_dims; d++) /* the part's shape, in the file's order */
            v->dims[d] = pt->shape[m->format == LOCKSTEP_FORMAT_GGUF ? v->n_dims - 1 - d : d];
        v->offset = pt->offset;
        v->size = pt->size;
        gathered |= pt->runs > 1;
        if (j.to_kind >= 0 && convert_to(m, v, j.to_kind, &j.from_kind[i], err))
            goto out;
        converting |= j.from_kind[i] != 0;
    }
    j.t = l->views;
    qsort_r(j.sel, j.n_sel, sizeof *j.sel, cmp_sel, l->views);
    for (size_t k = 0; k < j.n_sel; k++)
        j.total += l->views[j.sel[k]].size;
    l->stats.bytes = j.total;
    l->stats.numa_node = -1;
    l->stats.resident = ls_load_resident(m, l->views, j.sel, j.n_sel);

    /* 2. the mode */
    lockstep_load_mode_t mode = p->mode;
    if (mode == LOCKSTEP_LOAD_AUTO && l->stats.resident < LOCKSTEP_LOAD_WARM_FRACTION)
        mode = LOCKSTEP_LOAD_COPY;
    else if (mode == LOCKSTEP_LOAD_AUTO) /* warm: map it, unless the loader's own memory is asked for */
        mode = p->sink == LOCKSTEP_SINK_HOST && !p->dest && !p->to_type && !gathered &&
                       (p->numa == LOCKSTEP_NUMA_OFF || (p->numa == LOCKSTEP_NUMA_LOCAL && ls_numa_max_node() == 0))
                   ? LOCKSTEP_LOAD_MAP
                   : LOCKSTEP_LOAD_BUFFERED;
    l->stats.mode = mode;
    if ((mode == LOCKSTEP_LOAD_ALIAS || mode == LOCKSTEP_LOAD_MAP) && gathered) {
        set_err(err, -EINVAL, "alias and map modes map the file: a shard plan may split only the "
                "outermost dimension (rows) there, whose parts are one range of the file");
        goto out;
    }
    /* MAP: the mapping is private, so writes copy pages and never reach the file */
    if (mode == LOCKSTEP_LOAD_MAP && m->map_len && mprotect(m->map, m->map_len, PROT_READ | PROT_WRITE) != 0) {
        set_err(err, -errno, "cannot make the mapping of %s writable: %s", path, strerror(errno));
        goto out;
    }
    if (mode == LOCKSTEP_LOAD_ALIAS || mode == LOCKSTEP_LOAD_MAP) {
        /* the region is the model's mapping; a cold one is populated by the readers */
        l->region = m->map;
        l->region_len = m->map_len;
        j.alias = j.in_place = 1;
        j.align = (uint64_t)sysconf(_SC_PAGESIZE);
        for (size_t k = 0; k < j.n_sel; k++)
            l->data[j.sel[k]] = (unsigned char *)m->map + l->views[j.sel[k]].offset;
        if (l->stats.resident >= LOCKSTEP_LOAD_WARM_FRACTION && !p->check)
            ls_load_map_warm(&j);
        else
            run_job(&j);
        goto out;
    }

    /* 3. the destination */
    j.cuda = p->sink == LOCKSTEP_SINK_CUDA;
    if (j.cuda) {
        int rc = ls_cuda_open(p->device);
        if (rc) {
            set_err(err, rc, rc == -ENODEV ? "CUDA sink: no CUDA runtime or no GPU on this machine"
                                           : "CUDA sink: cannot use device %d", p->device);
            goto out;
        }
    }
    j.fd_buf = open(path, O_RDONLY | O_CLOEXEC);
    if (j.fd_buf < 0) {
        set_err(err, -errno, "cannot open %s: %s", path, strerror(errno));
        goto out;
    }
    j.align = dio_align(j.fd_buf);
    if (mode == LOCKSTEP_LOAD_COPY) {
        if (j.align)
            j.fd_direct = open(path, O_RDONLY | O_CLOEXEC | O_DIRECT);
        if (j.fd_direct < 0) { /* refused at open: buffered from the first byte */
            atomic_store(&j.direct_refused, 1);
            atomic_store(&j.fallback_at, j.n_sel ? l->views[j.sel[0]].offset : 0);
        }
        const char *hook = getenv("LOCKSTEP_LOAD_REFUSE_DIRECT_AT");
        j.refuse_direct_at = hook && *hook ? strtoull(hook, NULL, 0) : UINT64_MAX;
    }
    if (!j.align)
        j.align = 4096;
    j.in_place = !j.cuda && !p->dest && !gathered && !converting;
    if (j.in_place && j.n_sel) {
        const lockstep_tensor_info_t *first = &l->views[j.sel[0]];
        uint64_t end = 0;
        for (size_t k = 0; k < j.n_sel; k++) {
            uint64_t e = l->views[j.sel[k]].offset + l->views[j.sel[k]].size;
            end = e > end ? e : end;
        }
        j.base_off = align_down(first->offset, j.align);
        l->region_len = align_up(end, j.align) - j.base_off;
        if (!(l->region = map_aligned(l->region_len ? l->region_len : 1, 1, &l->region_map, &l->region_map_len))) {
            set_err(err, -ENOMEM, "cannot allocate %llu bytes for the tensors",
                    (unsigned long long)l->region_len);
            goto out;
        }
        for (size_t k = 0; k < j.n_sel; k++)
            l->data[j.sel[k]] = l->region + (l->views[j.sel[k]].offset - j.base_off);
    } else if (!j.cuda && !p->dest && j.n_sel) { /* gathered or converted: packed, 64-byte aligned */
        uint64_t size = 0;
        for (size_t k = 0; k < j.n_sel; k++)
            size = align_up(size, 64) + l->views[j.sel[k]].size;
        l->region_len = size;
        j.packed = 1;
        if (!(l->region = map_aligned(size ? size : 1, 0, &l->region_map, &l->region_map_len))) {
            set_err(err, -ENOMEM, "cannot allocate %llu bytes for the tensors", (unsigned long long)size);
            goto out;
        }
        size = 0;
        for (size_t k = 0; k < j.n_sel; k++) {
            size = align_up(size, 64);
            l->data[j.sel[k]] = l->region + size;
            size += l->views[j.sel[k]].size;
        }
    } else if (j.cuda && !p->dest) {
        uint64_t size = 0;
        for (size_t k = 0; k < j.n_sel; k++)
            size = align_up(size, 256) + l->views[j.sel[k]].size;
        if (ls_cuda_malloc(&l->device, size) != 0) {
            set_err(err, -ENOMEM, "CUDA: cannot allocate %llu bytes on device %d",
                    (unsigned long long)size, p->device);
            goto out;
        }
        size = 0;
        for (size_t k = 0; k < j.n_sel; k++) {
            size = align_up(size, 256);
            l->data[j.sel[k]] = (unsigned char *)l->device + size;
            size += l->views[j.sel[k]].size;
        }
    } else if (p->dest) {
        for (size_t k = 0; k < j.n_sel; k++) {
            const lockstep_tensor_info_t *t = &l->views[j.sel[k]];
            if (!(l->data[j.sel[k]] = p->dest(p->dest_arg, t))) {
                set_err(err, -EINVAL, "dest returned NULL for tensor \"%s\"", t->name);
                goto out;
            }
        }
    }

    if (l->region && place(l, p, err))
        goto out;

    /* 4-5. read */
    run_job(&j);

out:
    if (j.fd_direct >= 0)
        close(j.fd_direct);
    if (j.fd_buf >= 0)
        close(j.fd_buf);
    free(j.sel);
    free(j.from_kind);
    free(j.chunks);
    free(j.pieces);
    free((void *)j.remaining);
    pthread_mutex_destroy(&j.mu);
    if (err->code)
        return give_up(l, err);
    l->stats.bytes_read = atomic_load(&j.bytes_read);
    l->stats.direct_fallback = atomic_load(&j.direct_refused);
    l->stats.fallback_offset = l->stats.direct_fallback ? atomic_load(&j.fallback_at) : 0;
    l->stats.seconds = ls_load_now() - t0;
    l->stats.cpu_seconds = ls_load_cpu_now() - c0;
    return l;
}

const lockstep_model_t *lockstep_loaded_model(const lockstep_loaded_t *l)
{
    if (!l)
        errno = EINVAL;
    return l ? l->model : NULL;
}

void *lockstep_loaded_data(const lockstep_loaded_t *l, size_t i)
{
    if (!l || i >= l->model->n_tensors) {
        errno = EINVAL;
        return NULL;
    }
    return l->data[i];
}

int lockstep_loaded_region(const lockstep_loaded_t *l, void **base, size_t *len)
{
    if (!l || !base || !len || !l->region)
        return -EINVAL;
    *base = l->region;
    *len = l->region_len;
    return 0;
}

int lockstep_loaded_stats(const lockstep_loaded_t *l, lockstep_load_stats_t *out)
{
    if (!l || !out)
        return -EINVAL;
    *out = l->stats;
    return 0;
}

const lockstep_tensor_info_t *lockstep_loaded_tensor(const lockstep_loaded_t *l, size_t i)
{
    if (!l || i >= l->model->n_tensors || !l->data[i]) {
        errno = EINVAL;
        return NULL;
    }
    return &l->views[i];
}

int lockstep_loaded_part(const lockstep_loaded_t *l, size_t i, lockstep_shard_part_t *out)
{
    if (!l || !out || i >= l->model->n_tensors || !l->data[i])
        return -EINVAL;
    *out = l->parts[i];
    return 0;
}

