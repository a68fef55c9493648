/* The load's pipeline: planning the chunks (in place or staged), and what each reader
 * thread runs: claim a chunk, read it (direct I/O, or buffered from the same offset on
 * once direct reads are refused), deliver it, check it, count progress. */
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


double ls_load_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double ls_load_cpu_now(void)
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (double)(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
           (double)(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}


/* Record the first error of the load; later ones are dropped. */
__attribute__((format(printf, 4, 5)))
int ls_load_fail(struct job *j, int code, uint64_t offset, const char *fmt, ...)
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

/* tensor idx holds a bad value at file offset at */
static int bad_value(struct job *j, size_t idx, uint64_t at)
{
    const lockstep_tensor_info_t *t = &j->l->model->tensors[idx];
    return ls_load_fail(j, -LOCKSTEP_EBADFILE, at,
                "tensor \"%s\" (%s) holds a NaN or Inf %s at byte %llu of the tensor", t->name,
                t->type_name, ls_check_unit(t->type_name) > 8 ? "block scale" : "value",
                (unsigned long long)(at - t->offset));
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
            return ls_load_fail(j, -e, off + got, "reading %llu bytes at offset %llu: %s",
                        (unsigned long long)(end - off - got), (unsigned long long)(off + got),
                        strerror(e));
        }
        if (r > 0)
            atomic_fetch_add_explicit(&j->bytes_read, (uint64_t)r, memory_order_relaxed);
        if (r == 0)
            return ls_load_fail(j, -EIO, off + got, "the file ended at %llu, before the tensor data "
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
        ls_load_fail(j, -ECANCELED, 0, "the progress callback cancelled the load at %llu of %llu bytes",
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
                bad_value(j, j->sel[k], t->offset + where);
        }
    }
    return bytes;
}

/* Where chunk c's data goes in the loader's region: [*lo, *hi) */
static void chunk_dest(const struct job *j, size_t c, unsigned char **lo, unsigned char **hi)
{
    const struct chunk *ch = &j->chunks[c];
    if (j->in_place) {
        *lo = j->l->region + (ch->start - j->base_off);
        *hi = *lo + (ch->end - ch->start);
        return;
    }
    *lo = NULL;
    *hi = NULL;
    for (uint32_t k = ch->first; k < ch->first + ch->n; k++) { /* packed in file order: one span */
        const struct piece *pc = &j->pieces[k];
        unsigned char *a = (unsigned char *)j->l->data[pc->tensor] + pc->dst, *b = a + dest_bytes(j, pc->tensor, pc->len);
        *lo = !*lo || a < *lo ? a : *lo;
        *hi = !*hi || b > *hi ? b : *hi;
    }
}

/* The pre-faulter: keeps ahead of the readers, faulting in the region's pages
 * (MADV_POPULATE_WRITE never changes data already there, so it may race the readers'
 * writes harmlessly), so that the zeroing of fresh pages overlaps the reads. */
static void prefault(struct job *j)
{
    for (size_t c = 0; c < j->n_chunks && !atomic_load(&j->failed); c++) {
        size_t claimed = atomic_load_explicit(&j->next, memory_order_relaxed);
        if (c < claimed)
            c = claimed; /* readers got there first: jump ahead */
        if (c >= j->n_chunks)
            break;
        unsigned char *lo, *hi;
        chunk_dest(j, c, &lo, &hi);
        uintptr_t page = align_down((uintptr_t)lo, 4096);
        if (lo && madvise((void *)page, (uintptr_t)hi - page, MADV_POPULATE_WRITE) != 0)
            break; /* not supported (or no memory): the reads fault pages themselves */
    }
}

/* Map file bytes [start, end) of the model's mapping: the reads happen in the page
 * faults. 0, or -1 with the failure recorded. */
