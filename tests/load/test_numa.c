/* NUMA placement of the loader's memory: with LOCKSTEP_NUMA_NODE every page of the
 * region (in place, and packed by a conversion) is on that node, as move_pages(2)
 * reports it, on node 0 and on the last node with memory; LOCAL binds nothing on a
 * one-node machine and the caller's node on others; an unknown node or policy is
 * refused. Exit 77 where the kernel does not tell page placement (no NUMA support,
 * or a sandbox that forbids the calls). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#include "lockstep/lockstep.h"
#include "../common/check.h"

static int last_node(const char *file)
{
    FILE *f = fopen(file, "r");
    int max = 0, a;
    char c;
    while (f && fscanf(f, "%d", &a) == 1) {
        max = a > max ? a : max;
        if (fscanf(f, "%c", &c) != 1)
            break;
    }
    if (f)
        fclose(f);
    return max;
}

static void write_file(const char *path)
{
    /* one F16 tensor of 6 MiB: several huge pages */
    const char *hdr = "{\"w\":{\"dtype\":\"F16\",\"shape\":[3145728],\"data_offsets\":[0,6291456]}}";
    char h[128];
    size_t n = strlen(hdr);
    memcpy(h, hdr, n);
    while (n % 8)
        h[n++] = ' ';
    uint64_t hl = n;
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    CHECK(fwrite(&hl, 8, 1, f) == 1 && fwrite(h, 1, n, f) == n);
    static uint16_t data[3145728];
    for (size_t k = 0; k < 3145728; k++)
        data[k] = (uint16_t)(0x3c00 + k % 512);
    CHECK(fwrite(data, 2, 3145728, f) == 3145728);
    CHECK(fclose(f) == 0);
}

/* Every page of the loaded region on node; 77 when the kernel will not say. */
static void check_pages(const lockstep_loaded_t *l, int node)
{
    void *base;
    size_t len;
    CHECK_EQ(lockstep_loaded_region(l, &base, &len), 0);
    size_t n = (len + 4095) / 4096;
    void **pages = calloc(n, sizeof *pages);
    int *status = calloc(n, sizeof *status);
    CHECK(pages && status);
    for (size_t k = 0; k < n; k++)
        pages[k] = (char *)base + k * 4096;
    if (syscall(SYS_move_pages, 0, (unsigned long)n, pages, NULL, status, 0) != 0) {
        CHECK(errno == ENOSYS || errno == EPERM);
        printf("move_pages: %s: cannot see placement here\n", strerror(errno));
        exit(77);
    }
    for (size_t k = 0; k < n; k++)
        if (status[k] != node) {
            fprintf(stderr, "page %zu of %zu: node %d, not %d\n", k, n, status[k], node);
            CHECK(status[k] == node);
        }
    free(pages);
    free(status);
}

static void on_node(const char *path, int node)
{
    const char *types[] = {NULL, "F32"}; /* in place; packed through a conversion */
    for (unsigned k = 0; k < 2; k++) {
        lockstep_load_params_t p = lockstep_load_params_default();
        p.mode = LOCKSTEP_LOAD_COPY;
        p.numa = LOCKSTEP_NUMA_NODE;
        p.numa_node = node;
        p.to_type = types[k];
        lockstep_load_error_t err;
        lockstep_loaded_t *l = lockstep_load(path, &p, &err);
        if (!l)
            fprintf(stderr, "%s\n", err.message);
        CHECK(l != NULL);
        lockstep_load_stats_t st;
        CHECK_EQ(lockstep_loaded_stats(l, &st), 0);
        CHECK_EQ(st.numa_node, node);
        check_pages(l, node);
        lockstep_loaded_free(l);
    }
}

/* Whether this kernel lets a process bind memory (NUMA support, no sandbox refusal) */
static int can_bind(void)
{
    void *m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(m != MAP_FAILED);
    unsigned long mask = 1;
    long rc = syscall(SYS_mbind, m, 4096ul, 1 /* MPOL_PREFERRED */, &mask, 64ul, 0ul);
    int e = errno;
    munmap(m, 4096);
    CHECK(rc == 0 || e == ENOSYS || e == EPERM);
    return rc == 0;
}

int main(void)
{
    watchdog(120);
    if (!can_bind()) {
        printf("mbind(2) is not available here: placement cannot be checked\n");
        return 77;
    }
    char path[128];
    snprintf(path, sizeof path, "test_numa_%d.safetensors", (int)getpid());
    write_file(path);
    int max = last_node("/sys/devices/system/node/online");
    lockstep_load_params_t p = lockstep_load_params_default();
    lockstep_load_error_t err;
    p.numa = LOCKSTEP_NUMA_NODE;
    p.numa_node = max + 1;
    CHECK(lockstep_load(path, &p, &err) == NULL);
    CHECK_EQ(errno, EINVAL);
    CHECK(strstr(err.message, "NUMA node") != NULL);
    p.numa_node = -1;
    CHECK(lockstep_load(path, &p, &err) == NULL);
    CHECK_EQ(errno, EINVAL);
    p.numa = (lockstep_numa_t)7;
    CHECK(lockstep_load(path, &p, &err) == NULL);
    CHECK_EQ(errno, EINVAL);
    /* LOCAL, the default: nothing on one node */
    lockstep_loaded_t *l = lockstep_load(path, NULL, &err);
    CHECK(l != NULL);
    lockstep_load_stats_t st;
    CHECK_EQ(lockstep_loaded_stats(l, &st), 0);
    if (max == 0)
        CHECK_EQ(st.numa_node, -1);
    lockstep_loaded_free(l);
    on_node(path, 0);
    int last = last_node("/sys/devices/system/node/has_memory");
    if (last > 0)
        on_node(path, last);
    unlink(path);
    return 0;
}
