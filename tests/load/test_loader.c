/* The loader: every mode x destination x reader count x chunk size delivers exactly the
 * file's bytes for every tensor (empty, 0-d, odd-sized, chunk-crossing); selection by
 * name; progress is monotonic and ends at the total; cancel; the NaN/Inf check names
 * the tensor and the byte (in place, staged and alias); refused direct I/O continues
 * buffered from the refused offset; bad parameters, files and sinks give their errors. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/stat.h>

#include "lockstep/lockstep.h"
#include "../common/check.h"

/* ---- a small safetensors file ------------------------------------------------------- */

struct spec { const char *name, *dtype; int nd; uint64_t shape[2]; unsigned elsize; };

static const struct spec specs[] = {
    {"a", "F32", 1, {3000}, 4},      /* 12000 bytes */
    {"b", "F16", 1, {7}, 2},         /* odd size */
    {"c", "BF16", 2, {0, 5}, 2},     /* empty */
    {"d", "U8", 1, {5}, 1},
    {"e", "F32", 0, {0}, 4},         /* 0-d: one element */
    {"f", "F16", 2, {200, 200}, 2},  /* 80000 bytes: crosses many 8 KiB chunks */
    {"g", "F32", 1, {20000}, 4},     /* 80000 bytes */
    {"h", "BF16", 1, {9}, 2},
};
#define NT (sizeof specs / sizeof specs[0])

static uint64_t elems(const struct spec *s)
{
    uint64_t n = 1;
    for (int d = 0; d < s->nd; d++)
        n *= s->shape[d];
    return n;
}

static unsigned char *file_bytes;
static size_t file_len;
static uint64_t data_start, offs[NT];