static int populate(struct job *j, uint64_t start, uint64_t end)
{
    end = end < j->file_size ? end : j->file_size;
    unsigned char *at = (unsigned char *)j->l->model->map + start;
    uintptr_t page = align_down((uintptr_t)at, 4096);
    if (madvise((void *)page, (uintptr_t)(at + (end - start)) - page, MADV_POPULATE_READ) != 0) {
        if (errno != EINVAL) { /* EFAULT: the file shrank under us; touching would SIGBUS */
            ls_load_fail(j, errno == ENOMEM ? -ENOMEM : -EIO, start, "cannot map bytes %llu..%llu "
                         "of the file (was it truncated while loading?)", (unsigned long long)start,
                         (unsigned long long)end);
            return -1;
        }
        volatile const unsigned char *v = at; /* kernels before 5.14 */
        unsigned char sum = 0;
        for (uint64_t k = 0; k < end - start; k += 4096)
            sum ^= v[k];
        (void)sum;
    }
    atomic_fetch_add_explicit(&j->bytes_read, end - start, memory_order_relaxed);
    return 0;
}

/* A warm selection is left to its first touch: the page tables fill then, a 2 MiB
 * page-cache folio with one PMD, where populating walked it page by page and cost
 * more than the faults it saved. The bytes count as mapped; progress is called once. */
void ls_load_map_warm(struct job *j)
{
    atomic_fetch_add_explicit(&j->bytes_read, j->total, memory_order_relaxed);
    progress(j, j->total);
}

