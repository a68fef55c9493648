/* Model files: the object and its arena, the bounds-checked cursor, and the entry
 * points, which tell the format by its first bytes and hand over to gguf.c or
 * safetensors.c. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "load_impl.h"

/* ---- the model and its arena ---------------------------------------------------------- */

void *ls_arena_alloc(lockstep_model_t *m, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    if (!m->arena || m->arena->cap - m->arena->used < n) {
        size_t cap = n > (64u << 10) ? n : (64u << 10);
        struct block *b = malloc(sizeof *b + cap);
        if (!b)
            return NULL;
        b->next = m->arena;
        b->used = 0;
        b->cap = cap;
        m->arena = b;
    }
    void *p = m->arena->data + m->arena->used;
    m->arena->used += n;
    return p;
}

void lockstep_model_free(lockstep_model_t *m)
{
    if (!m)
        return;
    for (struct block *b = m->arena, *next; b; b = next) {
        next = b->next;
        free(b);
    }
    free(m->meta);
    free(m->tensors);
    if (m->map)
        munmap(m->map, m->map_len);
    free(m);
}

/* ---- the cursor --------------------------------------------------------------------- */

int ls_bad(struct rd *r, uint64_t at, const char *fmt, ...)
{
    if (r->err && r->err->code == 0) {
        r->err->code = -LOCKSTEP_EBADFILE;
        r->err->offset = at;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(r->err->message, sizeof r->err->message, fmt, ap);
        va_end(ap);
    }
    return -1;
}

int ls_need(struct rd *r, uint64_t n, const char *what)
{
    if (n > r->len - r->pos)
        return ls_bad(r, r->pos, "truncated: %s needs %llu bytes, %llu left", what,
                   (unsigned long long)n, (unsigned long long)(r->len - r->pos));
    return 0;
}

int ls_utf8_valid(const unsigned char *s, uint64_t n)
{
    for (uint64_t i = 0; i < n;) {
        unsigned c = s[i];
        uint64_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (!len || len > n - i)
            return 0;
        uint32_t cp = len == 1 ? c : c & (0x7fu >> len);
        for (uint64_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xc0) != 0x80)
                return 0;
            cp = (cp << 6) | (s[i + k] & 0x3fu);
        }
        if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
            cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return 0; /* overlong, out of range, or a surrogate */
        i += len;
    }
    return 1;
}


void *ls_calloc(struct rd *r, uint64_t n, size_t size)
{
    void *p = n <= SIZE_MAX ? calloc(n ? (size_t)n : 1, size) : NULL;
    if (!p)
        r->nomem = 1;
    return p;
}

size_t *ls_sorted_index(struct rd *r, size_t n, int (*cmp)(const void *, const void *, void *), void *ctx)
{
    size_t *idx = ls_calloc(r, n, sizeof *idx);
    if (!idx)
        return NULL;
    for (size_t k = 0; k < n; k++)
        idx[k] = k;
    qsort_r(idx, n, sizeof *idx, cmp, ctx); /* O(n log n): no quadratic scan to exploit */
    return idx;
}

static int cmp_names(const void *a, const void *b, void *ctx)
{
    const char *const *names = ctx;
    return strcmp(names[*(const size_t *)a], names[*(const size_t *)b]);
}

int ls_check_unique(struct rd *r, const char *const *names, const uint64_t *at, size_t n, const char *what)
{
    size_t *idx = ls_sorted_index(r, n, cmp_names, (void *)names);
    if (!idx)
        return -1;
    int rc = 0;
    for (size_t i = 1; i < n && rc == 0; i++)
        if (strcmp(names[idx[i - 1]], names[idx[i]]) == 0) {
            size_t later = idx[i] > idx[i - 1] ? idx[i] : idx[i - 1];
            rc = ls_bad(r, at[later], "%s \"%s\" appears twice", what, names[later]);
        }
    free(idx);
    return rc;
}

int ls_cmp_offsets(const void *a, const void *b, void *ctx)
{
    const lockstep_tensor_info_t *t = ctx;
    uint64_t x = t[*(const size_t *)a].offset, y = t[*(const size_t *)b].offset;
    return x < y ? -1 : x > y;
}

int ls_check_overlap(struct rd *r, const uint64_t *info_at)
{
    lockstep_model_t *m = r->m;
    size_t *idx = ls_sorted_index(r, m->n_tensors, ls_cmp_offsets, m->tensors);
    if (!idx)
        return -1;
    int rc = 0;
    for (size_t i = 1; i < m->n_tensors && rc == 0; i++) {
        const lockstep_tensor_info_t *a = &m->tensors[idx[i - 1]], *b = &m->tensors[idx[i]];
        if (a->size && b->size && a->offset + a->size > b->offset)
            rc = ls_bad(r, info_at[idx[i]], "tensors \"%s\" and \"%s\" overlap", a->name, b->name);
    }
    free(idx);
    return rc;
}

