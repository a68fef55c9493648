/* Communicator lifecycle (rendezvous through POSIX shared memory), liveness and
 * deadline checks, and the announce/verify step every collective begins with.
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
 * within one PID namespace (pid_alive) and, in any, by each rank's lock on its byte
 * of the file (lock_byte): a creator or peer in another namespace (a container that
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

#define OVERSUBSCRIBED_STEP ((size_t)512 * 1024)
/* allreduce_small_bytes = 0: the switch rank 0 picks (measured: see params_default) */
#define AUTO_SMALL_FITS ((size_t)32 * 1024) /* at 2 ranks; divided by size - 1 */
#define AUTO_SMALL_FITS_MIN ((size_t)512)
#define AUTO_SMALL_OVERSUBSCRIBED ((size_t)8 * 1024)
#define SLICE_NS (10ull * 1000 * 1000) /* liveness is checked this often while waiting */


/* Asymmetric fences between the ranks (see wait.c): a call's publishing store is then
 * a plain store instead of an XCHG, which stalls the rank until every store before it,
 * the payload's included, owns its line. 2 ranks, both libraries alternating in the
 * same processes (median of 15 paired batches, two orders): 4 B 0.75-0.87x the time,
 * 64 B 0.62-0.77x, 128 B 0.77-0.86x; with the copies of my own lines below (own
 * descriptor, offsets, input), 256 B 0.71-0.76x, 512 B 0.78-0.79x. Each rank registers
 * for membarrier's global command at create and says so in own.fences; the waits
 * switch only if every rank did. LOCKSTEP_NO_MEMBARRIER=1 keeps a rank out of it (and
 * so every rank of its communicators). */
static int global_fences_wanted(void)
{
    return !ls_env_set("LOCKSTEP_NO_MEMBARRIER");
}

lockstep_comm_params_t lockstep_comm_params_default(void)
{
    lockstep_comm_params_t p;
    memset(&p, 0, sizeof p);
    p.rank = 0;
    p.size = 1;
    p.timeout_ms = 60000;
    p.wait_policy = LOCKSTEP_WAIT_DEFAULT;
    /* The small/large switches, measured with both paths interleaved in the same
     * processes (4, 6, 8, 12, 16, 24, 32, 48, 64 KiB, then x2 to 1 MiB; 2 and 4 ranks;
     * median of 15 batches). Allreduce: the chunked reduce-scatter path ties the small
     * one at 8 KiB and wins above it (2 ranks, 12 KiB: 5.4 against 5.9 us; 4 ranks: 13.5
     * against 14.4). On a later machine (AMD EPYC, 2 vCPUs; 512 B-16 KiB x2, 4 runs)
     * the chunked path tied at 512 B and won from 1 KiB at 2 ranks (1 KiB: 0.33-0.37 us
     * against 0.36-0.39; 2 KiB: 0.43-0.46 against 0.54-0.58; 4 KiB: 0.63-0.90 against
     * 0.87-0.96) while at 4 ranks on its 2 CPUs the small path still won up to 8 KiB
     * (4 KiB: 3.5-8.4 against 4.8-8.9) and lost at 16. Once a call stopped reading
     * back its own announcement and the ranks' waits used asymmetric fences (see
     * global_fences_wanted), the small path won again at 2 ranks, on an Intel Xeon
     * with 2 vCPUs (1, 4, 16, 32, 48, 64 KiB, median of 11 paired batches, two
     * orders): 1 KiB 0.55-0.56x the chunked path's time, 4 KiB 0.76-0.78x, 16-32 KiB
     * 0.82-0.84x, 48 KiB 0.73-0.75x, 64 KiB a tie. The small path reads (size - 1)
     * whole messages from peers where the chunked one reads about two, so with more
     * ranks than 2 on as many CPUs (not measured here: this machine has 2) the switch
     * is divided by size - 1, so that they read no more from peers than 2 ranks did at
     * 32 KiB; 512 B at the least. So the default, 0, lets rank 0 choose: 32 KiB /
     * (size - 1) while ranks fit the CPUs, 8 KiB when they outnumber them
     * (AUTO_SMALL_* above).
     * A broadcast or allgather gains nothing from the large path's chunks until they
     * pipeline, and pays one synchronisation more: the small path is 1.1-2.3x
     * faster up to 128 KiB and ties or wins at 256 KiB, with unchanged or fresh data; at
     * 512 KiB the large path ties or wins. */
    p.small_bytes = 256 * 1024;
    p.allreduce_small_bytes = 0; /* rank 0 chooses: see above */
    p.chunk_bytes = 1024 * 1024;
    return p;
}

size_t lockstep_dtype_size(lockstep_dtype_t dtype)
{
    switch (dtype) {
    case LOCKSTEP_F32: case LOCKSTEP_I32: return 4;
    case LOCKSTEP_F16: case LOCKSTEP_BF16: return 2;
    default: return 0;
    }
}

int lockstep_comm_rank(const lockstep_comm_t *c) { return c ? c->rank : -EINVAL; }
int lockstep_comm_size(const lockstep_comm_t *c) { return c ? c->size : -EINVAL; }

const char *lockstep_comm_kernel_copy(const lockstep_comm_t *c)
{
    if (!c) {
        errno = EINVAL;
        return NULL;
    }
    return !c->cma ? "off" : c->hdr->kernel_copy == LS_KCOPY_SLOW ? "slow" : "fast";
}

/* ---- environment ------------------------------------------------------------------ */

static char env_error[64];

const char *lockstep_comm_env_error(void) { return env_error; }

/* A non-negative decimal integer from the environment: 1 found, 0 absent, -EINVAL bad. */
static int env_int(const char *name, int *out)
{
    const char *s = getenv(name);
    if (!s)
        return 0;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (!*s || *end || errno || v < 0 || v > 1 << 20) {
        snprintf(env_error, sizeof env_error, "%s", name);
        return -EINVAL;
    }
    *out = (int)v;
    return 1;
}