static void run_in_place(struct job *j, int ith)
{
    unsigned char *region = j->l->region;
    for (size_t c; (c = claim(j)) != SIZE_MAX;) {
        const struct chunk *ch = &j->chunks[c];
        unsigned char *at = region + (ch->start - j->base_off);
        if (j->alias) {
            if (populate(j, ch->start, ch->end))
                return;
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
        ls_load_fail(j, -EIO, 0, "CUDA: cannot create a stream and events on device %d", j->p->device);
        ls_cuda_lane_finish(&lane);
        return;
    }
    /* buffered to host memory: read straight into the destination, no staging */
    int straight = !j->cuda && j->fd_direct < 0 && j->to_kind < 0;
    for (size_t c; (c = claim(j)) != SIZE_MAX;) {
        const struct chunk *ch = &j->chunks[c];
        uint64_t bytes = 0;
        if (straight) {
            for (uint32_t k = ch->first; k < ch->first + ch->n; k++) {
                const struct piece *pc = &j->pieces[k];
                const lockstep_tensor_info_t *t = &j->l->model->tensors[pc->tensor]; /* as the file has it */
                unsigned char *dst = (unsigned char *)j->l->data[pc->tensor] + pc->dst;
                uint64_t where;
                if (read_range(j, dst, pc->src, pc->len))
                    goto out;
                if (j->p->check && ls_check_bytes(t->type_name, dst, pc->len, &where)) {
                    bad_value(j, pc->tensor, pc->src + where);
                    goto out;
                }
                bytes += pc->len;
            }
            progress(j, bytes);
            continue;
        }
        if (j->cuda && ls_cuda_lane_wait(&lane, b)) {
            ls_load_fail(j, -EIO, ch->start, "CUDA: a host-to-device copy failed");
            break;
        }
        uint64_t rs = align_down(ch->start, j->align), re = align_up(ch->end, j->align);
        unsigned char *buf = j->stage[ith][b];
        if (read_range(j, buf, rs, re - rs))
            break;
        for (uint32_t k = ch->first; k < ch->first + ch->n; k++) {
            const struct piece *pc = &j->pieces[k];
            const lockstep_tensor_info_t *t = &j->l->model->tensors[pc->tensor]; /* as the file has it */
            const unsigned char *src = buf + (pc->src - rs);
            unsigned char *dst = (unsigned char *)j->l->data[pc->tensor] + pc->dst;
            uint64_t where;
            if (j->p->check && ls_check_bytes(t->type_name, src, pc->len, &where)) {
                bad_value(j, pc->tensor, pc->src + where);
                goto out;
            }
            int from = j->from_kind[pc->tensor] - 1;
            if (from >= 0)
                ls_convert(from, j->to_kind, dst, src, pc->len / ls_float_kind_bytes(from));
            else if (!j->cuda)
                memcpy(dst, src, pc->len);
            else if (pc->len && ls_cuda_lane_copy(&lane, dst, src, pc->len)) {
                ls_load_fail(j, -EIO, pc->src, "CUDA: cannot queue a copy of tensor \"%s\"", t->name);
                goto out;
            }
            bytes += dest_bytes(j, pc->tensor, pc->len);
        }
        if (j->cuda) {
            if (ls_cuda_lane_mark(&lane, b)) {
                ls_load_fail(j, -EIO, ch->start, "CUDA: cannot record an event");
                break;
            }
            b ^= 1;
        }
        progress(j, bytes);
    }
out:
    if (j->cuda && ls_cuda_lane_finish(&lane))
        ls_load_fail(j, -EIO, 0, "CUDA: a host-to-device copy failed");
}

void ls_load_worker(void *arg, int ith, int nth)
{
    (void)nth;
    struct job *j = arg;
    if (ith == j->n_readers)
        prefault(j);
    else if (j->in_place)
        run_in_place(j, ith);
    else
        run_staged(j, ith);
}

/* ---- planning ------------------------------------------------------------------------ */

/* In place: aligned chunks over the extents of the selection (a gap of more than
 * STAGED_GAP or two alignment units starts a new extent, so aligned extents never
 * overlap, and a shard plan's rows read little past their own bytes). */
int ls_load_plan_in_place(struct job *j, uint64_t chunk)
{
    uint64_t gap = STAGED_GAP > 2 * j->align ? STAGED_GAP : 2 * j->align;
    for (int pass = 0; pass < 2; pass++) {
        size_t n = 0;
        for (size_t k = 0; k < j->n_sel;) {
            uint64_t s = j->t[j->sel[k]].offset, e = s + j->t[j->sel[k]].size;
            for (k++; k < j->n_sel && j->t[j->sel[k]].offset - e <= gap; k++) {
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

/* Staged: each part's ranges (one, or a column split's runs), whole ones packed into
 * chunks with small gaps read through, long ones cut into pieces whose length is a
 * multiple of their element/block size. */
int ls_load_plan_staged(struct job *j, uint64_t chunk)
{
    /* A range yields at most len / step + 1 pieces, step >= chunk / 2 (a block is at
     * most 292 bytes, a chunk at least 2 x 512); every chunk holds at least one piece,
     * so one bound serves both arrays. */
    size_t max = 1;
    for (size_t k = 0; k < j->n_sel; k++) {
        const lockstep_shard_part_t *pt = &j->l->parts[j->sel[k]];
        max += pt->runs * (pt->run / (chunk / 2) + 1);
    }
    j->chunks = calloc(max, sizeof *j->chunks);
    j->pieces = calloc(max, sizeof *j->pieces);
    if (!j->chunks || !j->pieces)
        return -ENOMEM;
    struct chunk *cur = NULL;
    for (size_t k = 0; k < j->n_sel; k++) {
        uint32_t idx = (uint32_t)j->sel[k];
        const lockstep_shard_part_t *pt = &j->l->parts[idx];
        uint64_t unit = ls_check_unit(j->l->model->tensors[idx].type_name);
        for (uint64_t r = 0; r < pt->runs; r++) { /* converted: destination offsets scale */
            uint64_t src = pt->offset + r * pt->stride, dst = dest_bytes(j, idx, r * pt->run), len = pt->run;
            if (cur && src - cur->end <= STAGED_GAP && src + len - cur->start <= chunk) {
                j->pieces[j->n_pieces++] = (struct piece){idx, src, dst, len};
                cur->n++;
                cur->end = src + len;
                continue;
            }
            uint64_t step = len <= chunk ? len : chunk / unit * unit;
            for (uint64_t rel = 0; rel < len; rel += step) {
                uint64_t n = len - rel < step ? len - rel : step;
                cur = &j->chunks[j->n_chunks++];
                *cur = (struct chunk){src + rel, src + rel + n, (uint32_t)j->n_pieces, 1};
                j->pieces[j->n_pieces++] = (struct piece){idx, src + rel, dst + dest_bytes(j, idx, rel), n};
            }
        }
    }
    return 0;
}