lockstep_model_t *lockstep_model_parse(const void *buf, size_t len, lockstep_load_error_t *err)
{
    lockstep_load_error_t scratch;
    if (!err)
        err = &scratch;
    memset(err, 0, sizeof *err);
    if (!buf && len) {
        err->code = -EINVAL;
        errno = EINVAL;
        return NULL;
    }
    lockstep_model_t *m = calloc(1, sizeof *m);
    if (!m) {
        err->code = -ENOMEM;
        errno = ENOMEM;
        return NULL;
    }
    struct rd r = {buf, len, 0, err, m, 0};
    int rc;
    if (len >= 4 && memcmp(buf, "GGUF", 4) == 0) {
        m->format = LOCKSTEP_FORMAT_GGUF;
        rc = ls_parse_gguf(&r);
    } else if (len >= 9 && ((const unsigned char *)buf)[8] == '{') {
        m->format = LOCKSTEP_FORMAT_SAFETENSORS;
        rc = ls_parse_safetensors(&r);
    } else {
        rc = ls_bad(&r, 0, "neither GGUF (magic \"GGUF\") nor safetensors (8-byte length, then '{')");
    }
    if (rc != 0) {
        lockstep_model_free(m);
        if (r.nomem) {
            err->code = -ENOMEM;
            snprintf(err->message, sizeof err->message, "out of memory");
            errno = ENOMEM;
        } else {
            errno = EBADMSG;
        }
        return NULL;
    }
    return m;
}

lockstep_model_t *lockstep_model_open(const char *path, lockstep_load_error_t *err)
{
    lockstep_load_error_t scratch;
    if (!err)
        err = &scratch;
    memset(err, 0, sizeof *err);
    if (!path) {
        err->code = -EINVAL;
        errno = EINVAL;
        return NULL;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        err->code = -e;
        snprintf(err->message, sizeof err->message, "cannot open %s: %s", path, strerror(e));
        errno = e;
        return NULL;
    }
    size_t len = (size_t)st.st_size;
    void *map = len ? mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0) : NULL;
    int e = errno;
    close(fd);
    if (map == MAP_FAILED) {
        err->code = -e;
        snprintf(err->message, sizeof err->message, "cannot map %s: %s", path, strerror(e));
        errno = e;
        return NULL;
    }
    /* the parser reads the header alone: no read-around of the data behind it (a
     * fault would pull megabytes of a cold file into the page cache) */
    if (map)
        madvise(map, len, MADV_RANDOM);
    lockstep_model_t *m = lockstep_model_parse(map, len, err);
    if (map)
        madvise(map, len, MADV_NORMAL);
    if (!m) {
        e = errno;
        if (map)
            munmap(map, len);
        errno = e;
        return NULL;
    }
    m->map = map;
    m->map_len = len;
    return m;
}

uint32_t lockstep_model_version(const lockstep_model_t *m) { return m ? m->version : 0; }
int lockstep_model_format(const lockstep_model_t *m) { return m ? (int)m->format : -EINVAL; }
uint64_t lockstep_model_alignment(const lockstep_model_t *m) { return m ? m->alignment : 0; }
uint64_t lockstep_model_data_offset(const lockstep_model_t *m) { return m ? m->data_offset : 0; }
size_t lockstep_model_meta_count(const lockstep_model_t *m) { return m ? m->n_meta : 0; }
size_t lockstep_model_tensor_count(const lockstep_model_t *m) { return m ? m->n_tensors : 0; }

const lockstep_meta_t *lockstep_model_meta(const lockstep_model_t *m, size_t i)
{
    return m && i < m->n_meta ? &m->meta[i] : NULL;
}

const lockstep_tensor_info_t *lockstep_model_tensor(const lockstep_model_t *m, size_t i)
{
    return m && i < m->n_tensors ? &m->tensors[i] : NULL;
}

const lockstep_meta_t *lockstep_model_meta_find(const lockstep_model_t *m, const char *key)
{
    for (size_t i = 0; m && key && i < m->n_meta; i++)
        if (strcmp(m->meta[i].key, key) == 0)
            return &m->meta[i];
    return NULL;
}

const lockstep_tensor_info_t *lockstep_model_tensor_find(const lockstep_model_t *m, const char *name)
{
    for (size_t i = 0; m && name && i < m->n_tensors; i++)
        if (strcmp(m->tensors[i].name, name) == 0)
            return &m->tensors[i];
    return NULL;
}