static void job_append(char *job, const char *part)
{
    size_t n = strlen(job);
    for (const char *p = part; *p && n < LOCKSTEP_COMM_JOB_MAX; p++)
        job[n++] = (isalnum((unsigned char)*p) || *p == '.' || *p == '-' || *p == '_') ? *p : '_';
    job[n] = 0;
}

int lockstep_comm_params_from_env(lockstep_comm_params_t *p)
{
    if (!p)
        return -EINVAL;
    env_error[0] = 0;
    static const struct { const char *rank, *size, *alt_rank, *alt_size; } sets[] = {
        {"LOCAL_RANK", "LOCAL_WORLD_SIZE", "RANK", "WORLD_SIZE"},
        {"OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE", NULL, NULL},
        {"LOCKSTEP_RANK", "LOCKSTEP_SIZE", NULL, NULL},
    };
    for (unsigned i = 0; i < sizeof sets / sizeof sets[0]; i++) {
        int rank = 0, size = 0;
        const char *rn = sets[i].rank, *sn = sets[i].size; /* the pair in use */
        int hr = env_int(rn, &rank), hs = env_int(sn, &size);
        if (hr < 0 || hs < 0)
            return -EINVAL;
        if (hr == 0 && sets[i].alt_rank) { /* torchrun without LOCAL_*: one node assumed */
            rn = sets[i].alt_rank;
            sn = sets[i].alt_size;
            hr = env_int(rn, &rank);
            hs = env_int(sn, &size);
            if (hr < 0 || hs < 0)
                return -EINVAL;
        }
        if (hr == 0 && hs == 0)
            continue;
        /* blame what is missing, else an impossible size, else a rank past the size */
        const char *bad = NULL;
        if (hr == 0)
            bad = rn;
        else if (hs == 0 || size < 1 || size > LOCKSTEP_COMM_MAX_RANKS)
            bad = sn;
        else if (rank >= size)
            bad = rn;
        if (bad) {
            snprintf(env_error, sizeof env_error, "%s", bad);
            return -EINVAL;
        }
        p->rank = rank;
        p->size = size;
        p->job[0] = 0;
        if (i == 0) {
            const char *addr = getenv("MASTER_ADDR"), *port = getenv("MASTER_PORT");
            const char *run = getenv("TORCHELASTIC_RUN_ID");
            job_append(p->job, "torch-");
            job_append(p->job, addr ? addr : "local");
            job_append(p->job, "-");
            job_append(p->job, port ? port : "0");
            if (run) {
                job_append(p->job, "-");
                job_append(p->job, run);
            }
            /* torchrun's node: nodes emulated on one machine (--nnodes 2 twice on one host)
             * share MASTER_* and the run id, and would otherwise meet in one segment,
             * where a rank of one node could take another's place */
            const char *node = getenv("GROUP_RANK");
            if (node && *node && strcmp(node, "0") != 0) {
                job_append(p->job, "-node");
                job_append(p->job, node);
            }
        } else if (i == 1) {
            const char *id = getenv("OMPI_MCA_orte_ess_jobid");
            if (!id)
                id = getenv("PMIX_NAMESPACE");
            job_append(p->job, "ompi-");
            job_append(p->job, id ? id : "job");
        } else {
            const char *job = getenv("LOCKSTEP_JOB");
            job_append(p->job, job && *job ? job : "default");
        }
        return 0;
    }
    snprintf(env_error, sizeof env_error, "LOCAL_RANK");
    return -ENOENT;
}

/* ---- liveness, deadlines, failure --------------------------------------------------- */

/* The PID namespace this process's pids are in (the inode of /proc/self/ns/pid), or 0
 * if unknown. Ranks in other containers may share /dev/shm but not pids. Asked once
 * per create (a communicator keeps it): a process never changes its own namespace. */
static uint32_t pid_ns(void)
{
    struct stat st;
    return stat("/proc/self/ns/pid", &st) == 0 ? (uint32_t)st.st_ino : 0;
}

/* 0 once process pid of PID namespace ns has exited, as seen from namespace here: gone,
 * or a zombie nobody has reaped yet (our own child, for instance). 1 while it runs or
 * when that cannot be told: a pid of another namespace (or one not known yet) names no
 * process of ours, and only its lock can tell (ls_rank_alive). */
static int pid_alive(pid_t pid, uint32_t ns, uint32_t here)
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
static int lock_byte(int fd, int r)
{
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = r, .l_len = 1};
    if (fcntl(fd, F_OFD_SETLK, &fl) == 0)
        return 0;
    return errno == EAGAIN || errno == EACCES ? -EAGAIN : -errno;
}

/* Is byte r of the segment's file locked by another open file description (a rank's
 * liveness lock)? 1 also when that cannot be told. */
static int byte_locked(int fd, int r)
{
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = r, .l_len = 1};
    if (fd < 0 || fcntl(fd, F_OFD_GETLK, &fl) != 0)
        return 1;
    return fl.l_type != F_UNLCK;
}

int ls_rank_alive(const lockstep_comm_t *c, int r)
{
    const ls_ctl_t *p = ls_ctl(c, r);
    pid_t pid = __atomic_load_n(&p->own.pid, __ATOMIC_ACQUIRE);
    if (pid <= 0)
        return 1; /* not claimed yet */
    if (!pid_alive(pid, __atomic_load_n(&p->own.pid_ns, __ATOMIC_ACQUIRE), c->pid_ns))
        return 0;
    /* locked before the claim; let go only as the process ends or, saying so first,
     * when the rank frees the communicator */
    return !c->locks || byte_locked(c->fd, r) || __atomic_load_n(&p->own.left, __ATOMIC_ACQUIRE);
}

