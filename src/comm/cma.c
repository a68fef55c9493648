/* Single-copy reads from peers' private memory with process_vm_readv (see
 * comm_impl.h). Allowed between processes of the same user unless a security module
 * says otherwise (Yama's ptrace_scope, containers without the capability), so each
 * rank tries it at create on every peer's own.pid, which it can also read through the
 * shared segment, and says in each call that might use it whether it can. */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/uio.h>
#include <unistd.h>

#include "comm_impl.h"

/* where single-copy calls post their source and destination: after the zero-copy
 * offsets */
struct ls_cma_posted {
    uint64_t addr, dst;
    uint32_t ok, early; /* early: ls_cma_post_early */
};
_Static_assert(sizeof(struct ls_zc_offsets) + sizeof(struct ls_cma_posted) <= LS_INLINE_BYTES,
               "the post rides in the announcement");

/* rank r's post for call s (copied: ann.data is not 8-byte aligned) */
static struct ls_cma_posted posted(const lockstep_comm_t *c, int r, uint32_t s)
{
    struct ls_cma_posted p;
    memcpy(&p, ls_ctl(c, r)->ann[s & 1].data + sizeof(struct ls_zc_offsets), sizeof p);
    return p;
}

int ls_kernel_copy_env(const char **bad)
{
    const char *s = getenv("LOCKSTEP_KERNEL_COPY");
    if (!s || !*s || strcasecmp(s, "auto") == 0)
        return 0;
    if (strcasecmp(s, "fast") == 0)
        return LS_KCOPY_FAST;
    if (strcasecmp(s, "slow") == 0)
        return LS_KCOPY_SLOW;
    if (bad)
        *bad = s;
    return -1;
}

/* The probe: in cache on any machine that runs collectives, and long enough (tens of
 * microseconds through the kernel) that the clock's resolution does not matter; the
 * fastest of a few rounds, each memcpy then the kernel's copy of the same bytes */
#define PROBE_BYTES ((size_t)256 * 1024)
#define PROBE_ROUNDS 6

uint32_t ls_kernel_copy_measure(void)
{
    int want = ls_kernel_copy_env(NULL);
    if (want > 0)
        return (uint32_t)want;
    char *a = malloc(2 * PROBE_BYTES);
    if (!a) /* nothing to learn from, and single copies then are the old default */
        return LS_KCOPY_FAST;
    char *b = a + PROBE_BYTES;
    memset(a, 1, 2 * PROBE_BYTES);
    uint64_t mem = UINT64_MAX, kernel = UINT64_MAX;
    int ok = 1;
    for (int i = 0; ok && i < PROBE_ROUNDS; i++) {
        uint64_t t0 = lockstep_now_ns();
        memcpy(b, a, PROBE_BYTES);
        __asm__ volatile("" : : "r"(b) : "memory"); /* the copy is used */
        uint64_t t1 = lockstep_now_ns();
        struct iovec local = {b, PROBE_BYTES}, remote = {a, PROBE_BYTES};
        ok = process_vm_readv(getpid(), &local, 1, &remote, 1, 0) == (ssize_t)PROBE_BYTES;
        uint64_t t2 = lockstep_now_ns();
        mem = t1 - t0 < mem ? t1 - t0 : mem;
        kernel = t2 - t1 < kernel ? t2 - t1 : kernel;
    }
    free(a);
    /* a kernel that refuses rank 0's own copies refuses its peers' too: no single
     * copies either way */
    return !ok || kernel > LS_KCOPY_SLOW_RATIO * mem ? LS_KCOPY_SLOW : LS_KCOPY_FAST;
}

void ls_comm_cma_init(lockstep_comm_t *c)
{
    c->cma = !ls_env_set("LOCKSTEP_NO_CMA");
    size_t at = (size_t)((char *)&ls_ctl(c, 0)->own.pid - c->base);
    for (int r = 0; c->cma && r < c->size; r++) {
        if (r == c->rank)
            continue;
        const ls_ctl_t *p = ls_ctl(c, r);
        int32_t pid = __atomic_load_n(&p->own.pid, __ATOMIC_ACQUIRE), got = 0;
        uint64_t base = __atomic_load_n(&p->own.base, __ATOMIC_RELAXED);
        struct iovec local = {&got, sizeof got};
        struct iovec remote = {(void *)(uintptr_t)(base + at + (size_t)r * sizeof(ls_ctl_t)), sizeof got};
        c->cma = process_vm_readv(pid, &local, 1, &remote, 1, 0) == (ssize_t)sizeof got && got == pid;
    }
}

void ls_cma_post(lockstep_comm_t *c, const void *src, void *dst)
{
    struct ls_cma_posted p = {(uint64_t)(uintptr_t)src, (uint64_t)(uintptr_t)dst, (uint32_t)(src && c->cma), 0};
    c->cma_posted = (int)p.ok;
    memcpy(ls_ctl(c, c->rank)->ann[(c->seq + 1) & 1].data + sizeof(struct ls_zc_offsets), &p, sizeof p);
}

