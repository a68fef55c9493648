/* The pipelined loader (lockstep_load). One load goes through these states:
 *
 * 1. open and parse the file (model.c), select the tensors, measure how much of the
 *    selection is already in the page cache (mincore on the model's mapping);
 * 2. resolve the mode; ALIAS ends here (tensors point into the mapping);
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
 * The defaults, measured on the 2-vCPU VM this was written on (virtio disk,
 * max_segments 254; cold 2 GiB file; GB/s, noisy to +-15 %):
 * - direct reads into 4 KiB-page buffers: 0.8-0.9 GB/s whatever the request size or
 *   depth (1-64 in flight, 64 KiB-16 MiB): a request of scattered pages is split at
 *   254 segments. Into huge-page buffers: 1.3-1.8 GB/s. Hence huge-page regions and
 *   staging buffers;
 * - request size 2-16 MiB and 1-4 readers all within the noise once buffers are huge
 *   pages (1 x 4 MiB: 1.1-1.6; 2 x 4 MiB: 1.3-1.8; 4 x 4 MiB: 1.3-1.5): 2 x 4 MiB;
 * - reading into fresh memory, the page faults (zeroing, 0.2 CPU-s/GB) sit on the
 *   reads' critical path: 1.1-1.3 GB/s; with one thread pre-faulting ahead,
 *   1.45-1.55, the same as into reused buffers;
 * - buffered reads of a cold file: 1.1-1.4 GB/s at 0.45-0.6 CPU-s/GB (the 8 MiB
 *   read-ahead keeps the disk busy, the copy costs the CPU).
 * Reader threads, not io_uring: fio's io_uring engine (4 MiB O_DIRECT reads into
 * hugetlb buffers, queue depth 2, 4 and 8) read the cold 2 GiB GGUF at 1.25-1.5 GB/s
 * in the same minutes that two synchronous reader threads read it at 1.45-1.75; with
 * 4 KiB-page buffers, 0.97-1.15. The depth is not what limits this disk.
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

#include "lockstep/pool.h"
#include "load_impl.h"
#include "sink_cuda.h"

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

#define MAX_READERS 64
#define HUGE_PAGE (2u << 20)
#define STAGED_GAP (64u << 10) /* small gaps inside a staged chunk are read through */
#define WARM_FRACTION 0.9

struct lockstep_loaded {
    lockstep_model_t *model;
    void **data;                 /* per tensor of the model */
    unsigned char *region;       /* host region: allocated, or the model's mapping */
    size_t region_len;
    void *region_map;            /* what to munmap (region rounded to a huge page) */
    size_t region_map_len;
    void *device;                /* CUDA allocation */
    lockstep_load_stats_t stats;
};

struct chunk { uint64_t start, end; uint32_t first, n; }; /* file range; its pieces */
struct piece { uint32_t tensor; uint64_t rel, len; };     /* staged: part of a tensor */