uint64_t ls_comm_deadline(const lockstep_comm_t *c)
{
    return c->timeout_ns ? lockstep_now_ns() + c->timeout_ns : 0;
}

int ls_comm_failed(lockstep_comm_t *c)
{
    uint32_t f = __atomic_load_n(&c->state->failed, __ATOMIC_ACQUIRE);
    if (!f)
        return 0;
    if (!c->drained) { /* before this rank reports the failure, once */
        ls_cma_drain(c);
        c->drained = 1;
    }
    return -(int)f;
}

/* Record code as the segment's failure unless one is recorded already. Sequentially
 * consistent: a single-copy writer checks it after announcing its write (cma.c). */
static void seg_fail(ls_seg_state_t *st, int code)
{
    uint32_t none = 0;
    __atomic_compare_exchange_n(&st->failed, &none, (uint32_t)code, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
}

int ls_comm_fail(lockstep_comm_t *c, int code)
{
    seg_fail(c->state, code);
    return ls_comm_failed(c); /* the first failure wins on every rank */
}

/* The end of the next wait slice: SLICE_NS from now, or the deadline if sooner. */
static uint64_t slice_end(uint64_t deadline)
{
    uint64_t until = lockstep_now_ns() + SLICE_NS;
    return deadline && until > deadline ? deadline : until;
}

/* Between two slices of a wait: has the communicator failed, does the caller want
 * out (params.cancel), is `peer` (or, with peer < 0, every rank) still alive, has the
 * deadline passed? 0 to keep waiting, a failure already recorded (negative), or what
 * this rank noticed (a positive code, not yet recorded). The caller records the latter
 * with ls_comm_fail only if its wait has still not ended: a peer may do its part of a
 * call, return and exit between the end of a slice and the look at its pid, and that
 * is no failure (an eager root that exits after its last broadcast, say). */
static int between_slices(lockstep_comm_t *c, int peer, uint64_t deadline)
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
            if (r != c->rank && __atomic_load_n(&ls_ctl(c, r)->own.eager_seq, __ATOMIC_ACQUIRE) == c->seq)
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
        return 0; /* already there: no clock read (about 40 ns each on this VM) */
    for (;;) {
        if (lockstep_wait_until(&c->wait, ww, target, slice_end(deadline)) == 0)
            return 0;
        int rc = between_slices(c, peer, deadline);
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

int ls_comm_wait_word(lockstep_comm_t *c, int peer, lockstep_waitword_t *ww, uint32_t target,
                      uint64_t deadline)
{
    return wait_word(c, peer, ww, target, deadline, NULL);
}

/* ---- announce / verify / step ---------------------------------------------------------- */

/* Waiting for peers when ranks outnumber CPUs. The wait policy then yields at once,
 * which is right while a peer that has not arrived needs this CPU. But when every
 * missing peer last ran on another CPU, it is most likely running there now, and a
 * yield would hand this CPU to a sibling that is only waiting too: a process switch
 * (about 1.3 us on this VM) before the arrival is seen, and often one more back.
 * So in that case spin first, for at most REMOTE_SPIN_NS, then wait as usual. Where a
 * rank runs is a hint it publishes next to the word peers wait on (ann.where for
 * announcements, own.where for steps); -1, unknown, counts as this CPU. 4 ranks on 2
 * CPUs, 4-byte allreduce: 0.5 process switches per rank per call (getrusage) instead
 * of 0.65-0.8, which is the least possible, since two ranks share each CPU and each
 * must run once per call. `lockstep bench comm`, 4-256 B, against OpenMPI in the same
 * run: 0.36-0.56x instead of 0.43-0.58x. That is one switch per CPU per call (perf
 * stat: 2.01 over both CPUs), and a sched_yield switch between two processes costs
 * 0.56 us here, about half of the 4-byte call's 1.05-1.1 us. Tried without gain: the
 * announcement's sleeper count on a line of its own (perf put 10 % of the samples on
 * the publisher's read of it, but that was the store before it, to a line the other
 * CPU keeps reading). */
#define REMOTE_SPIN_NS 5000u

static int track_cpu(const lockstep_comm_t *c)
{
    return c->wait.policy == LOCKSTEP_WAIT_AUTO && c->wait.spin == 0;
}

/* Where rank r's wait word and its CPU hint are: byte offsets into its ls_ctl_t */
struct ls_peer_words {
    size_t word, where;
};

static lockstep_waitword_t *peer_word(lockstep_comm_t *c, int r, struct ls_peer_words pw)
{
    return (lockstep_waitword_t *)(void *)((char *)ls_ctl(c, r) + pw.word);
}

static int all_missing_elsewhere(lockstep_comm_t *c, struct ls_peer_words pw, uint32_t t, int cpu)
{
    for (int r = 0; r < c->size; r++) {
        if (r == c->rank || ls_reached(ls_load_acquire(&peer_word(c, r, pw)->value), t))
            continue;
        int where = __atomic_load_n((int32_t *)(void *)((char *)ls_ctl(c, r) + pw.where), __ATOMIC_RELAXED);
        if (where < 0 || where == cpu)
            return 0;
    }
    return 1;
}

/* Wait until every other rank's word has reached t. *deadline is read from the clock
 * only once some peer is missing (LS_NO_DEADLINE_YET until then). */
#define LS_NO_DEADLINE_YET UINT64_MAX

static int wait_peers(lockstep_comm_t *c, struct ls_peer_words pw, uint32_t t, int cpu, uint64_t *deadline)
{
    for (int r = 0; r < c->size; r++) {
        if (r == c->rank)
            continue;
        lockstep_waitword_t *w = peer_word(c, r, pw);
        if (ls_reached(ls_load_acquire(&w->value), t))
            continue;
        if (*deadline == LS_NO_DEADLINE_YET)
            *deadline = ls_comm_deadline(c);
        if (cpu >= 0 && all_missing_elsewhere(c, pw, t, cpu)) {
            uint64_t until = lockstep_now_ns() + REMOTE_SPIN_NS;
            for (unsigned i = 1; !ls_reached(ls_load_acquire(&w->value), t); i++) {
                ls_cpu_relax();
                if (!(i & 63) && lockstep_now_ns() >= until)
                    break;
            }
        }
        int rc = ls_comm_wait_word(c, r, w, t, *deadline);
        if (rc)
            return rc;
    }
    return 0;
}

/* After a call this rank timed (ls_pick_start): record its cost per byte, in
 * picoseconds, for its class. A choice shared through the state line (the allreduce's)
 * is stored there for the next call; the others read it there to know whether to copy
 * chunk 0 before announcing, and one that reads it before it changes does that, or not,
 * in vain: the call still goes the way the picking rank offered. */
void ls_pick_done(lockstep_comm_t *c)
{
    int cls = c->timing;
    uint64_t cost = c->timing_way < 0 ? LS_PICK_NONE
                                      : (lockstep_now_ns() - c->timing_from) * 1000 / c->timing_bytes;
    uint8_t next = (uint8_t)ls_pick_record(&c->pick[cls], c->timing_way != 0, cost);
    if (cls < LS_PICK_CLASSES && __atomic_load_n(&c->state->pick[cls], __ATOMIC_RELAXED) != next)
        __atomic_store_n(&c->state->pick[cls], next, __ATOMIC_RELAXED);
}

int ls_comm_announce(lockstep_comm_t *c, enum ls_call call, lockstep_op_t op, lockstep_dtype_t dt,
                     int root, uint64_t count, int wait_all)
{
    int rc = ls_comm_failed(c);
    if (rc)
        return rc;
    uint32_t s = ++c->seq;
    c->busy = -1; /* once every rank has announced s, none is still in call s - 1 */
    ls_announce_t *a = &ls_ctl(c, c->rank)->ann[s & 1];
    ls_desc_t d = {.call = (uint8_t)call, .op = (uint8_t)op, .dtype = (uint8_t)dt, .tag = c->tag, .root = root,
                   .count = count};
    c->desc = d;
    a->desc = d;
    int cpu = track_cpu(c) ? sched_getcpu() : -1;
    __atomic_store_n(&a->where, cpu, __ATOMIC_RELAXED);
    if (cpu >= 0 && wait_all)
        ls_comm_spread_post(c);
    /* release: the descriptor and any payload (ann.data, small[s & 1]) before seq */
    lockstep_wait_publish(&c->wait, &a->seq, s);
    if (!wait_all)
        return 0;
    /* a missing peer's where is from its last call */
    size_t now = offsetof(ls_ctl_t, ann) + (s & 1) * sizeof(ls_announce_t);
    size_t last = offsetof(ls_ctl_t, ann) + ((s - 1) & 1) * sizeof(ls_announce_t);
    struct ls_peer_words pw = {now + offsetof(ls_announce_t, seq), last + offsetof(ls_announce_t, where)};
    uint64_t deadline = LS_NO_DEADLINE_YET;
    /* The others' late arrival is not the timed way's cost, while ranks fit the CPUs.
     * With more ranks than CPUs a rank that waited here has often slept, and wakes up
     * well after the last one arrived and began the call; leaving out the wait then
     * leaves out the others' work too, the more so the fewer steps make them wait for
     * this rank. 4 ranks on 2 CPUs, allreduces of 4 MiB back to back, rank 0's costs
     * in ps per byte: less its wait, single copy's were 333-389 in half the calls and
     * 711-891 in the others, against the slots' 415-525, so single copy (lowest cost
     * 333) was preferred for stretches, though it took about twice the slots' time:
     * the benchmark's allreduce_4r took 1300 us at 4 MiB (0.72x MPI_Allreduce, past
     * the 0.5x target; 723 in the run before), and 6 calls back to back took 2251-2704
     * against the slots' 2194-2337 (3 runs). With the wait: single copy's 656-916, the
     * slots' 347-515; 1570-1807 against 1516-1739. It counts in some classes too
     * (ls_pick_counts_wait). */
    uint64_t waited = c->timing >= 0 && ls_fits(c) && !ls_pick_counts_wait(c->timing) ? lockstep_now_ns() : 0;
    if ((rc = wait_peers(c, pw, s, cpu, &deadline)) != 0)
        return rc;
    if (waited)
        c->timing_from += lockstep_now_ns() - waited;
    if ((rc = ls_comm_verify(c)) == 0 && cpu >= 0)
        ls_comm_spread(c, cpu);
    return rc;
}

/* A call some rank refused (ls_comm_refuse) is void on every rank: every rank sees
 * the same announcements, so each returns -LOCKSTEP_EPEERINVAL (the refuser turns it
 * into its -EINVAL) and none records a failure. Otherwise a disagreement breaks the
 * communicator. */
int ls_comm_verify(lockstep_comm_t *c)
{
    unsigned b = c->seq & 1;
    int refused = c->desc.call == LS_CALL_REFUSED, differ = 0;
    for (int r = 0; r < c->size; r++) {
        if (r == c->rank)
            continue;
        const ls_desc_t *d = &ls_ctl(c, r)->ann[b].desc;
        refused |= d->call == LS_CALL_REFUSED;
        differ |= !ls_same_desc(d, &c->desc);
    }
    if (refused)
        return -LOCKSTEP_EPEERINVAL;
    return differ ? ls_comm_fail(c, LOCKSTEP_EMISMATCH) : 0;
}

int ls_comm_alone(lockstep_comm_t *c, void *dst, const void *src, size_t bytes)
{
    int rc = ls_comm_failed(c);
    if (rc == 0 && dst != src && bytes)
        memcpy(dst, src, bytes);
    return rc;
}

void ls_comm_publish_step(lockstep_comm_t *c, uint32_t t)
{
    ls_ctl_t *me = ls_ctl(c, c->rank);
    if (track_cpu(c))
        __atomic_store_n(&me->own.where, sched_getcpu(), __ATOMIC_RELAXED);
    lockstep_wait_publish(&c->wait, &me->own.step, t);
}

int ls_comm_wait_steps(lockstep_comm_t *c, uint32_t t, uint64_t deadline)
{
    struct ls_peer_words pw = {offsetof(ls_ctl_t, own.step), offsetof(ls_ctl_t, own.where)};
    int cpu = track_cpu(c) ? __atomic_load_n(&ls_ctl(c, c->rank)->own.where, __ATOMIC_RELAXED) : -1;
    return wait_peers(c, pw, t, cpu, &deadline);
}

int ls_comm_wait_done(lockstep_comm_t *c, uint32_t t)
{
    struct ls_peer_words pw = {offsetof(ls_ctl_t, own.done), offsetof(ls_ctl_t, own.where)};
    uint64_t deadline = LS_NO_DEADLINE_YET;
    return wait_peers(c, pw, t, -1, &deadline);
}

int ls_comm_step(lockstep_comm_t *c, uint64_t deadline)
{
    uint32_t t = ++c->step;
    ls_comm_publish_step(c, t);
    return ls_comm_wait_steps(c, t, deadline);
}

void ls_comm_order(lockstep_comm_t *c, lockstep_order_t order, int *out)
{
    int n = 0, N = c->size, me = c->rank;
    switch (order) {
    case LOCKSTEP_ORDER_TOPOLOGY:
        memcpy(out, c->topo, sizeof(int) * (size_t)(N - 1));
        return;
    case LOCKSTEP_ORDER_LINEAR:
        for (int r = 0; r < N; r++)
            if (r != me)
                out[n++] = r;
        return;
    case LOCKSTEP_ORDER_ROTATED:
    case LOCKSTEP_ORDER_RANDOM:
        for (int k = 1; k < N; k++)
            out[n++] = (me + k) % N;
        if (order == LOCKSTEP_ORDER_RANDOM)
            for (int i = n - 1; i > 0; i--) { /* Fisher-Yates with xorshift64 */
                c->rng ^= c->rng << 13;
                c->rng ^= c->rng >> 7;
                c->rng ^= c->rng << 17;
                int j = (int)(c->rng % (uint64_t)(i + 1)), t = out[i];
                out[i] = out[j];
                out[j] = t;
            }
        return;
    }
}

int lockstep_comm_peers(lockstep_comm_t *c, lockstep_order_t order, int *peers)
{
    if (!c || !peers || (unsigned)order > LOCKSTEP_ORDER_TOPOLOGY)
        return -EINVAL;
    ls_comm_order(c, order, peers);
    return 0;
}

/* ---- topology: peers nearest first ---------------------------------------------------- */

/* Does the cpulist file (e.g. "0-3,8") name cpu? -1 when unreadable. */
static int cpulist_has(const char *path, int cpu)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    char buf[4096];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    for (char *p = buf; *p;) {
        char *end;
        long lo = strtol(p, &end, 10), hi = lo;
        if (end == p)
            break;
        if (*end == '-')
            hi = strtol(end + 1, &end, 10);
        if (cpu >= lo && cpu <= hi)
            return 1;
        p = *end == ',' ? end + 1 : end;
        if (*p == '\n')
            break;
    }
    return 0;
}

static int cpu_distance(int a, int b)
{
    if (a < 0 || b < 0)
        return 4;
    if (a == b)
        return 0;
    char path[128];
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/topology/thread_siblings_list", a);
    if (cpulist_has(path, b) == 1)
        return 1;
    for (int idx = 0; idx < 8; idx++) {
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/cache/index%d/level", a, idx);
        FILE *f = fopen(path, "r");
        if (!f)
            break;
        int level = 0;
        int got = fscanf(f, "%d", &level);
        fclose(f);
        if (got == 1 && level == 3) {
            snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/cache/index%d/shared_cpu_list", a, idx);
            if (cpulist_has(path, b) == 1)
                return 2;
        }
    }
    for (int node = 0; node < 64; node++) {
        snprintf(path, sizeof path, "/sys/devices/system/node/node%d/cpulist", node);
        int ha = cpulist_has(path, a);
        if (ha < 0)
            break;
        if (ha == 1)
            return cpulist_has(path, b) == 1 ? 3 : 4;
    }
    return 4;
}

static void compute_topology(lockstep_comm_t *c)
{
    int mycpu = ls_ctl(c, c->rank)->own.cpu, n = 0, dist[LOCKSTEP_COMM_MAX_RANKS];
    for (int k = 1; k < c->size; k++) { /* rotated order breaks ties */
        int r = (c->rank + k) % c->size;
        dist[n] = cpu_distance(mycpu, ls_ctl(c, r)->own.cpu);
        c->topo[n++] = r;
    }
    for (int i = 1; i < n; i++) /* stable insertion sort by distance */
        for (int j = i; j > 0 && dist[j - 1] > dist[j]; j--) {
            int t = dist[j]; dist[j] = dist[j - 1]; dist[j - 1] = t;
            t = c->topo[j]; c->topo[j] = c->topo[j - 1]; c->topo[j - 1] = t;
        }
}

/* ---- create / free ---------------------------------------------------------------------- */

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
                   (!pid_alive(h->creator_pid, h->creator_ns, here) ||
                    (__atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) == LS_COMM_MAGIC && !byte_locked(fd, 0)));
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

