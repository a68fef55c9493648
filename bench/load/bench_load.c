/* The load benchmark's C side: one measurement per run, of one way to get a model
 * file's tensors into memory, with the page cache cold or warm.
 *
 *   lockstep_bench_load IMPL FILE cold|warm
 *   lockstep_bench_load drop FILE      (drop the file's pages; exit 1 if some stay)
 *
 * IMPL: lockstep-auto, lockstep-copy, lockstep-buffered, lockstep-alias (a mapping, as
 * alias and a warm auto give, has every page touched once, as a user of the tensors
 * would), mmap+memcpy, pread (buffered, one read in flight, tensor by tensor, as
 * llama.cpp without mmap), and the ceilings: memcpy (memory bandwidth, both buffers
 * already faulted in) and direct-read (O_DIRECT reads of the same file into reused
 * huge-page buffers: the best of 1 x 8 MiB, 2 x 4 MiB and 4 x 4 MiB in flight, so the
 * disk's best case), and direct-read-fresh, the ceiling of a load into new memory: 2 x
 * 4 MiB in flight into one destination of the file's size, allocated (huge pages asked
 * for) inside the timing and first touched by the reads, with no memory freed in the
 * process before it.
 * Every impl other than the ceilings allocates its destination inside the timing.
 * Prints two JSON rows (GB/s and CPU-s/GB of tensor bytes) for tools/lockstep. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "lockstep/lockstep.h"
#include "../threads/bench_common.h"

static double now(void) { return (double)bench_now() * 1e-9; }
static double cpu(void) { return bench_cpu_seconds(); }

static void die(const char *what)
{
    fprintf(stderr, "lockstep_bench_load: %s: %s\n", what, strerror(errno));
    exit(1);
}

/* Fraction of the file's pages in the page cache. */
static double residency(const char *path)
{
    int fd = open(path, O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0)
        die(path);
    size_t len = (size_t)st.st_size, page = (size_t)sysconf(_SC_PAGESIZE), n = (len + page - 1) / page;
    void *m = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
    unsigned char *vec = malloc(n ? n : 1);
    if (m == MAP_FAILED || !vec || mincore(m, len, vec) != 0)
        die("mincore");
    size_t in = 0;
    for (size_t i = 0; i < n; i++)
        in += vec[i] & 1;
    munmap(m, len);
    free(vec);
    close(fd);
    return n ? (double)in / (double)n : 0;
}

static int drop(const char *path)
{
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        die(path);
    fdatasync(fd);
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
    double r = residency(path);
    if (r > 0.01) {
        fprintf(stderr, "lockstep_bench_load: %.1f %% of %s stays in the page cache after "
                        "POSIX_FADV_DONTNEED; cold figures would be warm\n", 100 * r, path);
        return 1;
    }
    return 0;
}

/* This VM hands memory a process frees back to the host, and the next process to
 * touch it waits for the host to supply it again (the run after a memory-heavy run was
 * 2x slower, whichever impl it was). Every impl starts with the memory it will need
 * already supplied: touched and freed just before the timing. */
static void prime(uint64_t bytes)
{
    size_t len = (size_t)bytes + (64u << 20);
    unsigned char *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        die("mmap");
    madvise(m, len, MADV_HUGEPAGE);
    memset(m, 0, len);
    munmap(m, len);
}

static void warm(const char *path)
{
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        die(path);
    static char buf[1 << 20];
    while (read(fd, buf, sizeof buf) > 0) {
    }
    close(fd);
}

/* ---- the direct-read ceiling ---------------------------------------------------------- */

struct raw { int fd; size_t chunk, size; atomic_size_t next; unsigned char *dst; };

/* Reads of the whole file into r->dst at the file's offsets (the destination's pages
 * first touched by the reads). */
static void *fresh_reader(void *arg)
{
    struct raw *r = arg;
    for (;;) {
        size_t off = atomic_fetch_add(&r->next, r->chunk);
        if (off >= r->size)
            break;
        if (pread(r->fd, r->dst + off, r->chunk, (off_t)off) < 0)
            die("pread O_DIRECT");
    }
    return NULL;
}

