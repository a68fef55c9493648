/* Creating and freeing a communicator: the segment's name, its layout, and the
 * rendezvous through POSIX shared memory.
 *
 * Rendezvous:
 *   1. rank 0 creates /lockstep-<job> exclusively (replacing a stale one whose creator
 *      is dead), sizes it, lays it out, and publishes hdr.magic last;
 *   2. the others open it (retrying until it exists, is sized and has magic) and check
 *      that its layout matches their params;
 *   3. everybody records its pid, adds itself to state.joined and waits until all
 *      `size` ranks have joined;
 *   4. everybody unlinks the name (all but the first get ENOENT). From here on the
 *      segment lives only in our mappings, so a crash of any rank leaks nothing.
 * On any failure before 4 the rank unlinks the name too. If rank 0 is killed between
 * 1 and 4, the next rank 0 of any job on the machine sweeps the name away: a segment
 * whose creator is dead can never complete its rendezvous. Liveness goes by pid
 * within one PID namespace and, in any, by each rank's lock on its byte of the file
 * (liveness.c): a creator or peer in another namespace (a container that
 * shares /dev/shm) is taken for dead only once its lock is gone. */
#define _GNU_SOURCE
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "comm_impl.h"

/* Asymmetric fences between the ranks (see wait.c): a call's publishing store is then
 * a plain store instead of an XCHG, which stalls the rank until every store before it,
 * the payload's included, owns its line. Each rank registers
 * for membarrier's global command at create and says so in own.fences; the waits
 * switch only if every rank did. LOCKSTEP_NO_MEMBARRIER=1 keeps a rank out of it (and
 * so every rank of its communicators). */
static int global_fences_wanted(void)
{
    return !ls_env_set("LOCKSTEP_NO_MEMBARRIER");
}

static size_t align_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

static void shm_name(char *out, size_t cap, const char *job)
{
    snprintf(out, cap, "/lockstep-%s", job);
    for (char *p = out + 1; *p; p++)
        if (*p == '/')
            *p = '_';
}

static void sleep_ms(unsigned ms)
{
    struct timespec ts = {0, (long)ms * 1000000L};
    nanosleep(&ts, NULL);
}

/* Is the lockstep segment behind fd abandoned: its header readable and its creator dead?
 * Such a rendezvous can never complete, and a completed one is unlinked already, so
 * its name is garbage. */
static int abandoned(int fd, uint32_t here)
{
    struct stat st;
    int dead = 0;
    if (fstat(fd, &st) == 0 && (size_t)st.st_size >= sizeof(ls_seg_hdr_t)) {
        ls_seg_hdr_t *h = mmap(NULL, sizeof *h, PROT_READ, MAP_SHARED, fd, 0);
        if (h != MAP_FAILED) {
            /* the lock tells only in a segment of this protocol (older ones took none) */
            dead = h->creator_pid > 0 &&
                   (!ls_pid_alive(h->creator_pid, h->creator_ns, here) ||
                    (ls_load_acquire(&h->magic) == LS_COMM_MAGIC && !ls_byte_locked(fd, 0)));
            munmap(h, sizeof *h);
        }
    }
    return dead;
}

/* Unlink every /dev/shm/lockstep-* left by a rank 0 that died during a rendezvous
 * (after creating the name, before every rank had mapped it). */
static void sweep_abandoned(uint32_t here)
{
    DIR *d = opendir("/dev/shm");
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, "lockstep-", 9) != 0 || strlen(e->d_name) > 250)
            continue;
        char name[sizeof e->d_name + 1];
        name[0] = '/';
        memcpy(name + 1, e->d_name, strlen(e->d_name) + 1);
        int fd = shm_open(name, O_RDONLY, 0);
        if (fd < 0)
            continue;
        if (abandoned(fd, here))
            shm_unlink(name);
        close(fd);
    }
    closedir(d);
}

/* Rank 0: create the segment exclusively, replacing a stale one. Returns the fd or -errno. */
static int create_segment(const char *name, size_t total, uint32_t here)
{
    for (int tries = 0; tries < 3; tries++) {
        int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
        if (fd >= 0) {
            /* allocate every page now: a full /dev/shm is then ENOSPC here, not a
             * SIGBUS at some rank's first write to a slot or buffer */
            int e = ftruncate(fd, (off_t)total) != 0 ? errno : posix_fallocate(fd, 0, (off_t)total);
            if (e) {
                close(fd);
                shm_unlink(name);
                return -e;
            }
            return fd;
        }
        if (errno != EEXIST)
            return -errno;
        /* someone's segment: stale if its creator is dead */
        int old = shm_open(name, O_RDONLY, 0);
        if (old < 0)
            continue;
        int stale = abandoned(old, here);
        close(old);
        if (!stale)
            return -EEXIST;
        shm_unlink(name);
    }
    return -EEXIST;
}