void ls_cma_post_early(lockstep_comm_t *c, int early)
{
    uint32_t e = (uint32_t)early;
    memcpy(ls_ctl(c, c->rank)->ann[(c->seq + 1) & 1].data + sizeof(struct ls_zc_offsets) +
               offsetof(struct ls_cma_posted, early),
           &e, sizeof e);
}

int ls_cma_early_peers(const lockstep_comm_t *c)
{
    for (int r = 0; r < c->size; r++)
        if (r != c->rank && !posted(c, r, c->seq).early)
            return 0;
    return 1;
}

/* whether rank r posted its c->cma */
static int cma_ok(const lockstep_comm_t *c, int r)
{
    return r == c->rank ? c->cma_posted : posted(c, r, c->seq).ok != 0;
}

int ls_cma_count(const lockstep_comm_t *c)
{
    int n = 0;
    for (int r = 0; r < c->size; r++)
        n += cma_ok(c, r);
    return n;
}

/* How long a failed rank waits at most for a peer's write into it to end: a piece
 * takes tens of microseconds, so only a writer that cannot run (stopped, say) takes
 * this long, and then its write may still land later. */
#define DRAIN_NS (2000ull * 1000 * 1000)

/* A write that has passed the check below may still be under way when the target
 * gives up and returns; it would then land in memory the caller may have freed or
 * reused. So a writer says, in its own.cma_into, whom it writes into before it checks,
 * and a failed rank waits for every such peer before it reports the failure
 * (ls_comm_failed). Both sides are sequentially consistent, the writer storing
 * cma_into then loading failed, the failure recorded then cma_into loaded: either the
 * writer sees the failure and writes nothing more, or the target sees cma_into. */
void ls_cma_drain(lockstep_comm_t *c)
{
    uint64_t until = 0;
    for (int r = 0; r < c->size; r++) {
        if (r == c->rank)
            continue;
        const ls_ctl_t *p = ls_ctl(c, r);
        for (unsigned i = 0; __atomic_load_n(&p->own.cma_into, __ATOMIC_SEQ_CST) == c->rank + 1; i++) {
            if (!ls_rank_alive(c, r))
                break;
            uint64_t now = lockstep_now_ns();
            if (!until)
                until = now + DRAIN_NS;
            if (now >= until)
                return;
            if (i < 64)
                sched_yield();
            else
                usleep(50);
        }
    }
}

#ifdef LOCKSTEP_PERTURB
/* Perturbation builds: LOCKSTEP_TEST_CMA_STALL_MS holds each piece of a write that has
 * passed its check, so a test can fail the target while the write is under way. */
static void stall_write(void)
{
    const char *s = getenv("LOCKSTEP_TEST_CMA_STALL_MS");
    if (s && *s)
        usleep((useconds_t)strtoul(s, NULL, 10) * 1000u);
}
#else
static void stall_write(void) {}
#endif

/* n bytes between local and rank r's remote address, in either direction. A write
 * goes LS_CMA_PIECE at a time, each piece after a check that the communicator has not
 * failed: a peer that failed the call (its deadline, say) returns, and its recv may be
 * freed memory by then. own.cma_into keeps it from returning while a piece that
 * passed the check is under way (ls_cma_drain). */
static int cma_move(lockstep_comm_t *c, int r, char *local, uint64_t remote, size_t n, int write)
{
    pid_t pid = __atomic_load_n(&ls_ctl(c, r)->own.pid, __ATOMIC_RELAXED);
    int32_t *into = &ls_ctl(c, c->rank)->own.cma_into;
    int rc = 0;
    if (write)
        __atomic_store_n(into, r + 1, __ATOMIC_SEQ_CST);
    while (n) { /* the kernel may stop short (at a page it cannot reach at once, say) */
        if (write && __atomic_load_n(&c->state->failed, __ATOMIC_SEQ_CST) != 0) {
            rc = -1; /* ls_comm_failed's code, once cma_into is clear */
            break;
        }
        size_t m = write && n > LS_CMA_PIECE ? LS_CMA_PIECE : n;
        struct iovec l = {local, m}, rm = {(void *)(uintptr_t)remote, m};
        if (write)
            stall_write();
        ssize_t got = write ? process_vm_writev(pid, &l, 1, &rm, 1, 0) : process_vm_readv(pid, &l, 1, &rm, 1, 0);
        if (got <= 0) {
            if (got < 0 && errno == EINTR)
                continue;
            rc = got < 0 && errno == ESRCH ? LOCKSTEP_EPEERDIED : EIO;
            break;
        }
        local += got;
        remote += (uint64_t)got;
        n -= (size_t)got;
    }
    if (write)
        __atomic_store_n(into, 0, __ATOMIC_RELEASE);
    return rc < 0 ? ls_comm_failed(c) : rc > 0 ? ls_comm_fail(c, rc) : 0;
}

int ls_cma_read(lockstep_comm_t *c, int r, void *dst, uint64_t at, size_t n)
{
    return cma_move(c, r, dst, posted(c, r, c->seq).addr + at, n, 0);
}

int ls_cma_write(lockstep_comm_t *c, int r, const void *src, uint64_t at, size_t n)
{
    return cma_move(c, r, (char *)(uintptr_t)src, posted(c, r, c->seq).dst + at, n, 1);
}