#define SLOT_MAX ((size_t)1 << 30)
#define BUFFER_MAX ((size_t)1 << 40)

int lockstep_comm_params_check(const lockstep_comm_params_t *p, char *msg, size_t len)
{
    char dummy[1];
    const char *bad_isa = "", *bad_copy = "";
    if (!msg || !len) {
        msg = dummy;
        len = sizeof dummy;
    }
    if (!p)
        snprintf(msg, len, "no params");
    else if (!p->job[0] || memchr(p->job, 0, sizeof p->job) == NULL)
        snprintf(msg, len, "job must be 1 to %d characters", LOCKSTEP_COMM_JOB_MAX);
    else if (p->size < 1 || p->size > LOCKSTEP_COMM_MAX_RANKS || p->rank < 0 || p->rank >= p->size)
        snprintf(msg, len, "need 0 <= rank < size <= %d (got rank=%d size=%d)", LOCKSTEP_COMM_MAX_RANKS,
                 p->rank, p->size);
    else if (p->small_bytes < 256 || p->small_bytes > SLOT_MAX || p->small_bytes % 64)
        snprintf(msg, len, "small_bytes must be a multiple of 64 from 256 to 2**30 (got %zu)", p->small_bytes);
    else if (p->chunk_bytes < 4096 || p->chunk_bytes > SLOT_MAX || p->chunk_bytes % 64)
        snprintf(msg, len, "chunk_bytes must be a multiple of 64 from 4096 to 2**30 (got %zu)", p->chunk_bytes);
    else if (p->allreduce_small_bytes && (p->allreduce_small_bytes < 256 || p->allreduce_small_bytes > SLOT_MAX))
        snprintf(msg, len, "allreduce_small_bytes must be 0 (automatic) or from 256 to 2**30 (got %zu)",
                 p->allreduce_small_bytes);
    else if (p->buffer_bytes > BUFFER_MAX)
        snprintf(msg, len, "buffer_bytes must be at most 2**40 (got %zu)", p->buffer_bytes);
    else if (p->broadcast_eager_bytes > LS_EAGER_MAX)
        snprintf(msg, len, "broadcast_eager_bytes must be at most 65536 (got %zu)", p->broadcast_eager_bytes);
    else if (p->cpu_sharers && p->cpu_sharers < p->size)
        snprintf(msg, len, "cpu_sharers must be 0 (size) or at least size (got %d, size %d)", p->cpu_sharers,
                 p->size);
    else if (ls_isa_cap(&bad_isa) < 0)
        snprintf(msg, len, "environment variable LOCKSTEP_ISA must be avx512, avx2, base or unset (got \"%s\")",
                 bad_isa);
    else if (ls_kernel_copy_env(&bad_copy) < 0)
        snprintf(msg, len,
                 "environment variable LOCKSTEP_KERNEL_COPY must be fast, slow, auto or unset (got \"%s\")",
                 bad_copy);
    else {
        msg[0] = 0;
        return 0;
    }
    return -EINVAL;
}