/* Write the file; poison: 0 none, 1 a NaN in g[12345], 2 an Inf in f[777]. */
static void write_file(const char *path, int poison)
{
    char hdr[4096];
    int n = snprintf(hdr, sizeof hdr, "{\"__metadata__\":{\"k\":\"v\"}");
    uint64_t at = 0;
    for (unsigned i = 0; i < NT; i++) {
        uint64_t bytes = elems(&specs[i]) * specs[i].elsize;
        n += snprintf(hdr + n, sizeof hdr - (size_t)n, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[", specs[i].name, specs[i].dtype);
        for (int d = 0; d < specs[i].nd; d++)
            n += snprintf(hdr + n, sizeof hdr - (size_t)n, "%s%llu", d ? "," : "", (unsigned long long)specs[i].shape[d]);
        n += snprintf(hdr + n, sizeof hdr - (size_t)n, "],\"data_offsets\":[%llu,%llu]}",
                      (unsigned long long)at, (unsigned long long)(at + bytes));
        offs[i] = at;
        at += bytes;
    }
    n += snprintf(hdr + n, sizeof hdr - (size_t)n, "}");
    while (n % 8)
        hdr[n++] = ' ';
    data_start = 8 + (uint64_t)n;
    file_len = (size_t)(data_start + at);
    free(file_bytes);
    file_bytes = malloc(file_len);
    CHECK(file_bytes != NULL);
    uint64_t hl = (uint64_t)n;
    memcpy(file_bytes, &hl, 8);
    memcpy(file_bytes + 8, hdr, (size_t)n);
    for (unsigned i = 0; i < NT; i++) {
        offs[i] += data_start;
        unsigned char *p = file_bytes + offs[i];
        for (uint64_t k = 0; k < elems(&specs[i]); k++) {
            /* finite values that differ from element to element and tensor to tensor */
            if (specs[i].elsize == 4) {
                float v = (float)(k % 1000) * 0.001f + (float)i;
                memcpy(p + 4 * k, &v, 4);
            } else if (specs[i].elsize == 2) {
                uint16_t v = (uint16_t)(0x3c00 + (k * 7 + i) % 1000);
                memcpy(p + 2 * k, &v, 2);
            } else {
                p[k] = (unsigned char)(k * 31 + i);
            }
        }
    }
    if (poison == 1) {
        uint32_t nan = 0x7fc00000u;
        memcpy(file_bytes + offs[6] + 4 * 12345, &nan, 4);
    } else if (poison == 2) {
        uint16_t inf = 0x7c00;
        memcpy(file_bytes + offs[5] + 2 * 777, &inf, 2);
    }
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    CHECK(fwrite(file_bytes, 1, file_len, f) == file_len);
    CHECK(fclose(f) == 0);
}

/* ---- callbacks -------------------------------------------------------------------------- */

struct prog { uint64_t last, total, calls; int cancel_at; int bad; };

static int on_progress(void *arg, uint64_t done, uint64_t total)
{
    struct prog *p = arg;
    if (done < p->last || done > total || (p->total && total != p->total))
        p->bad = 1;
    p->last = done;
    p->total = total;
    p->calls++;
    return p->cancel_at && (int)p->calls >= p->cancel_at;
}

static void *dests[NT];

static void *to_malloc(void *arg, const lockstep_tensor_info_t *t)
{
    (void)arg;
    for (unsigned i = 0; i < NT; i++)
        if (strcmp(specs[i].name, t->name) == 0) {
            free(dests[i]);
            dests[i] = malloc(t->size ? t->size : 1);
            return dests[i];
        }
    return NULL;
}

static void *to_null(void *arg, const lockstep_tensor_info_t *t)
{
    (void)arg;
    (void)t;
    return NULL;
}

/* ---- checks -------------------------------------------------------------------------- */

static uint64_t total_bytes(void)
{
    uint64_t s = 0;
    for (unsigned i = 0; i < NT; i++)
        s += elems(&specs[i]) * specs[i].elsize;
    return s;
}

/* The loaded tensors hold exactly the file's bytes; selected[i] says which were asked. */
static void check_data(lockstep_loaded_t *l, const int *selected)
{
    const lockstep_model_t *m = lockstep_loaded_model(l);
    CHECK_EQ(lockstep_model_tensor_count(m), NT);
    for (unsigned i = 0; i < NT; i++) {
        const lockstep_tensor_info_t *t = lockstep_model_tensor_find(m, specs[i].name);
        CHECK(t != NULL);
        CHECK_EQ(t->offset, offs[i]);
        const unsigned char *d = lockstep_loaded_data(l, (size_t)(t - lockstep_model_tensor(m, 0)));
        if (selected && !selected[i]) {
            CHECK(d == NULL);
            continue;
        }
        CHECK(d != NULL);
        if (memcmp(d, file_bytes + t->offset, t->size) != 0) {
            fprintf(stderr, "tensor %s differs\n", t->name);
            exit(1);
        }
    }
}

static const char *mode_name[] = {"auto", "alias", "copy", "buffered", "map"};
enum { N_MODES = 5 };

/* ALIAS and MAP map the file: no caller destinations */
static int maps(int mode)
{
    return mode == LOCKSTEP_LOAD_ALIAS || mode == LOCKSTEP_LOAD_MAP;
}

static void matrix(const char *path)
{
    for (int mode = 0; mode < N_MODES; mode++)
        for (int dest = 0; dest < 2; dest++)
            for (int readers = 1; readers <= 3; readers += 2)
                for (int small = 0; small < 2; small++)
                    for (int check = 0; check < 2; check++) {
                        lockstep_load_params_t p = lockstep_load_params_default();
                        struct prog pr = {0};
                        p.mode = (lockstep_load_mode_t)mode;
                        p.n_readers = readers;
                        p.chunk_bytes = small ? 8192 : 0;
                        p.check = check;
                        p.progress = on_progress;
                        p.progress_arg = &pr;
                        if (dest)
                            p.dest = to_malloc;
                        lockstep_load_error_t err;
                        lockstep_loaded_t *l = lockstep_load(path, &p, &err);
                        if (maps(mode) && dest) {
                            CHECK(l == NULL);
                            CHECK_EQ(errno, EINVAL);
                            CHECK_EQ(err.code, -EINVAL);
                            continue;
                        }
                        if (!l) {
                            fprintf(stderr, "%s dest=%d readers=%d small=%d: %s\n", mode_name[mode], dest,
                                    readers, small, err.message);
                            exit(1);
                        }
                        check_data(l, NULL);
                        lockstep_load_stats_t s;
                        CHECK_EQ(lockstep_loaded_stats(l, &s), 0);
                        CHECK_EQ(s.bytes, total_bytes());
                        CHECK(!pr.bad);
                        CHECK_EQ(pr.last, total_bytes());
                        CHECK(pr.calls >= 1);
                        CHECK(s.mode != LOCKSTEP_LOAD_AUTO);
                        if (mode != LOCKSTEP_LOAD_AUTO)
                            CHECK_EQ(s.mode, mode);
                        void *base;
                        size_t len;
                        int has_region = lockstep_loaded_region(l, &base, &len) == 0;
                        CHECK_EQ(has_region, !dest);
                        lockstep_loaded_free(l);
                    }
}

static void selection(const char *path)
{
    const char *names[] = {"f", "b", "f"};
    lockstep_load_params_t p = lockstep_load_params_default();
    p.names = names;
    p.n_names = 3;
    p.chunk_bytes = 8192;
    for (int mode = 0; mode < N_MODES; mode++) {
        p.mode = (lockstep_load_mode_t)mode;
        lockstep_loaded_t *l = lockstep_load(path, &p, NULL);
        CHECK(l != NULL);
        int sel[NT] = {0, 1, 0, 0, 0, 1, 0, 0};
        check_data(l, sel);
        lockstep_load_stats_t s;
        lockstep_loaded_stats(l, &s);
        CHECK_EQ(s.bytes, 80000 + 14);
        lockstep_loaded_free(l);
    }
    const char *bad[] = {"f", "zzz"};
    p.names = bad;
    p.n_names = 2;
    lockstep_load_error_t err;
    CHECK(lockstep_load(path, &p, &err) == NULL);
    CHECK_EQ(errno, ENOENT);
    CHECK_EQ(err.code, -ENOENT);
    CHECK(strstr(err.message, "zzz") != NULL);
    p.names = names; /* an empty selection loads nothing, successfully */
    p.n_names = 0;
    lockstep_loaded_t *l = lockstep_load(path, &p, NULL);
    CHECK(l != NULL);
    int none[NT] = {0};
    check_data(l, none);
    lockstep_loaded_free(l);
}

static void cancel(const char *path)
{
    for (int mode = 0; mode < N_MODES; mode++)
        for (int dest = 0; dest < 2; dest++) {
            if (maps(mode) && dest)
                continue;
            /* ALIAS and MAP (AUTO's too) map a warm file in one go: one call, at the end */
            int once = (maps(mode) || mode == LOCKSTEP_LOAD_AUTO) && !dest;
            struct prog pr = {.cancel_at = once ? 1 : 2};
            lockstep_load_params_t p = lockstep_load_params_default();
            p.mode = (lockstep_load_mode_t)mode;
            p.chunk_bytes = 8192;
            p.n_readers = 2;
            p.progress = on_progress;
            p.progress_arg = &pr;
            p.dest = dest ? to_malloc : NULL;
            lockstep_load_error_t err;
            CHECK(lockstep_load(path, &p, &err) == NULL);
            CHECK_EQ(errno, ECANCELED);
            CHECK_EQ(err.code, -ECANCELED);
            CHECK(pr.calls >= (uint64_t)pr.cancel_at);
        }
}

static lockstep_load_mode_t resolved(const char *path, const lockstep_load_params_t *p)
{
    lockstep_loaded_t *l = lockstep_load(path, p, NULL);
    CHECK(l != NULL);
    check_data(l, NULL);
    lockstep_load_stats_t s;
    CHECK_EQ(lockstep_loaded_stats(l, &s), 0);
    lockstep_loaded_free(l);
    return s.mode;
}

/* MAP: writable tensors whose writes stay in the process (the file and the next load
 * see the file's bytes); AUTO maps a warm file unless the loader's own memory is asked
 * for (a conversion, a NUMA node) */
static void private_map(const char *path)
{
    lockstep_load_params_t p = lockstep_load_params_default();
    p.mode = LOCKSTEP_LOAD_MAP;
    lockstep_loaded_t *l = lockstep_load(path, &p, NULL);
    CHECK(l != NULL);
    check_data(l, NULL);
    const lockstep_model_t *m = lockstep_loaded_model(l);
    size_t written = 0;
    for (size_t i = 0; i < lockstep_model_tensor_count(m); i++) {
        const lockstep_tensor_info_t *t = lockstep_loaded_tensor(l, i);
        unsigned char *d = lockstep_loaded_data(l, i);
        memset(d, 0xa5, t->size);
        CHECK(t->size == 0 || (d[0] == 0xa5 && d[t->size - 1] == 0xa5));
        written += t->size;
    }
    CHECK(written > 0);
    CHECK_EQ(resolved(path, &p), LOCKSTEP_LOAD_MAP); /* the file's bytes, compared */
    double warm = -1;
    CHECK_EQ(lockstep_model_resident(m, &warm), 0); /* it was just read: in the page cache */
    CHECK(warm >= LOCKSTEP_LOAD_WARM_FRACTION && warm <= 1.0);
    lockstep_loaded_free(l);

    p.mode = LOCKSTEP_LOAD_AUTO; /* just loaded: in the page cache */
    CHECK_EQ(resolved(path, &p), LOCKSTEP_LOAD_MAP);
    p.numa = LOCKSTEP_NUMA_OFF;
    CHECK_EQ(resolved(path, &p), LOCKSTEP_LOAD_MAP);
    p.numa = LOCKSTEP_NUMA_NODE;
    p.numa_node = 0;
    CHECK_EQ(resolved(path, &p), LOCKSTEP_LOAD_BUFFERED);

    lockstep_load_error_t err;
    p = lockstep_load_params_default();
    p.mode = LOCKSTEP_LOAD_MAP;
    p.to_type = "F32";
    CHECK(lockstep_load(path, &p, &err) == NULL && errno == EINVAL && err.code == -EINVAL);
    CHECK(strstr(err.message, "map") != NULL);
    p.to_type = NULL;
    p.sink = LOCKSTEP_SINK_CUDA;
    CHECK(lockstep_load(path, &p, &err) == NULL && errno == EINVAL);
    p.sink = LOCKSTEP_SINK_HOST;
    p.dest = to_malloc;
    CHECK(lockstep_load(path, &p, &err) == NULL && errno == EINVAL);
}

static void poisoned(const char *path)
{
    for (int poison = 1; poison <= 2; poison++) {
        write_file(path, poison);
        uint64_t want = poison == 1 ? offs[6] + 4 * 12345 : offs[5] + 2 * 777;
        const char *name = poison == 1 ? "\"g\"" : "\"f\"";
        for (int mode = 0; mode < N_MODES; mode++)
            for (int dest = 0; dest < 2; dest++)
                for (int small = 0; small < 2; small++) {
                    if (maps(mode) && dest)
                        continue;
                    lockstep_load_params_t p = lockstep_load_params_default();
                    p.mode = (lockstep_load_mode_t)mode;
                    p.chunk_bytes = small ? 8192 : 0;
                    p.dest = dest ? to_malloc : NULL;
                    p.check = 1;
                    lockstep_load_error_t err;
                    CHECK(lockstep_load(path, &p, &err) == NULL);
                    CHECK_EQ(errno, EBADMSG);
                    CHECK_EQ(err.code, -LOCKSTEP_EBADFILE);
                    CHECK_EQ(err.offset, want);
                    CHECK(strstr(err.message, name) != NULL);
                    p.check = 0; /* not asked: the values load as they are */
                    lockstep_loaded_t *l = lockstep_load(path, &p, NULL);
                    CHECK(l != NULL);
                    check_data(l, NULL);
                    lockstep_loaded_free(l);
                }
    }
    write_file(path, 0);
}

/* Does this file system take O_DIRECT reads of this file? */
static int direct_works(const char *path)
{
    int fd = open(path, O_RDONLY | O_DIRECT);
    if (fd < 0)
        return 0;
    void *buf = NULL;
    int ok = posix_memalign(&buf, 4096, 4096) == 0 && pread(fd, buf, 4096, 0) >= 0;
    free(buf);
    close(fd);
    return ok;
}

static void fallback(const char *path)
{
    int direct = direct_works(path);
    for (int dest = 0; dest < 2; dest++) {
        lockstep_load_params_t p = lockstep_load_params_default();
        p.mode = LOCKSTEP_LOAD_COPY;
        p.chunk_bytes = 8192;
        p.n_readers = 2;
        p.dest = dest ? to_malloc : NULL;
        lockstep_loaded_t *l = lockstep_load(path, &p, NULL);
        CHECK(l != NULL);
        check_data(l, NULL);
        lockstep_load_stats_t s;
        lockstep_loaded_stats(l, &s);
        CHECK_EQ(s.direct_fallback, !direct);
        lockstep_loaded_free(l);

        CHECK(setenv("LOCKSTEP_LOAD_REFUSE_DIRECT_AT", "40000", 1) == 0);
        l = lockstep_load(path, &p, NULL);
        CHECK(unsetenv("LOCKSTEP_LOAD_REFUSE_DIRECT_AT") == 0);
        CHECK(l != NULL);
        check_data(l, NULL);
        lockstep_loaded_stats(l, &s);
        CHECK_EQ(s.direct_fallback, 1);
        if (direct) /* refused mid-file: the buffered reads took over at or after there */
            CHECK(s.fallback_offset >= 40000 && s.fallback_offset < file_len);
        lockstep_loaded_free(l);
    }
}

static void bad_input(const char *path, const char *dir)
{
    lockstep_load_error_t err;
    lockstep_load_params_t p = lockstep_load_params_default();
    CHECK(lockstep_load(NULL, &p, &err) == NULL && errno == EINVAL && err.code == -EINVAL);
    p.mode = (lockstep_load_mode_t)9;
    CHECK(lockstep_load(path, &p, &err) == NULL && errno == EINVAL);
    p = lockstep_load_params_default();
    p.n_readers = 65;
    CHECK(lockstep_load(path, &p, &err) == NULL && errno == EINVAL);
    p = lockstep_load_params_default();
    p.mode = LOCKSTEP_LOAD_ALIAS;
    p.sink = LOCKSTEP_SINK_CUDA;
    CHECK(lockstep_load(path, &p, &err) == NULL && errno == EINVAL);
    p = lockstep_load_params_default();
    p.names = NULL;
    p.n_names = 2;
    CHECK(lockstep_load(path, &p, &err) == NULL && errno == EINVAL);
    p = lockstep_load_params_default();
    p.dest = to_null;
    CHECK(lockstep_load(path, &p, &err) == NULL && errno == EINVAL);
    CHECK(strstr(err.message, "dest returned NULL") != NULL);
    p = lockstep_load_params_default();
    p.sink = LOCKSTEP_SINK_CUDA;
    lockstep_loaded_t *l = lockstep_load(path, &p, &err);
    if (!lockstep_cuda_available()) {
        CHECK(l == NULL);
        CHECK_EQ(errno, ENODEV);
        CHECK_EQ(err.code, -ENODEV);
    } else {
        CHECK(l != NULL); /* data is on the device: compared by the CUDA test, not here */
        lockstep_loaded_free(l);
    }
    char missing[512];
    snprintf(missing, sizeof missing, "%s/no-such-file.safetensors", dir);
    CHECK(lockstep_load(missing, NULL, &err) == NULL);
    CHECK_EQ(errno, ENOENT);
    /* a file cut inside its header: the reader's error, with its offset */
    char cut[600];
    snprintf(cut, sizeof cut, "%s.cut", path);
    FILE *f = fopen(cut, "wb");
    CHECK(f != NULL);
    CHECK(fwrite(file_bytes, 1, 100, f) == 100);
    fclose(f);
    CHECK(lockstep_load(cut, NULL, &err) == NULL);
    CHECK_EQ(errno, EBADMSG);
    CHECK_EQ(err.code, -LOCKSTEP_EBADFILE);
    CHECK(err.offset <= 100);
    unlink(cut);
    lockstep_loaded_free(NULL);
    CHECK(lockstep_loaded_data(NULL, 0) == NULL);
    CHECK_EQ(lockstep_loaded_stats(NULL, NULL), -EINVAL);
    double fraction = -1;
    CHECK_EQ(lockstep_model_resident(NULL, &fraction), -EINVAL);
    lockstep_model_t *m = lockstep_model_parse(file_bytes, file_len, NULL);
    CHECK(m != NULL);
    CHECK_EQ(lockstep_model_resident(m, &fraction), -EINVAL); /* memory, not a file */
    CHECK_EQ(lockstep_model_resident(m, NULL), -EINVAL);
    CHECK(fraction == -1);
    lockstep_model_free(m);
}

int main(void)
{
    watchdog(120);
    char path[512];
    /* the build tree (a disk file system, where direct I/O is usually allowed) */
    snprintf(path, sizeof path, "test_loader_%d.safetensors", (int)getpid());
    write_file(path, 0);
    matrix(path);
    selection(path);
    cancel(path);
    private_map(path);
    poisoned(path);
    fallback(path);
    bad_input(path, ".");
    unlink(path);
    for (unsigned i = 0; i < NT; i++)
        free(dests[i]);
    free(file_bytes);
    return 0;
}