static void refuse_layout(int fd)
{
    char *m = mmap(NULL, 2 * LS_LINE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED)
        return; /* the others then time out, as they would without this */
    ls_seg_fail((ls_seg_state_t *)(void *)(m + LS_LINE), LOCKSTEP_EMISMATCH);
    munmap(m, 2 * LS_LINE);
}

/* The segment's layout and the size switches, as rank 0 writes them into the header
 * (the joiners compute the same to check it); returns the barrier's size. */
static size_t plan(const lockstep_comm_params_t *p, lockstep_comm_t *c, unsigned sharers, ls_seg_hdr_t *want)
{
    memset(want, 0, sizeof *want);
    want->size = (uint32_t)p->size;
    want->small_bytes = p->small_bytes;
    unsigned cpus = (unsigned)lockstep_cpus_available();
    c->per_cpu = (sharers + cpus - 1) / cpus; /* sharers >= 1, cpus >= 1 */
    int oversubscribed = !ls_fits(c);
    size_t fits = LS_SMALL_FITS / (size_t)(p->size > 1 ? p->size - 1 : 1) / 256 * 256;
    size_t ar_small = p->allreduce_small_bytes ? p->allreduce_small_bytes
                      : oversubscribed         ? LS_SMALL_OVERSUBSCRIBED
                      : fits > LS_SMALL_FITS_MIN ? fits
                                                   : LS_SMALL_FITS_MIN;
    want->allreduce_small = ar_small < p->small_bytes ? ar_small : p->small_bytes;
    /* the block exchanges switch earlier: their small path copies every block twice */
    size_t x_small = p->allreduce_small_bytes ? p->allreduce_small_bytes
                     : oversubscribed         ? LS_SMALL_OVERSUBSCRIBED
                                              : LS_SMALL_FITS_MIN;
    want->exchange_small = x_small < p->small_bytes ? x_small : p->small_bytes;
    want->chunk_bytes = p->chunk_bytes;
    size_t bsize = lockstep_barrier_size(LOCKSTEP_BARRIER_AUTO, (unsigned)p->size, 0);
    want->off_barrier = 2 * LS_LINE;
    want->off_ctl = align_up(want->off_barrier + bsize, LS_LINE);
    want->off_data = align_up(want->off_ctl + (size_t)p->size * sizeof(ls_ctl_t), 4096);
    want->eager_bytes = p->broadcast_eager_bytes;
    want->eager_stride =
        want->eager_bytes ? align_up(offsetof(ls_eager_entry_t, data) + want->eager_bytes, LS_LINE) : 0;
    want->data_stride =
        align_up(2 * p->small_bytes + 2 * p->chunk_bytes + LS_EAGER_DEPTH * want->eager_stride, 4096);
    want->buffer_bytes = align_up(p->buffer_bytes, 4096);
    want->off_buf = want->off_data + (size_t)p->size * want->data_stride;
    want->total = want->off_buf + (size_t)p->size * want->buffer_bytes;
    /* rank 0 decides the step for everyone: ranks may see different CPU counts */
    want->relay_bytes = (uint32_t)ls_threshold("LOCKSTEP_COMM_RELAY_BYTES", p->relay_bytes, (size_t)1 << 31, NULL);
    if (!want->relay_bytes)
        want->relay_bytes = LS_RELAY_MIN;
    want->step_bytes = (uint32_t)p->chunk_bytes; /* at most 2**30 (params_check) */
    if (oversubscribed && want->step_bytes > LS_OVERSUBSCRIBED_STEP)
        want->step_bytes = LS_OVERSUBSCRIBED_STEP;
    return bsize;
}

/* A joiner: wait until rank 0's segment is there, finished, from a live creator, with
 * the layout this rank computed (want); its fd, or a negative errno (EPROTO: another
 * build's; LOCKSTEP_EMISMATCH: another layout, recorded for the ranks waiting). */