/* A joiner whose params give another layout than rank 0's header: record the
 * mismatch as the segment's failure, so the ranks already waiting in create see it
 * between two wait slices and fail with it too, instead of waiting out their
 * deadline. The header and the state are the segment's first two lines, inside its
 * first page. */
static void refuse_layout(int fd)
{
    char *m = mmap(NULL, 2 * LS_LINE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED)
        return; /* the others then time out, as they would without this */
    seg_fail((ls_seg_state_t *)(void *)(m + LS_LINE), LOCKSTEP_EMISMATCH);
    munmap(m, 2 * LS_LINE);
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
    c->timing = -1;
    c->pid_ns = pid_ns();
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

    /* layout */
    ls_seg_hdr_t want;
    memset(&want, 0, sizeof want);
    want.size = (uint32_t)p->size;
    want.small_bytes = p->small_bytes;
    unsigned cpus = (unsigned)lockstep_cpus_available();
    c->per_cpu = (sharers + cpus - 1) / cpus; /* sharers >= 1, cpus >= 1 */
    int oversubscribed = !ls_fits(c);
    size_t fits = AUTO_SMALL_FITS / (size_t)(p->size > 1 ? p->size - 1 : 1) / 256 * 256;
    size_t ar_small = p->allreduce_small_bytes ? p->allreduce_small_bytes
                      : oversubscribed         ? AUTO_SMALL_OVERSUBSCRIBED
                      : fits > AUTO_SMALL_FITS_MIN ? fits
                                                   : AUTO_SMALL_FITS_MIN;
    want.allreduce_small = ar_small < p->small_bytes ? ar_small : p->small_bytes;
    /* the block exchanges keep the allreduce's earlier switch: their small path copies
     * every block twice, and all-to-alls of 2 and 8 KiB at 2 ranks took 1.07-1.12x
     * the chunked path's time there (reduce-scatters: within 3 % from 16 KiB) */
    size_t x_small = p->allreduce_small_bytes ? p->allreduce_small_bytes
                     : oversubscribed         ? AUTO_SMALL_OVERSUBSCRIBED
                                              : AUTO_SMALL_FITS_MIN;
    want.exchange_small = x_small < p->small_bytes ? x_small : p->small_bytes;
    want.chunk_bytes = p->chunk_bytes;
    size_t bsize = lockstep_barrier_size(LOCKSTEP_BARRIER_AUTO, (unsigned)p->size, 0);
    want.off_barrier = 2 * LS_LINE;
    want.off_ctl = align_up(want.off_barrier + bsize, LS_LINE);
    want.off_data = align_up(want.off_ctl + (size_t)p->size * sizeof(ls_ctl_t), 4096);
    want.eager_bytes = p->broadcast_eager_bytes;
    want.eager_stride = want.eager_bytes ? align_up(offsetof(ls_eager_entry_t, data) + want.eager_bytes, LS_LINE) : 0;
    want.data_stride = align_up(2 * p->small_bytes + 2 * p->chunk_bytes + LS_EAGER_DEPTH * want.eager_stride, 4096);
    want.buffer_bytes = align_up(p->buffer_bytes, 4096);
    want.off_buf = want.off_data + (size_t)p->size * want.data_stride;
    want.total = want.off_buf + (size_t)p->size * want.buffer_bytes;
    /* Ranks outnumbering CPUs take turns on a core, so both ranks' working sets of a
     * step share its caches. 4 ranks on 2 cores, f32 sum: on the first machine 256 KiB
     * steps were about 20 % faster than 1 MiB at 4 MiB (2 rounds of 3) and 7-10 % at
     * 16 MiB; 128 KiB was no better, 64 KiB worse. On AMD EPYC (2 vCPUs; steps
     * alternated in the same session, medians of 6-8 runs) 512 KiB beat 256 KiB at
     * 1 MiB (165-167 against 173-178 us) and 16 MiB (4140-4178 against 4340-4382 us)
     * and tied at 4 MiB; 384 KiB (190 us at 1 MiB) and 768 KiB were worse, 1 MiB much
     * worse from 4 MiB (2087 against 773 us). 2 ranks on 2 cores did best with 1 MiB.
     * Rank 0 decides, for everyone, since ranks may see different CPU counts (affinity). */
    want.step_bytes = (uint32_t)p->chunk_bytes; /* at most SLOT_MAX */
    if (oversubscribed && want.step_bytes > OVERSUBSCRIBED_STEP)
        want.step_bytes = OVERSUBSCRIBED_STEP;

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
    } else {
        for (;;) {
            fd = shm_open(name, O_RDWR, 0600);
            if (fd >= 0) {
                struct stat st;
                int ready = 0, differs = 0;
                if (fstat(fd, &st) == 0 && (size_t)st.st_size >= sizeof(ls_seg_hdr_t)) {
                    ls_seg_hdr_t *h = mmap(NULL, sizeof *h, PROT_READ, MAP_SHARED, fd, 0);
                    if (h != MAP_FAILED) {
                        /* only a finished header from a live creator counts; one of
                         * another build's protocol is refused, and left alone */
                        uint32_t magic = __atomic_load_n(&h->magic, __ATOMIC_ACQUIRE);
                        if (ls_is_segment(magic) && magic != LS_COMM_MAGIC) {
                            munmap(h, sizeof *h);
                            close(fd);
                            fd = -1;
                            err = EPROTO;
                            goto fail;
                        }
                        if (magic == LS_COMM_MAGIC && pid_alive(h->creator_pid, h->creator_ns, c->pid_ns) &&
                            byte_locked(fd, 0)) {
                            differs = h->size != want.size || h->small_bytes != want.small_bytes ||
                                      (p->allreduce_small_bytes && h->allreduce_small != want.allreduce_small) ||
                                      h->chunk_bytes != want.chunk_bytes ||
                                      h->buffer_bytes != want.buffer_bytes || h->eager_bytes != want.eager_bytes ||
                                      h->total != want.total;
                            ready = !differs && (size_t)st.st_size >= want.total;
                        }
                        munmap(h, sizeof *h);
                    }
                }
                if (ready)
                    break;
                if (differs) { /* rank 0 was created with a different size or slots */
                    refuse_layout(fd);
                    close(fd);
                    fd = -1;
                    err = LOCKSTEP_EMISMATCH;
                    goto fail;
                }
                close(fd);
                fd = -1;
            } else if (errno != ENOENT) {
                err = errno;
                goto fail;
            }
            if (deadline && lockstep_now_ns() >= deadline) {
                err = ETIMEDOUT;
                goto fail;
            }
            if (p->cancel && p->cancel(p->cancel_arg)) {
                err = ECANCELED;
                goto fail;
            }
            sleep_ms(1);
        }
    }
    /* my liveness lock, before anything that shows my rank: before my claim below, and
     * for rank 0 before the magic that shows the segment (see lock_byte) */
    int lk = lock_byte(fd, p->rank);
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
        c->hdr->kernel_copy = p->size > 1 ? ls_kernel_copy_measure() : LS_KCOPY_FAST;
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
        __atomic_store_n(&c->hdr->magic, LS_COMM_MAGIC, __ATOMIC_RELEASE); /* step 1 done */
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
    __atomic_store_n(&me->own.pid_ns, c->pid_ns, __ATOMIC_RELEASE); /* until then: not judged */
    me->own.fences = global_fences_wanted() && ls_wait_global_fences();
    me->own.cpu = sched_getcpu();
    me->own.base = (uint64_t)(uintptr_t)c->base;
    me->own.where = me->ann[0].where = me->ann[1].where = -1; /* unknown: see wait_peers */
    __atomic_fetch_add(&c->state->joined.value, 1u, __ATOMIC_SEQ_CST);
    lockstep_wait_wake(&c->wait, &c->state->joined);
    rc = ls_comm_wait_word(c, -1, &c->state->joined, (uint32_t)c->size, deadline);
    if (rc) {
        err = -rc;
        goto fail_unlink;
    }
    shm_unlink(name); /* step 4: the name is gone, the mappings stay */
    /* before any other wait: every rank decides alike, from what all wrote before
     * joining, and nothing is published or parked on with c->wait until it has */
    int all_fences = 1;
    for (int r = 0; r < c->size; r++)
        all_fences &= __atomic_load_n(&ls_ctl(c, r)->own.fences, __ATOMIC_RELAXED) == 1;
    if (all_fences)
        c->wait.flags |= LOCKSTEP_WAIT_F_ASYM;
    c->busy = -1;
    ls_comm_cma_init(c);
    ls_comm_spread_init(c);
    compute_topology(c);
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

