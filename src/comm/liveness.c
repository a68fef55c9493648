/* Liveness, deadlines and failure: whether a peer still runs (its pid within this PID
 * namespace, and in any namespace its lock on its byte of the segment's file), the
 * segment's failure word (the first failure wins on every rank), and the wait on a
 * peer's word in slices, with those checks between them. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "comm_impl.h"

/* The PID namespace this process's pids are in (the inode of /proc/self/ns/pid), or 0
 * if unknown. Ranks in other containers may share /dev/shm but not pids. Asked once
 * per create (a communicator keeps it): a process never changes its own namespace. */
uint32_t ls_pid_ns(void)
{
    struct stat st;
    return stat("/proc/self/ns/pid", &st) == 0 ? (uint32_t)st.st_ino : 0;
}

/* 0 once process pid of PID namespace ns has exited, as seen from namespace here: gone,
 * or a zombie nobody has reaped yet (our own child, for instance). 1 while it runs or
 * when that cannot be told: a pid of another namespace (or one not known yet) names no
 * process of ours, and only its lock can tell (ls_rank_alive). */
int ls_pid_alive(pid_t pid, uint32_t ns, uint32_t here)
{
    if (pid <= 0 || ns != here)
        return 1; /* not yet recorded, or of another namespace: cannot judge */
    if (kill(pid, 0) != 0 && errno == ESRCH)
        return 0;
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return errno != ENOENT;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *paren = strrchr(buf, ')');
    return !(paren && paren[1] == ' ' && (paren[2] == 'Z' || paren[2] == 'X'));
}

/* Liveness locks. Every rank holds an open-file-description lock (F_OFD_SETLK) on byte
 * `rank` of the segment's file, taken before it claims its rank and held until it
 * frees the communicator or its process ends: the kernel drops it with the last
 * descriptor of that open file, however the process ends. Unlike a pid, it means the
 * same in every PID namespace (containers sharing /dev/shm) and cannot be inherited
 * by an unrelated process. A forked child that keeps the descriptor keeps the lock,
 * so the pid is checked too. Rank 0's lock on byte 0 also tells joiners and sweepers
 * that the segment's creator lives. */
int ls_lock_byte(int fd, int r)
{
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = r, .l_len = 1};
    if (fcntl(fd, F_OFD_SETLK, &fl) == 0)
        return 0;
    return errno == EAGAIN || errno == EACCES ? -EAGAIN : -errno;
}

/* Is byte r of the segment's file locked by another open file description (a rank's
 * liveness lock)? 1 also when that cannot be told. */
int ls_byte_locked(int fd, int r)
{
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = r, .l_len = 1};
    if (fd < 0 || fcntl(fd, F_OFD_GETLK, &fl) != 0)
        return 1;
    return fl.l_type != F_UNLCK;
}

int ls_rank_alive(const lockstep_comm_t *c, int r)
{
    const ls_ctl_t *p = ls_ctl(c, r);
    pid_t pid = ls_load_acquire(&p->own.pid);
    if (pid <= 0)
        return 1; /* not claimed yet */
    if (!ls_pid_alive(pid, ls_load_acquire(&p->own.pid_ns), c->pid_ns))
        return 0;
    /* locked before the claim; let go only as the process ends or, saying so first,
     * when the rank frees the communicator */
    return !c->locks || ls_byte_locked(c->fd, r) || ls_load_acquire(&p->own.left);
}

uint64_t ls_comm_deadline(const lockstep_comm_t *c)
{
    return c->timeout_ns ? lockstep_now_ns() + c->timeout_ns : 0;
}

int ls_comm_report_failure(lockstep_comm_t *c, uint32_t f)
{
    if (!c->drained) { /* before this rank reports the failure, once */
        ls_kcopy_drain(c);
        c->drained = 1;
    }
    return -(int)f;
}