static int open_joined(const char *name, const ls_seg_hdr_t *want, const lockstep_comm_params_t *p,
                       uint64_t deadline)
{
    for (;;) {
        int fd = shm_open(name, O_RDWR, 0600);
        if (fd >= 0) {
            struct stat st;
            int ready = 0, differs = 0, other_build = 0;
            if (fstat(fd, &st) == 0 && (size_t)st.st_size >= sizeof(ls_seg_hdr_t)) {
                ls_seg_hdr_t *h = mmap(NULL, sizeof *h, PROT_READ, MAP_SHARED, fd, 0);
                if (h != MAP_FAILED) {
                    /* only a finished header from a live creator counts; one of another
                     * build's protocol is refused, and left alone */
                    uint32_t magic = ls_load_acquire(&h->magic);
                    other_build = ls_is_segment(magic) && magic != LS_COMM_MAGIC;
                    if (magic == LS_COMM_MAGIC && ls_pid_alive(h->creator_pid, h->creator_ns, ls_pid_ns()) &&
                        ls_byte_locked(fd, 0)) {
                        differs = h->size != want->size || h->small_bytes != want->small_bytes ||
                                  (p->allreduce_small_bytes && h->allreduce_small != want->allreduce_small) ||
                                  h->chunk_bytes != want->chunk_bytes || h->buffer_bytes != want->buffer_bytes ||
                                  h->eager_bytes != want->eager_bytes || h->total != want->total;
                        ready = !differs && (size_t)st.st_size >= want->total;
                    }
                    munmap(h, sizeof *h);
                }
            }
            if (ready)
                return fd;
            if (differs) /* rank 0 was created with a different size or slots */
                refuse_layout(fd);
            close(fd);
            if (other_build)
                return -EPROTO;
            if (differs)
                return -LOCKSTEP_EMISMATCH;
        } else if (errno != ENOENT) {
            return -errno;
        }
        if (deadline && lockstep_now_ns() >= deadline)
            return -ETIMEDOUT;
        if (p->cancel && p->cancel(p->cancel_arg))
            return -ECANCELED;
        sleep_ms(1);
    }
}

/* After the rendezvous, before any other wait: what every rank decides alike from what
 * all wrote before joining (nothing is published or parked on with c->wait until
 * then), and this rank's routes */
static void settle(lockstep_comm_t *c, const lockstep_comm_params_t *p, uint64_t deadline)
{
    int all_fences = 1;
    for (int r = 0; r < c->size; r++)
        all_fences &= ls_load_relaxed(&ls_ctl(c, r)->own.fences) == 1;
    if (all_fences)
        c->wait.flags |= LOCKSTEP_WAIT_F_ASYM;
    c->busy = -1;
    int env = ls_kernel_copy_env(NULL), mode = env >= 0 ? env : (int)p->kernel_copy;
    c->kcopy_wide = mode == LOCKSTEP_KERNEL_COPY_WIDE;
    c->distance = (int)p->distance;
    long long zc = ls_threshold("LOCKSTEP_COMM_ZERO_COPY_MIN_BYTES", p->zero_copy_min_bytes, (size_t)1 << 30, NULL);
    long long pf = ls_threshold("LOCKSTEP_COMM_PREFETCH_MAX_BYTES", p->prefetch_max_bytes, (size_t)1 << 30, NULL);
    c->zc_min = zc > 0 ? (size_t)zc : LS_ZERO_COPY_MIN; /* checked by params_check */
    c->prefetch_max = pf > 0 ? (size_t)pf : LS_PREFETCH_MAX;
    ls_kcopy_init(c, mode != LOCKSTEP_KERNEL_COPY_OFF);
    ls_comm_topology(c);
    uint64_t probe_until = lockstep_now_ns() + LS_PROBE_CREATE_NS; /* the partner may be waking */
    ls_distance_probe(c, ls_distance_partner(c, offsetof(ls_ctl_t, own.cpu)),
                      deadline && deadline < probe_until ? deadline : probe_until);
}