void *lockstep_comm_buffer(lockstep_comm_t *c, size_t *bytes)
{
    if (!c) {
        errno = EINVAL;
        return NULL;
    }
    if (bytes)
        *bytes = c->hdr->buffer_bytes;
    if (!c->hdr->buffer_bytes) {
        errno = ENOENT;
        return NULL;
    }
    return ls_buf(c, c->rank);
}

uint64_t ls_buffer_offset(const lockstep_comm_t *c, const void *p, size_t bytes)
{
    uintptr_t b = (uintptr_t)ls_buf(c, c->rank), q = (uintptr_t)p; /* p may be anywhere */
    size_t n = c->hdr->buffer_bytes;
    if (!n || q < b || q - b > n || bytes > n - (q - b))
        return LS_NO_OFFSET;
    return (uint64_t)(q - b);
}

/* Safe before announcing call s = seq + 1: ann[s & 1] was last read in call s - 2, and
 * every rank announced s - 1 after it finished that. */
void ls_zc_post(lockstep_comm_t *c, uint64_t send, uint64_t recv)
{
    struct ls_zc_offsets o = {send, recv};
    c->zc = o;
    memcpy(ls_ctl(c, c->rank)->ann[(c->seq + 1) & 1].data, &o, sizeof o);
}

int ls_zc_count(const lockstep_comm_t *c)
{
    int n = 0;
    for (int k = 0; k < c->size; k++)
        n += ls_zc_announced(c, k).send != LS_NO_OFFSET;
    return n;
}