static void *raw_reader(void *arg)
{
    struct raw *r = arg;
    size_t len = r->chunk + (2u << 20);
    unsigned char *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        die("mmap");
    unsigned char *buf = (unsigned char *)(((uintptr_t)m + (2u << 20) - 1) & ~(uintptr_t)((2u << 20) - 1));
    madvise(buf, r->chunk, MADV_HUGEPAGE);
    memset(buf, 0, r->chunk);
    for (;;) {
        size_t off = atomic_fetch_add(&r->next, r->chunk);
        if (off >= r->size)
            break;
        if (pread(r->fd, buf, r->chunk, (off_t)off) < 0)
            die("pread O_DIRECT");
    }
    munmap(m, len);
    return NULL;
}

static double direct_read(const char *path, size_t chunk, int threads)
{
    drop(path);
    struct raw r = {.chunk = chunk};
    struct stat st;
    if ((r.fd = open(path, O_RDONLY | O_DIRECT)) < 0 || fstat(r.fd, &st) != 0)
        die("open O_DIRECT");
    r.size = (size_t)st.st_size;
    atomic_init(&r.next, 0);
    pthread_t t[8];
    double t0 = now();
    for (int i = 0; i < threads; i++)
        pthread_create(&t[i], NULL, raw_reader, &r);
    for (int i = 0; i < threads; i++)
        pthread_join(t[i], NULL);
    double s = now() - t0;
    close(r.fd);
    return s;
}