struct job {
    lockstep_loaded_t *l;
    const lockstep_load_params_t *p;
    const lockstep_tensor_info_t *t;   /* the model's tensor table */
    size_t *sel, n_sel;                /* selected tensor indices, by file offset */
    int fd_direct, fd_buf;             /* fd_direct < 0: no direct reads */
    uint64_t align, file_size, base_off, refuse_direct_at;
    int in_place, alias, cuda, n_readers;
    struct chunk *chunks;
    size_t n_chunks;
    struct piece *pieces;
    size_t n_pieces;
    size_t stage_bytes;
    unsigned char *stage[MAX_READERS][LS_CUDA_RING];
    _Atomic uint64_t *remaining;       /* in place: bytes of each selected tensor not read */
    atomic_size_t next;                /* next chunk to claim */
    atomic_int failed;                 /* first error, or 0 */
    atomic_int direct_refused;
    _Atomic uint64_t fallback_at;
    pthread_mutex_t mu;                /* progress calls, one at a time */
    uint64_t done, total;
    lockstep_load_error_t *err;
};

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double cpu_now(void)
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (double)(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
           (double)(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

static uint64_t align_down(uint64_t x, uint64_t a) { return x - x % a; }
static uint64_t align_up(uint64_t x, uint64_t a) { return x + (a - x % a) % a; }

/* Record the first error of the load; later ones are dropped. */
__attribute__((format(printf, 4, 5)))
static int fail(struct job *j, int code, uint64_t offset, const char *fmt, ...)
{
    int zero = 0;
    if (atomic_compare_exchange_strong(&j->failed, &zero, code) && j->err) {
        j->err->code = code;
        j->err->offset = offset;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(j->err->message, sizeof j->err->message, fmt, ap);
        va_end(ap);
    }
    return code;
}

static int bad_value(struct job *j, const lockstep_tensor_info_t *t, uint64_t rel)
{
    return fail(j, -LOCKSTEP_EBADFILE, t->offset + rel,
                "tensor \"%s\" (%s) holds a NaN or Inf %s at byte %llu of the tensor", t->name,
                t->type_name, ls_check_unit(t->type_name) > 8 ? "block scale" : "value",
                (unsigned long long)rel);
}

/* ---- reading ----------------------------------------------------------------------- */

/* Read file bytes [off, off + len) into buf (len may run past the end of the file,
 * whose bytes are left alone). Direct while allowed: off, len and buf are aligned
 * then. A refused direct read (EINVAL) switches every thread to buffered reads and
 * this one continues at the same offset. */
static int read_range(struct job *j, unsigned char *buf, uint64_t off, uint64_t len)
{
    uint64_t end = off + len < j->file_size ? off + len : j->file_size;
    uint64_t got = 0;
    while (off + got < end) {
        int direct = j->fd_direct >= 0 && !atomic_load_explicit(&j->direct_refused, memory_order_relaxed);
        ssize_t r;
        if (direct && off + got >= j->refuse_direct_at) {
            r = -1;
            errno = EINVAL;
        } else if (direct) {
            r = pread(j->fd_direct, buf + got, (size_t)(len - got), (off_t)(off + got));
        } else {
            r = pread(j->fd_buf, buf + got, (size_t)(end - off - got), (off_t)(off + got));
        }
        if (r < 0) {
            int e = errno;
            if (e == EINTR)
                continue;
            if (direct && e == EINVAL) {
                uint64_t at = off + got, cur = atomic_load(&j->fallback_at);
                while (at < cur && !atomic_compare_exchange_weak(&j->fallback_at, &cur, at)) {
                }
                atomic_store(&j->direct_refused, 1);
                continue;
            }
            return fail(j, -e, off + got, "reading %llu bytes at offset %llu: %s",
                        (unsigned long long)(end - off - got), (unsigned long long)(off + got),
                        strerror(e));
        }
        if (r == 0)
            return fail(j, -EIO, off + got, "the file ended at %llu, before the tensor data "
                        "(was it truncated while loading?)", (unsigned long long)(off + got));
        got += (uint64_t)r;
    }
    return 0;
}

/* Count delivered bytes; call progress, which may cancel. */
static void progress(struct job *j, uint64_t bytes)
{
    pthread_mutex_lock(&j->mu);
    j->done += bytes;
    if (j->p->progress && j->p->progress(j->p->progress_arg, j->done, j->total) != 0)
        fail(j, -ECANCELED, 0, "the progress callback cancelled the load at %llu of %llu bytes",
             (unsigned long long)j->done, (unsigned long long)j->total);
    pthread_mutex_unlock(&j->mu);
}

static size_t claim(struct job *j)
{
    if (atomic_load_explicit(&j->failed, memory_order_relaxed))
        return SIZE_MAX;
    size_t c = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
    return c < j->n_chunks ? c : SIZE_MAX;
}

/* ---- in place ------------------------------------------------------------------------ */

/* After chunk [s, e) landed: credit each selected tensor it overlaps; the thread that
 * completes a tensor checks it (while the other readers go on reading). */
static uint64_t credit(struct job *j, uint64_t s, uint64_t e)
{
    size_t lo = 0, hi = j->n_sel; /* first selected tensor ending after s */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const lockstep_tensor_info_t *t = &j->t[j->sel[mid]];
        if (t->offset + t->size <= s)
            lo = mid + 1;
        else
            hi = mid;
    }
    uint64_t bytes = 0;
    for (size_t k = lo; k < j->n_sel && j->t[j->sel[k]].offset < e; k++) {
        const lockstep_tensor_info_t *t = &j->t[j->sel[k]];
        uint64_t a = t->offset > s ? t->offset : s, b = t->offset + t->size < e ? t->offset + t->size : e;
        if (b <= a)
            continue;
        bytes += b - a;
        if (j->p->check && atomic_fetch_sub(&j->remaining[k], b - a) == b - a) {
            uint64_t where;
            if (ls_check_bytes(t->type_name, j->l->data[j->sel[k]], t->size, &where))
                bad_value(j, t, where);
        }
    }
    return bytes;
}

static void run_in_place(struct job *j, int ith)
{
    unsigned char *region = j->l->region;
    if (ith == j->n_readers) { /* the pre-faulter: keep ahead of the readers */
        for (size_t c = 0; c < j->n_chunks && !atomic_load(&j->failed); c++) {
            size_t claimed = atomic_load_explicit(&j->next, memory_order_relaxed);
            if (c < claimed)
                c = claimed; /* readers got there first: jump ahead */
            if (c >= j->n_chunks)
                break;
            const struct chunk *ch = &j->chunks[c];
            if (madvise(region + (ch->start - j->base_off), ch->end - ch->start, MADV_POPULATE_WRITE) != 0)
                break; /* not supported (or no memory): the reads fault pages themselves */
        }
        return;
    }
    for (size_t c; (c = claim(j)) != SIZE_MAX;) {
        const struct chunk *ch = &j->chunks[c];
        unsigned char *at = region + (ch->start - j->base_off);
        if (j->alias) { /* map the file's pages: the reads happen in the page faults */
            uint64_t end = ch->end < j->file_size ? ch->end : j->file_size;
            if (madvise(at, end - ch->start, MADV_POPULATE_READ) != 0) {
                if (errno != EINVAL) { /* EFAULT: the file shrank under us; touching would SIGBUS */
                    fail(j, errno == ENOMEM ? -ENOMEM : -EIO, ch->start, "cannot map bytes %llu..%llu "
                         "of the file (was it truncated while loading?)", (unsigned long long)ch->start,
                         (unsigned long long)end);
                    return;
                }
                volatile const unsigned char *v = at; /* kernels before 5.14 */
                unsigned char sum = 0;
                for (uint64_t k = 0; k < end - ch->start; k += 4096)
                    sum ^= v[k];
                (void)sum;
            }
        } else if (read_range(j, at, ch->start, ch->end - ch->start)) {
            return;
        }
        progress(j, credit(j, ch->start, ch->end));
    }
}

/* ---- staged ---------------------------------------------------------------------------- */

static void run_staged(struct job *j, int ith)
{
    struct ls_cuda_lane lane;
    int b = 0;
    if (j->cuda && ls_cuda_lane_init(&lane, j->p->device) != 0) {
        fail(j, -EIO, 0, "CUDA: cannot create a stream and events on device %d", j->p->device);
        ls_cuda_lane_finish(&lane);
        return;
    }
    /* buffered to host memory: read straight into the destination, no staging */
    int straight = !j->cuda && j->fd_direct < 0;
    for (size_t c; (c = claim(j)) != SIZE_MAX;) {
        const struct chunk *ch = &j->chunks[c];
        uint64_t bytes = 0;
        if (straight) {
            for (uint32_t k = ch->first; k < ch->first + ch->n; k++) {
                const struct piece *pc = &j->pieces[k];
                const lockstep_tensor_info_t *t = &j->t[pc->tensor];
                unsigned char *dst = (unsigned char *)j->l->data[pc->tensor] + pc->rel;
                uint64_t where;
                if (read_range(j, dst, t->offset + pc->rel, pc->len))
                    goto out;
                if (j->p->check && ls_check_bytes(t->type_name, dst, pc->len, &where)) {
                    bad_value(j, t, pc->rel + where);
                    goto out;
                }
                bytes += pc->len;
            }
            progress(j, bytes);
            continue;
        }
        if (j->cuda && ls_cuda_lane_wait(&lane, b)) {
            fail(j, -EIO, ch->start, "CUDA: a host-to-device copy failed");
            break;
        }
        uint64_t rs = align_down(ch->start, j->align), re = align_up(ch->end, j->align);
        unsigned char *buf = j->stage[ith][b];
        if (read_range(j, buf, rs, re - rs))
            break;
        for (uint32_t k = ch->first; k < ch->first + ch->n; k++) {
            const struct piece *pc = &j->pieces[k];
            const lockstep_tensor_info_t *t = &j->t[pc->tensor];
            const unsigned char *src = buf + (t->offset + pc->rel - rs);
            unsigned char *dst = (unsigned char *)j->l->data[pc->tensor] + pc->rel;
            uint64_t where;
            if (j->p->check && ls_check_bytes(t->type_name, src, pc->len, &where)) {
                bad_value(j, t, pc->rel + where);
                goto out;
            }
            if (!j->cuda)
                memcpy(dst, src, pc->len);
            else if (pc->len && ls_cuda_lane_copy(&lane, dst, src, pc->len)) {
                fail(j, -EIO, t->offset + pc->rel, "CUDA: cannot queue a copy of tensor \"%s\"", t->name);
                goto out;
            }
            bytes += pc->len;
        }
        if (j->cuda) {
            if (ls_cuda_lane_mark(&lane, b)) {
                fail(j, -EIO, ch->start, "CUDA: cannot record an event");
                break;
            }
            b ^= 1;
        }
        progress(j, bytes);
    }
out:
    if (j->cuda && ls_cuda_lane_finish(&lane))
        fail(j, -EIO, 0, "CUDA: a host-to-device copy failed");
}

static void worker(void *arg, int ith, int nth)
{
    (void)nth;
    struct job *j = arg;
    if (j->in_place)
        run_in_place(j, ith);
    else
        run_staged(j, ith);
}

/* ---- planning ------------------------------------------------------------------------ */

/* In place: aligned chunks over the extents of the selection (a gap longer than a
 * chunk starts a new extent; chunk >= 2 * align, so aligned extents never overlap). */
static int plan_in_place(struct job *j, uint64_t chunk)
{
    for (int pass = 0; pass < 2; pass++) {
        size_t n = 0;
        for (size_t k = 0; k < j->n_sel;) {
            uint64_t s = j->t[j->sel[k]].offset, e = s + j->t[j->sel[k]].size;
            for (k++; k < j->n_sel && j->t[j->sel[k]].offset - e <= chunk; k++) {
                uint64_t e2 = j->t[j->sel[k]].offset + j->t[j->sel[k]].size;
                e = e2 > e ? e2 : e;
            }
            if (e == s)
                continue; /* empty tensors only */
            for (uint64_t x = align_down(s, j->align), b = align_up(e, j->align); x < b; x += chunk) {
                if (pass == 1)
                    j->chunks[n] = (struct chunk){x, x + chunk < b ? x + chunk : b, 0, 0};
                n++;
            }
        }
        if (pass == 0) {
            if (n && !(j->chunks = calloc(n, sizeof *j->chunks)))
                return -ENOMEM;
        }
        j->n_chunks = n;
    }
    return 0;
}

/* Staged: whole tensors packed into chunks, big tensors cut into pieces whose length
 * is a multiple of their element/block size. */
static int plan_staged(struct job *j, uint64_t chunk)
{
    /* A tensor yields at most size / step + 1 pieces, step >= chunk / 2 (a block is
     * at most 292 bytes, a chunk at least 2 x 512); every chunk holds at least one
     * piece, so one bound serves both arrays. */
    size_t max = 1;
    for (size_t k = 0; k < j->n_sel; k++)
        max += j->t[j->sel[k]].size / (chunk / 2) + 1;
    j->chunks = calloc(max, sizeof *j->chunks);
    j->pieces = calloc(max, sizeof *j->pieces);
    if (!j->chunks || !j->pieces)
        return -ENOMEM;
    struct chunk *cur = NULL;
    for (size_t k = 0; k < j->n_sel; k++) {
        const lockstep_tensor_info_t *t = &j->t[j->sel[k]];
        if (t->size == 0)
            continue;
        if (cur && t->offset - cur->end <= STAGED_GAP && t->offset + t->size - cur->start <= chunk) {
            j->pieces[j->n_pieces++] = (struct piece){(uint32_t)j->sel[k], 0, t->size};
            cur->n++;
            cur->end = t->offset + t->size;
            continue;
        }
        uint64_t unit = ls_check_unit(t->type_name);
        uint64_t step = t->size <= chunk ? t->size : chunk / unit * unit;
        for (uint64_t rel = 0; rel < t->size; rel += step) {
            uint64_t len = t->size - rel < step ? t->size - rel : step;
            cur = &j->chunks[j->n_chunks++];
            *cur = (struct chunk){t->offset + rel, t->offset + rel + len, (uint32_t)j->n_pieces, 1};
            j->pieces[j->n_pieces++] = (struct piece){(uint32_t)j->sel[k], rel, len};
        }
    }
    return 0;
}

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

static int cmp_sel(const void *a, const void *b, void *ctx)
{
    return ls_cmp_offsets(a, b, ctx);
}

/* Fraction of the selection's pages that are in the page cache. */
static double resident(const lockstep_model_t *m, const size_t *sel, size_t n_sel)
{
    long page = sysconf(_SC_PAGESIZE);
    unsigned char vec[4096];
    uint64_t in = 0, all = 0;
    for (size_t k = 0; k < n_sel; k++) {
        const lockstep_tensor_info_t *t = &m->tensors[sel[k]];
        if (!t->size)
            continue;
        uint64_t a = align_down(t->offset, (uint64_t)page), b = align_up(t->offset + t->size, (uint64_t)page);
        if (b > align_up(m->map_len, (uint64_t)page))
            return 0;
        for (uint64_t x = a; x < b; x += sizeof vec * (uint64_t)page) {
            uint64_t len = b - x < sizeof vec * (uint64_t)page ? b - x : sizeof vec * (uint64_t)page;
            if (mincore((char *)m->map + x, len, vec) != 0)
                return 0;
            for (uint64_t i = 0; i < len / (uint64_t)page; i++)
                in += vec[i] & 1;
            all += len / (uint64_t)page;
        }
    }
    return all ? (double)in / (double)all : 1.0;
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

static void *map_huge(size_t len, void **map, size_t *map_len)
{
    size_t ml = len + HUGE_PAGE;
    void *m = mmap(NULL, ml, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return NULL;
    unsigned char *p = (unsigned char *)align_up((uintptr_t)m, HUGE_PAGE);
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
    int rc = j->in_place ? plan_in_place(j, chunk) : plan_staged(j, chunk);
    if (rc)
        return fail(j, rc, 0, "out of memory planning the reads");
    if (j->in_place && p->check) {
        j->remaining = calloc(j->n_sel ? j->n_sel : 1, sizeof *j->remaining);
        if (!j->remaining)
            return fail(j, -ENOMEM, 0, "out of memory");
        for (size_t k = 0; k < j->n_sel; k++) {
            const lockstep_tensor_info_t *t = &j->t[j->sel[k]];
            atomic_init(&j->remaining[k], t->size);
        }
    }
    int readers = p->n_readers ? p->n_readers : 2;
    if ((size_t)readers > j->n_chunks)
        readers = j->n_chunks ? (int)j->n_chunks : 1;
    j->n_readers = readers;
    int staging = !j->in_place && (j->cuda || j->fd_direct >= 0);
    void *maps[MAX_READERS][LS_CUDA_RING];
    size_t map_lens[MAX_READERS][LS_CUDA_RING];
    int pinned[MAX_READERS][LS_CUDA_RING];
    memset(maps, 0, sizeof maps);
    memset(pinned, 0, sizeof pinned);
    j->stage_bytes = chunk + 2 * j->align;
    int ring = j->cuda ? LS_CUDA_RING : 1;
    for (int r = 0; staging && r < readers && !rc; r++)
        for (int b = 0; b < ring && !rc; b++) {
            if (!(j->stage[r][b] = map_huge(j->stage_bytes, &maps[r][b], &map_lens[r][b])))
                rc = fail(j, -ENOMEM, 0, "out of memory for staging buffers");
            else if (j->cuda && ls_cuda_pin(j->stage[r][b], j->stage_bytes) != 0)
                rc = fail(j, -EIO, 0, "CUDA: cannot pin a staging buffer");
            else
                pinned[r][b] = j->cuda;
        }
    if (!rc && j->n_chunks) {
        lockstep_pool_params_t pp = lockstep_pool_params_default();
        pp.n_threads = readers + (j->in_place && !j->alias ? 1 : 0); /* + the pre-faulter */
        pp.wait_policy = LOCKSTEP_WAIT_PASSIVE; /* readers sleep in read(2), not on us */
        lockstep_pool_t *pool = lockstep_pool_create(&pp);
        if (!pool)
            rc = fail(j, -errno, 0, "cannot start %d reader threads: %s", pp.n_threads, strerror(errno));
        else {
            lockstep_pool_run(pool, worker, j);
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
    double t0 = now(), c0 = cpu_now();
    lockstep_load_error_t scratch;
    if (!err)
        err = &scratch;
    memset(err, 0, sizeof *err);
    lockstep_load_params_t defaults = lockstep_load_params_default();
    const lockstep_load_params_t *p = params ? params : &defaults;
    if (!path || (unsigned)p->mode > LOCKSTEP_LOAD_BUFFERED || (unsigned)p->sink > LOCKSTEP_SINK_CUDA ||
        p->n_readers < 0 || p->n_readers > MAX_READERS || (p->n_names && !p->names) ||
        (p->mode == LOCKSTEP_LOAD_ALIAS && (p->sink != LOCKSTEP_SINK_HOST || p->dest))) {
        set_err(err, -EINVAL, "%s", !path ? "no path given"
                : p->mode == LOCKSTEP_LOAD_ALIAS ? "alias mode maps the file: host sink, no dest"
                : "bad load params (mode, sink, n_readers 0..64, names)");
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
    l->data = calloc(m->n_tensors ? m->n_tensors : 1, sizeof *l->data);
    j.sel = calloc(m->n_tensors ? m->n_tensors : 1, sizeof *j.sel);
    if (!l->data || !j.sel) {
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
    qsort_r(j.sel, j.n_sel, sizeof *j.sel, cmp_sel, m->tensors);
    for (size_t k = 0; k < j.n_sel; k++)
        j.total += m->tensors[j.sel[k]].size;
    l->stats.bytes = j.total;
    l->stats.resident = resident(m, j.sel, j.n_sel);

    /* 2. the mode */
    lockstep_load_mode_t mode = p->mode;
    if (mode == LOCKSTEP_LOAD_AUTO)
        mode = l->stats.resident >= WARM_FRACTION ? LOCKSTEP_LOAD_BUFFERED : LOCKSTEP_LOAD_COPY;
    l->stats.mode = mode;
    if (mode == LOCKSTEP_LOAD_ALIAS) {
        /* the region is the model's mapping; populating it is the load */
        l->region = m->map;
        l->region_len = m->map_len;
        j.alias = j.in_place = 1;
        j.align = (uint64_t)sysconf(_SC_PAGESIZE);
        for (size_t k = 0; k < j.n_sel; k++)
            l->data[j.sel[k]] = (unsigned char *)m->map + m->tensors[j.sel[k]].offset;
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
            atomic_store(&j.fallback_at, j.n_sel ? m->tensors[j.sel[0]].offset : 0);
        }
        const char *hook = getenv("LOCKSTEP_LOAD_REFUSE_DIRECT_AT");
        j.refuse_direct_at = hook && *hook ? strtoull(hook, NULL, 0) : UINT64_MAX;
    }
    if (!j.align)
        j.align = 4096;
    j.in_place = !j.cuda && !p->dest;
    if (j.in_place && j.n_sel) {
        const lockstep_tensor_info_t *first = &m->tensors[j.sel[0]];
        uint64_t end = 0;
        for (size_t k = 0; k < j.n_sel; k++) {
            uint64_t e = m->tensors[j.sel[k]].offset + m->tensors[j.sel[k]].size;
            end = e > end ? e : end;
        }
        j.base_off = align_down(first->offset, j.align);
        l->region_len = align_up(end, j.align) - j.base_off;
        if (!(l->region = map_huge(l->region_len ? l->region_len : 1, &l->region_map, &l->region_map_len))) {
            set_err(err, -ENOMEM, "cannot allocate %llu bytes for the tensors",
                    (unsigned long long)l->region_len);
            goto out;
        }
        for (size_t k = 0; k < j.n_sel; k++)
            l->data[j.sel[k]] = l->region + (m->tensors[j.sel[k]].offset - j.base_off);
    } else if (j.cuda && !p->dest) {
        uint64_t size = 0;
        for (size_t k = 0; k < j.n_sel; k++)
            size = align_up(size, 256) + m->tensors[j.sel[k]].size;
        if (ls_cuda_malloc(&l->device, size) != 0) {
            set_err(err, -ENOMEM, "CUDA: cannot allocate %llu bytes on device %d",
                    (unsigned long long)size, p->device);
            goto out;
        }
        size = 0;
        for (size_t k = 0; k < j.n_sel; k++) {
            size = align_up(size, 256);
            l->data[j.sel[k]] = (unsigned char *)l->device + size;
            size += m->tensors[j.sel[k]].size;
        }
    } else if (p->dest) {
        for (size_t k = 0; k < j.n_sel; k++) {
            const lockstep_tensor_info_t *t = &m->tensors[j.sel[k]];
            if (!(l->data[j.sel[k]] = p->dest(p->dest_arg, t))) {
                set_err(err, -EINVAL, "dest returned NULL for tensor \"%s\"", t->name);
                goto out;
            }
        }
    }

    /* 4-5. read */
    run_job(&j);

out:
    if (j.fd_direct >= 0)
        close(j.fd_direct);
    if (j.fd_buf >= 0)
        close(j.fd_buf);
    free(j.sel);
    free(j.chunks);
    free(j.pieces);
    free((void *)j.remaining);
    pthread_mutex_destroy(&j.mu);
    if (err->code)
        return give_up(l, err);
    l->stats.direct_fallback = atomic_load(&j.direct_refused);
    l->stats.fallback_offset = l->stats.direct_fallback ? atomic_load(&j.fallback_at) : 0;
    l->stats.seconds = now() - t0;
    l->stats.cpu_seconds = cpu_now() - c0;
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