struct ls_zc_offsets ls_zc_announced(const lockstep_comm_t *c, int r)
{
    if (r == c->rank)
        return c->zc;
    struct ls_zc_offsets o;
    memcpy(&o, ls_ctl(c, r)->ann[c->seq & 1].data, sizeof o);
    return o;
}

void lockstep_comm_free(lockstep_comm_t *c)
{
    if (!c)
        return;
    if (c->fork_gen == ls_fork_gen()) /* not a forked child's copy: the rank is mine */
        __atomic_store_n(&ls_ctl(c, c->rank)->own.left, 1u, __ATOMIC_RELEASE);
    munmap(c->base, c->total);
    if (c->fd >= 0)
        close(c->fd); /* my liveness lock goes (unless a forked child still holds the file) */
    free(c);
}

/* One episode of the thread layer's barrier in the segment, waited in slices with the
 * same liveness checks as every wait. */
static int barrier_episode(lockstep_comm_t *c)
{
    unsigned tid = (unsigned)c->rank;
    int rc = lockstep_barrier_arrive(c->barrier, tid);
    uint64_t deadline = ls_comm_deadline(c);
    while (rc == 0 && (rc = lockstep_barrier_wait_until(c->barrier, tid, slice_end(deadline))) == -ETIMEDOUT) {
        rc = between_slices(c, -1, deadline);
        if (rc > 0) {
            /* noticed here: counts only if the episode has still not ended (one more
             * look, with a deadline already past) */
            if (lockstep_barrier_wait_until(c->barrier, tid, 1) == 0) {
                rc = 0;
                break;
            }
            rc = ls_comm_fail(c, rc);
        }
    }
    return rc;
}