/* ---- main ---------------------------------------------------------------------------- */

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "drop") == 0)
        return drop(argv[2]);
    if (argc != 4 || (strcmp(argv[3], "cold") && strcmp(argv[3], "warm"))) {
        fprintf(stderr, "usage: lockstep_bench_load IMPL FILE cold|warm | drop FILE\n");
        return 2;
    }
    const char *impl = argv[1], *path = argv[2];
    int cold = strcmp(argv[3], "cold") == 0;
    lockstep_load_error_t err;
    lockstep_model_t *m = lockstep_model_open(path, &err);
    if (!m) {
        fprintf(stderr, "lockstep_bench_load: %s: %s\n", path, err.message);
        return 1;
    }
    size_t n = lockstep_model_tensor_count(m);
    uint64_t bytes = 0;
    for (size_t i = 0; i < n; i++)
        bytes += lockstep_model_tensor(m, i)->size;
    if (cold) {
        if (drop(path))
            return 1;
    } else {
        warm(path);
    }
    if (strcmp(impl, "direct-read-fresh") != 0) /* its memory is to be new */
        prime(strcmp(impl, "memcpy") == 0 ? 2 * bytes : bytes);
    double t0 = now(), c0 = cpu(), secs = 0;
    volatile unsigned char sink = 0;
    if (strncmp(impl, "lockstep-", 9) == 0) {
        lockstep_load_params_t p = lockstep_load_params_default();
        const char *mode = impl + 9;
        p.mode = strcmp(mode, "copy") == 0 ? LOCKSTEP_LOAD_COPY
               : strcmp(mode, "buffered") == 0 ? LOCKSTEP_LOAD_BUFFERED
               : strcmp(mode, "alias") == 0 ? LOCKSTEP_LOAD_ALIAS : LOCKSTEP_LOAD_AUTO;
        lockstep_loaded_t *l = lockstep_load(path, &p, &err);
        if (!l) {
            fprintf(stderr, "lockstep_bench_load: %s: %s\n", path, err.message);
            return 1;
        }
        /* alias, and auto on a warm file: a mapping costs when its pages are touched */
        lockstep_load_stats_t st;
        if (lockstep_loaded_stats(l, &st) == 0 &&
            (st.mode == LOCKSTEP_LOAD_ALIAS || st.mode == LOCKSTEP_LOAD_MAP))
            for (size_t i = 0; i < n; i++) {
                const unsigned char *d = lockstep_loaded_data(l, i);
                for (uint64_t k = 0; k < lockstep_model_tensor(m, i)->size; k += 4096)
                    sink += d[k];
            }
        secs = now() - t0;
        lockstep_loaded_free(l);
    } else if (strcmp(impl, "mmap+memcpy") == 0) {
        int fd = open(path, O_RDONLY);
        struct stat st;
        if (fd < 0 || fstat(fd, &st) != 0)
            die(path);
        unsigned char *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
        unsigned char *dst = malloc(bytes);
        if (map == MAP_FAILED || !dst)
            die("mmap/malloc");
        uint64_t at = 0;
        for (size_t i = 0; i < n; i++) {
            const lockstep_tensor_info_t *t = lockstep_model_tensor(m, i);
            memcpy(dst + at, map + t->offset, t->size);
            at += t->size;
        }
        secs = now() - t0;
        sink += dst[bytes / 2];
        munmap(map, (size_t)st.st_size);
        free(dst);
        close(fd);
    } else if (strcmp(impl, "pread") == 0) {
        int fd = open(path, O_RDONLY);
        unsigned char *dst = malloc(bytes);
        if (fd < 0 || !dst)
            die("open/malloc");
        uint64_t at = 0;
        for (size_t i = 0; i < n; i++) {
            const lockstep_tensor_info_t *t = lockstep_model_tensor(m, i);
            for (uint64_t got = 0; got < t->size;) {
                ssize_t r = pread(fd, dst + at + got, t->size - got, (off_t)(t->offset + got));
                if (r <= 0)
                    die("pread");
                got += (uint64_t)r;
            }
            at += t->size;
        }
        secs = now() - t0;
        sink += dst[bytes / 2];
        free(dst);
        close(fd);
    } else if (strcmp(impl, "memcpy") == 0) {
        unsigned char *a = malloc(bytes), *b = malloc(bytes);
        if (!a || !b)
            die("malloc");
        memset(a, 1, bytes);
        memset(b, 2, bytes);
        c0 = cpu();
        t0 = now();
        memcpy(b, a, bytes);
        secs = now() - t0;
        sink += b[bytes / 3];
        free(a);
        free(b);
    } else if (strcmp(impl, "direct-read") == 0) {
        /* the ceiling: best of three configurations, each over the whole file */
        static const struct { size_t chunk; int threads; } cfg[] = {{8u << 20, 1}, {4u << 20, 2}, {4u << 20, 4}};
        secs = 1e30;
        for (unsigned k = 0; k < 3; k++) {
            c0 = cpu();
            double s = direct_read(path, cfg[k].chunk, cfg[k].threads);
            if (s < secs)
                secs = s;
        }
        struct stat st;
        stat(path, &st);
        bytes = (uint64_t)st.st_size; /* whole-file reads */
    } else if (strcmp(impl, "direct-read-fresh") == 0) {
        struct raw r = {.chunk = 4u << 20};
        struct stat st;
        if ((r.fd = open(path, O_RDONLY | O_DIRECT)) < 0 || fstat(r.fd, &st) != 0)
            die("open O_DIRECT");
        r.size = (size_t)st.st_size;
        atomic_init(&r.next, 0);
        size_t len = (r.size + r.chunk + (4u << 20)) & ~(size_t)((2u << 20) - 1);
        c0 = cpu();
        t0 = now();
        unsigned char *map = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (map == MAP_FAILED)
            die("mmap");
        r.dst = (unsigned char *)(((uintptr_t)map + (2u << 20) - 1) & ~(uintptr_t)((2u << 20) - 1));
        madvise(r.dst, r.size + r.chunk, MADV_HUGEPAGE);
        pthread_t t[2];
        for (int i = 0; i < 2; i++)
            pthread_create(&t[i], NULL, fresh_reader, &r);
        for (int i = 0; i < 2; i++)
            pthread_join(t[i], NULL);
        secs = now() - t0;
        sink += r.dst[r.size / 3];
        munmap(map, len);
        close(r.fd);
        bytes = (uint64_t)r.size; /* whole-file reads */
    } else {
        fprintf(stderr, "lockstep_bench_load: unknown impl %s\n", impl);
        return 2;
    }
    double cpus = cpu() - c0;
    (void)sink;
    const char *base = strrchr(path, '.') ? strrchr(path, '.') + 1 : path;
    double gb = (double)bytes / 1e9;
    printf("{\"workload\": \"%s %s GB/s\", \"impl\": \"%s\", \"param\": %llu, \"unit\": \"GB/s\", \"reps\": [%.4f]}\n",
           base, argv[3], impl, (unsigned long long)bytes, gb / secs);
    printf("{\"workload\": \"%s %s CPU-s/GB\", \"impl\": \"%s\", \"param\": %llu, \"unit\": \"CPU-s/GB\", \"reps\": [%.4f]}\n",
           base, argv[3], impl, (unsigned long long)bytes, cpus / gb);
    lockstep_model_free(m);
    return 0;
}
