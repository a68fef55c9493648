/* Kernel copies: process_vm_readv/writev between the ranks' private memory (see
 * comm_impl.h). Allowed between processes of the same user unless a security module
 * says otherwise (Yama's ptrace_scope, containers without the capability), so each
 * rank probes every peer at create, and says in each call that might use it whether it
 * offers it. */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/uio.h>
#include <unistd.h>

#include "comm_impl.h"
#include "../wait/kernel.h"

/* where kernel-copy calls post their source and destination: after the zero-copy
 * offsets */
struct ls_kcopy_posted {
    uint64_t addr, dst;
    uint32_t ok, early; /* early: ls_kcopy_post_early */
};
_Static_assert(sizeof(struct ls_zc_offsets) + sizeof(struct ls_kcopy_posted) <= LS_INLINE_BYTES,
               "the post rides in the announcement");

/* rank r's post for call s (copied: ann.data is not 8-byte aligned) */
static struct ls_kcopy_posted posted(const lockstep_comm_t *c, int r, uint32_t s)
{
    struct ls_kcopy_posted p;
    memcpy(&p, ls_ctl(c, r)->ann[s & 1].data + sizeof(struct ls_zc_offsets), sizeof p);
    return p;
}

/* The probe: read one word of each peer's own line through its mapping of the segment,
 * where its own.base says the segment lies in it. It works where the kernel and any
 * security module let this process read its peers, and writing takes the same right. */
void ls_kcopy_init(lockstep_comm_t *c, int allowed)
{
    c->kcopy = allowed;
    size_t at = (size_t)((char *)&ls_ctl(c, 0)->own.pid - c->base);
    for (int r = 0; c->kcopy && r < c->size; r++) {
        if (r == c->rank)
            continue;
        const ls_ctl_t *p = ls_ctl(c, r);
        int32_t pid = ls_load_acquire(&p->own.pid), got = 0;
        uint64_t base = ls_load_relaxed(&p->own.base);
        struct iovec local = {&got, sizeof got};
        struct iovec remote = {(void *)(uintptr_t)(base + at + (size_t)r * sizeof(ls_ctl_t)), sizeof got};
        c->kcopy = process_vm_readv(pid, &local, 1, &remote, 1, 0) == (ssize_t)sizeof got && got == pid;
    }
}

void ls_kcopy_post(lockstep_comm_t *c, const void *src, void *dst)
{
    struct ls_kcopy_posted p = {(uint64_t)(uintptr_t)src, (uint64_t)(uintptr_t)dst, (uint32_t)(src && c->kcopy), 0};
    c->kcopy_posted = (int)p.ok;
    c->posted_call = c->seq + 1;
    memcpy(ls_ctl(c, c->rank)->ann[(c->seq + 1) & 1].data + sizeof(struct ls_zc_offsets), &p, sizeof p);
}

void ls_kcopy_post_early(lockstep_comm_t *c, int early)
{
    uint32_t e = (uint32_t)early;
    memcpy(ls_ctl(c, c->rank)->ann[(c->seq + 1) & 1].data + sizeof(struct ls_zc_offsets) +
               offsetof(struct ls_kcopy_posted, early),
           &e, sizeof e);
}

int ls_kcopy_early_peers(const lockstep_comm_t *c)
{
    for (int r = 0; r < c->size; r++)
        if (r != c->rank && !posted(c, r, c->seq).early)
            return 0;
    return 1;
}

/* whether rank r posted its c->kcopy */
static int offered(const lockstep_comm_t *c, int r)
{
    return r == c->rank ? c->kcopy_posted : posted(c, r, c->seq).ok != 0;
}

int ls_kcopy_count(const lockstep_comm_t *c)
{
    int n = 0;
    for (int r = 0; r < c->size; r++)
        n += offered(c, r);
    return n;
}

/* A write that has passed the check below may still be under way when the target
 * gives up and returns; it would then land in memory the caller may have freed or
 * reused. So a writer says, in its own.kcopy_into, whom it writes into before it checks,
 * and a failed rank waits for every such peer before it reports the failure
 * (ls_comm_failed). Both sides are sequentially consistent, the writer storing
 * kcopy_into then loading failed, the failure recorded then kcopy_into loaded: either the
 * writer sees the failure and writes nothing more, or the target sees kcopy_into. */
void ls_kcopy_drain(lockstep_comm_t *c)
{
    uint64_t until = 0;
    for (int r = 0; r < c->size; r++) {
        if (r == c->rank)
            continue;
        const ls_ctl_t *p = ls_ctl(c, r);
        for (unsigned i = 0; ls_load_seqcst(&p->own.kcopy_into) == c->rank + 1; i++) {
            if (!ls_rank_alive(c, r))
                break;
            uint64_t now = lockstep_now_ns();
            if (!until)
                until = now + LS_DRAIN_NS;
            if (now >= until)
                return;
            if (i < 64)
                ls_yield();
            else
                usleep(50);
        }
    }
}

#ifdef LOCKSTEP_PERTURB
/* Perturbation builds: LOCKSTEP_TEST_KCOPY_STALL_MS holds each piece of a write that has
 * passed its check, so a test can fail the target while the write is under way. */
static void stall_write(void)
{
    const char *s = getenv("LOCKSTEP_TEST_KCOPY_STALL_MS");
    if (s && *s)
        usleep((useconds_t)strtoul(s, NULL, 10) * 1000u);
}
#else
static void stall_write(void) {}
#endif

/* n bytes between local and rank r's remote address, in either direction. A write
 * goes LS_KCOPY_PIECE at a time, each piece after a check that the communicator has not
 * failed: a peer that failed the call (its deadline, say) returns, and its recv may be
 * freed memory by then. own.kcopy_into keeps it from returning while a piece that
 * passed the check is under way (ls_kcopy_drain). */
static int kcopy_move(lockstep_comm_t *c, int r, char *local, uint64_t remote, size_t n, int write)
{
    pid_t pid = ls_load_relaxed(&ls_ctl(c, r)->own.pid);
    int32_t *into = &ls_ctl(c, c->rank)->own.kcopy_into;
    int rc = 0;
    if (write)
        ls_store_seqcst(into, r + 1);
    while (n) { /* the kernel may stop short (at a page it cannot reach at once, say) */
        if (write && ls_load_seqcst(&c->state->failed) != 0) {
            rc = -1; /* ls_comm_failed's code, once kcopy_into is clear */
            break;
        }
        size_t m = write && n > LS_KCOPY_PIECE ? LS_KCOPY_PIECE : n;
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
        ls_store_release(into, 0);
    return rc < 0 ? ls_comm_failed(c) : rc > 0 ? ls_comm_fail(c, rc) : 0;
}

int ls_kcopy_read(lockstep_comm_t *c, int r, void *dst, uint64_t at, size_t n)
{
    return kcopy_move(c, r, dst, posted(c, r, c->seq).addr + at, n, 0);
}

int ls_kcopy_write(lockstep_comm_t *c, int r, const void *src, uint64_t at, size_t n)
{
    return kcopy_move(c, r, (char *)(uintptr_t)src, posted(c, r, c->seq).dst + at, n, 1);
}