static int barrier(lockstep_comm_t *c)
{
    if (c->size == 1)
        return ls_comm_failed(c);
    /* announce without waiting, so a peer in a different call sees the mismatch; then
     * the barrier episode */
    int rc = ls_comm_settle(c);
    if (rc == 0)
        rc = ls_comm_announce(c, LS_CALL_BARRIER, 0, 0, 0, 0, 0);
    if (rc == 0)
        rc = barrier_episode(c);
    if (rc)
        return rc;
    return ls_comm_verify(c); /* everyone has announced by now */
}

int lockstep_comm_barrier(lockstep_comm_t *c)
{
    int rc = ls_comm_enter(c);
    return rc ? rc : ls_comm_leave(c, barrier(c));
}

/* A call this rank refuses: announced as such and waited for like any call, so that
 * every rank's call ends at once (see ls_comm_verify) and the sequence stays in step.
 * Nothing else happens in it: peers stop at their announcement, where at most their
 * own slots were written, which no one reads for this call. Peers in a barrier have
 * gone on into its episode, where they wait for every rank: a refuser joins it when
 * every peer that did not refuse is in a barrier (each refuser sees the same, so all
 * of them join), and otherwise the barriers cannot end, and it breaks the
 * communicator. Peers in an eager broadcast never announce: the wait below finds
 * that between slices and breaks it too. Returns 0 or the failure. */
int ls_comm_refuse(lockstep_comm_t *c)
{
    int rc = ls_comm_settle(c);
    if (rc == 0)
        rc = ls_comm_announce(c, LS_CALL_REFUSED, 0, 0, 0, 0, 1);
    if (rc != -LOCKSTEP_EPEERINVAL) /* a failure: my own refusal makes the call void */
        return rc;
    int barrier = 0, other = 0;
    for (int r = 0; r < c->size; r++) {
        int call = ls_ctl(c, r)->ann[c->seq & 1].desc.call;
        barrier |= r != c->rank && call == LS_CALL_BARRIER;
        other |= r != c->rank && call != LS_CALL_BARRIER && call != LS_CALL_REFUSED;
    }
    if (!barrier)
        return 0;
    return other ? ls_comm_fail(c, LOCKSTEP_EMISMATCH) : barrier_episode(c);
}

int lockstep_comm_tag(lockstep_comm_t *c, unsigned tag)
{
    if (tag > UINT8_MAX)
        return -EINVAL;
    int rc = ls_comm_enter(c);
    if (rc)
        return rc;
    c->tag = (uint8_t)tag;
    return ls_comm_leave(c, 0);
}

int lockstep_comm_refuse(lockstep_comm_t *c)
{
    int rc = ls_comm_enter(c);
    if (rc)
        return rc;
    return ls_comm_leave(c, c->size == 1 ? ls_comm_failed(c) : ls_comm_refuse(c));
}