lockstep_comm_t *lockstep_comm_create(const lockstep_comm_params_t *p)
{
    int err = EINVAL;
    if (lockstep_comm_params_check(p, NULL, 0) || ls_reduce_ready() != 0) {
        errno = EINVAL;
        return NULL;
    }
    lockstep_comm_t *c = ls_fork_watch() == 0 ? calloc(1, sizeof *c) : NULL;
    if (!c) {
        errno = ENOMEM;
        return NULL;
    }
    c->fork_gen = ls_fork_gen();
    c->fd = -1;
    c->pid_ns = ls_pid_ns();
    c->rank = p->rank;
    c->size = p->size;
    c->timeout_ns = (uint64_t)p->timeout_ms * 1000000ull;
    c->pool = p->pool;
    c->cancel = p->cancel;
    c->cancel_arg = p->cancel_arg;
    c->rng = 0x9e3779b97f4a7c15ull ^ ((uint64_t)(p->rank + 1) * 0xbf58476d1ce4e5b9ull);
    unsigned sharers = (unsigned)(p->cpu_sharers ? p->cpu_sharers : p->size);
    int rc = lockstep_wait_init(&c->wait, p->wait_policy, sharers, 1);
    if (rc) {
        free(c);
        errno = -rc;
        return NULL;
    }

    ls_seg_hdr_t want;
    size_t bsize = plan(p, c, sharers, &want);
    char name[LOCKSTEP_COMM_JOB_MAX + 16];
    shm_name(name, sizeof name, p->job);
    uint64_t deadline = c->timeout_ns ? lockstep_now_ns() + c->timeout_ns : 0;
    int fd = -1;
    if (p->rank == 0) {
        sweep_abandoned(c->pid_ns);
        fd = create_segment(name, want.total, c->pid_ns);
        if (fd < 0) {
            err = -fd;
            goto fail;
        }
    } else if ((fd = open_joined(name, &want, p, deadline)) < 0) {
        err = -fd;
        goto fail;
    }
    /* my liveness lock, before anything that shows my rank: before my claim below, and
     * for rank 0 before the magic that shows the segment (see ls_lock_byte) */
    int lk = ls_lock_byte(fd, p->rank);
    c->fd = fd;
    c->locks = lk == 0;
    if (lk == -EAGAIN) { /* a live process holds my rank (see the claim below) */
        err = EBUSY;
        if (p->rank == 0)
            goto fail_unlink;
        goto fail;
    }
    c->total = want.total;
    c->base = mmap(NULL, want.total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (c->base == MAP_FAILED) {
        c->base = NULL;
        err = errno;
        goto fail_unlink;
    }
    c->hdr = (ls_seg_hdr_t *)(void *)c->base;
    c->state = (ls_seg_state_t *)(void *)(c->base + LS_LINE);
    c->barrier = (lockstep_barrier_t *)(void *)(c->base + want.off_barrier);
    if (p->rank == 0) {
        memcpy(c->hdr, &want, sizeof want);
        c->hdr->creator_pid = (int32_t)getpid();
        c->hdr->creator_ns = c->pid_ns;
        lockstep_barrier_params_t bp = lockstep_barrier_params_default();
        bp.kind = LOCKSTEP_BARRIER_AUTO; /* by ranks against CPUs; no gather needed */
        bp.process_shared = 1;
        bp.wait_policy = p->wait_policy;
        rc = lockstep_barrier_init(c->barrier, bsize, (unsigned)p->size, &bp);
        if (rc) {
            err = -rc;
            goto fail_unlink;
        }
        ls_store_release(&c->hdr->magic, LS_COMM_MAGIC); /* step 1 done */
    }

    ls_ctl_t *me = ls_ctl(c, c->rank);
    /* Claim my rank before writing anything of it: a second process given the same
     * rank (a mistyped rank, or a job started twice under one name, whose rank 0 got
     * EEXIST) would otherwise overwrite the first one's line and count as a rank of
     * its own, and both would run the job's calls on the same slots. It leaves the
     * name alone, which the job still needs. */
    int32_t none = 0;
    if (!__atomic_compare_exchange_n(&me->own.pid, &none, (int32_t)getpid(), 0, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE)) {
        err = EBUSY;
        goto fail;
    }
    ls_store_release(&me->own.pid_ns, c->pid_ns); /* until then: not judged */
    me->own.fences = global_fences_wanted() && ls_wait_global_fences();
    me->own.cpu = sched_getcpu();
    me->own.base = (uint64_t)(uintptr_t)c->base;
    me->own.where = me->ann[0].where = me->ann[1].where = -1; /* unknown: see wait_peers */
    ls_fetch_add(&c->state->joined.value, 1u, __ATOMIC_SEQ_CST);
    lockstep_wait_wake(&c->wait, &c->state->joined);
    rc = ls_comm_wait_word(c, -1, &c->state->joined, (uint32_t)c->size, deadline);
    if (rc) {
        err = -rc;
        goto fail_unlink;
    }
    shm_unlink(name); /* step 4: the name is gone, the mappings stay */
    settle(c, p, deadline);
    return c;

fail_unlink:
    shm_unlink(name);
fail:
    if (c->base)
        munmap(c->base, c->total);
    if (c->fd >= 0)
        close(c->fd);
    free(c);
    errno = err;
    return NULL;
}

void lockstep_comm_free(lockstep_comm_t *c)
{
    if (!c)
        return;
    if (c->fork_gen == ls_fork_gen()) /* not a forked child's copy: the rank is mine */
        ls_store_release(&ls_ctl(c, c->rank)->own.left, 1u);
    munmap(c->base, c->total);
    if (c->fd >= 0)
        close(c->fd); /* my liveness lock goes (unless a forked child still holds the file) */
    free(c);
}