/* Record code as the segment's failure unless one is recorded already. Sequentially
 * consistent: a kernel-copy writer checks it after announcing its write (kcopy.c). */
void ls_seg_fail(ls_seg_state_t *st, int code)
{
    uint32_t none = 0;
    __atomic_compare_exchange_n(&st->failed, &none, (uint32_t)code, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
}

int ls_comm_fail(lockstep_comm_t *c, int code)
{
    ls_seg_fail(c->state, code);
    return ls_comm_failed(c); /* the first failure wins on every rank */
}

/* The end of the next wait slice: LS_SLICE_NS from now, or the deadline if sooner. */
uint64_t ls_slice_end(uint64_t deadline)
{
    uint64_t until = lockstep_now_ns() + LS_SLICE_NS;
    return deadline && until > deadline ? deadline : until;
}

/* Between two slices of a wait: has the communicator failed, does the caller want
 * out (params.cancel), is `peer` (or, with peer < 0, every rank) still alive, has the
 * deadline passed? 0 to keep waiting, a failure already recorded (negative), or what
 * this rank noticed (a positive code, not yet recorded). The caller records the latter
 * with ls_comm_fail only if its wait has still not ended: a peer may do its part of a
 * call, return and exit between the end of a slice and the look at its pid, and that
 * is no failure (an eager root that exits after its last broadcast, say). */
int ls_between_slices(lockstep_comm_t *c, int peer, uint64_t deadline)
{
    int rc = ls_comm_failed(c);
    if (rc)
        return rc;
    if (c->cancel && c->cancel(c->cancel_arg))
        return ECANCELED;
    for (int r = peer < 0 ? 0 : peer; r < (peer < 0 ? c->size : peer + 1); r++)
        if (r != c->rank && !ls_rank_alive(c, r))
            return LOCKSTEP_EPEERDIED;
    /* in any other call numbered s, a peer that made call s an eager broadcast */
    if (c->hdr->eager_bytes && !c->in_eager && c->seq)
        for (int r = 0; r < c->size; r++)
            if (r != c->rank && ls_load_acquire(&ls_ctl(c, r)->own.eager_seq) == c->seq)
                return LOCKSTEP_EMISMATCH;
    if (deadline && lockstep_now_ns() >= deadline)
        return ETIMEDOUT;
    return 0;
}

/* Wait for ww to reach target, in slices, with the checks above between them. Inlined
 * into both entry points, so that the plain one (every wait of every call) carries no
 * check and no extra call. */
static inline __attribute__((always_inline)) int
wait_word(lockstep_comm_t *c, int peer, lockstep_waitword_t *ww, uint32_t target, uint64_t deadline,
          int (*check)(lockstep_comm_t *c, int peer))
{
    if (ls_reached(ls_load_acquire(&ww->value), target))
        return 0; /* already there: no clock read */
    for (;;) {
        if (lockstep_wait_until(&c->wait, ww, target, ls_slice_end(deadline)) == 0)
            return 0;
        int rc = ls_between_slices(c, peer, deadline);
        if (rc == 0 && check && !ls_reached(ls_load_acquire(&ww->value), target))
            rc = check(c, peer); /* records what it finds */
        if (rc > 0) /* noticed here: counts only if the wait has still not ended */
            rc = ls_reached(ls_load_acquire(&ww->value), target) ? 0 : ls_comm_fail(c, rc);
        if (rc)
            return rc;
    }
}

int ls_comm_wait_word_checked(lockstep_comm_t *c, int peer, lockstep_waitword_t *ww, uint32_t target,
                              uint64_t deadline, int (*check)(lockstep_comm_t *c, int peer))
{
    return wait_word(c, peer, ww, target, deadline, check);
}

int ls_comm_wait_word_slow(lockstep_comm_t *c, int peer, lockstep_waitword_t *ww, uint32_t target,
                           uint64_t deadline)
{
    return wait_word(c, peer, ww, target, deadline, NULL);
}

