/* What the collectives share: the communicator, the call protocol's steps, the
 * segment's areas, zero-copy and kernel-copy posts, and the reduction kernels. The
 * segment's layout and protocol are in segment.h, the tuned constants in tuning.h. */
#ifndef LOCKSTEP_COMM_IMPL_H
#define LOCKSTEP_COMM_IMPL_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>

#include "lockstep/lockstep.h"
#include "lockstep/comm.h"
#include "../internal.h"
#include "args.h"
#include "segment.h"
#include "tuning.h"

/* lockstep_comm.busy: both chunk slots may still be read after my last call */
#define LS_BUSY_BOTH 2

struct lockstep_comm {
    /* read by every call: kept together at the front */
    char *base;
    ls_seg_hdr_t *hdr;
    ls_seg_state_t *state;
    int rank, size;
    uint32_t seq, step;
    int after_eager;   /* my last call was an eager broadcast */
    int entered;       /* a thread is in a call (ls_comm_enter) */
    unsigned fork_gen; /* ls_fork_gen() at create: a forked child's copy is refused */
    int busy;          /* which of my chunk slots peers may still read after my last call
                          returned: -1 none, 0 or 1, LS_BUSY_BOTH; the same on every rank */
    uint64_t timeout_ns;
    lockstep_wait_t wait;

    /* my last call as announced. After announcing, a rank reads these, never its own
     * announcement: peers that read that line may have taken it from this CPU's cache,
     * and reading it back would cost a transfer for what this rank already knows. */
    ls_desc_t desc;
    uint8_t tag; /* lockstep_comm_tag's, for the calls from here on */
    struct ls_zc_offsets zc;
    int kcopy_posted;
    uint32_t posted_call; /* my last call that posted for a kernel copy: one whose route
                             follows the ranks' distance */

    /* the segment and the process around it (create.c, liveness.c) */
    size_t total;
    lockstep_barrier_t *barrier;
    int fd;          /* the segment's file, kept open for my liveness lock (-1: none) */
    int locks;       /* liveness locks work here (ls_rank_alive) */
    uint32_t pid_ns; /* my PID namespace: peers' pids of another are not judged */
    int drained;     /* failed, and no kernel-copy write into this rank is under way (kcopy.c) */

    /* what the caller gave (params) */
    lockstep_pool_t *pool;    /* optional helper threads for large messages (parallel.c) */
    int (*cancel)(void *arg); /* asked between wait slices */
    void *cancel_arg;

    /* routes (tuning.h) */
    unsigned per_cpu; /* ranks (or cpu_sharers) per CPU, rounded up, as this rank saw at
                         create: 1 while they fit */
    int kcopy;        /* this rank reaches every peer by kernel copy (probed at create) */
    int kcopy_wide;   /* params.kernel_copy: LOCKSTEP_KERNEL_COPY_WIDE */
    int route;        /* the route my last call took (lockstep_comm_route_t) */
    int distance;     /* params.distance (rank 0's judges: distance.c) */
    uint64_t probed_ns; /* rank 0: when it last probed the distance */
    size_t zc_min;       /* params.zero_copy_min_bytes, or LS_ZERO_COPY_MIN */
    size_t prefetch_max; /* params.prefetch_max_bytes, or LS_PREFETCH_MAX */

    /* peer orders (topology.c) */
    int topo[LOCKSTEP_COMM_MAX_RANKS]; /* peers, nearest first (ORDER_TOPOLOGY) */
    uint64_t rng;                      /* ORDER_RANDOM */

    /* eager broadcasts (eager.c) */
    uint32_t known;     /* every rank has finished the calls up to this one, as far as
                           eager calls have seen */
    uint32_t run_start; /* the first of the eager calls in a row */
    int in_eager;       /* in an eager broadcast or settling after them */
};

/* One thread at a time in a communicator's calls (comm.h). A thread that comes in
 * while another's call runs gets -EBUSY, and the call in flight goes on; let in, both
 * would run one sequence of calls on the same slots, which ends in a mismatch on every
 * rank or, when the calls happen to pair up, in wrong data and no error. An atomic
 * exchange, so that of two threads coming in at once exactly one is refused. A forked
 * child's copy of the communicator gets -LOCKSTEP_EFORKED: its calls would run as the
 * parent's rank, beside the parent's own. Every public call is
 * `rc = ls_comm_enter(c); return rc ? rc : ls_comm_leave(c, call(...))`. */
static inline int ls_comm_enter(lockstep_comm_t *c)
{
    if (!c)
        return -EINVAL;
    if (LS_UNLIKELY(c->fork_gen != ls_fork_gen()))
        return -LOCKSTEP_EFORKED; /* a child's copy: the rank is still the parent's */
    if (__atomic_exchange_n(&c->entered, 1, __ATOMIC_ACQUIRE))
        return -EBUSY;
    c->route = LOCKSTEP_ROUTE_NONE;
    return 0;
}

static inline int ls_comm_leave(lockstep_comm_t *c, int rc)
{
    ls_store_release(&c->entered, 0);
    return rc;
}

/* call.c: take part in this call only to refuse it (see lockstep_comm_refuse) */
int ls_comm_refuse(lockstep_comm_t *c);

/* ls_comm_leave for the collectives: a call that found its arguments invalid before it
 * announced anything (-EINVAL with c->seq still seq0, what it was at the start) is
 * refused, so that the peers' calls end at once instead of at the deadline. The
 * caller gets its -EINVAL whatever the refusal met; a failure it met is recorded, and
 * the next call returns it. */
static inline int ls_comm_end(lockstep_comm_t *c, uint32_t seq0, int rc)
{
    if (LS_UNLIKELY(rc == -EINVAL) && c->seq == seq0 && c->size > 1)
        (void)ls_comm_refuse(c);
    return ls_comm_leave(c, rc);
}

/* Ranks (or cpu_sharers) fit the CPUs, as this rank saw at create */
static inline int ls_fits(const lockstep_comm_t *c)
{
    return c->per_cpu == 1;
}

/* The ranks sit far apart, as rank 0 last judged (distance.c). Every rank reads it
 * when it chooses a route; one that reads it just before a change and one just after
 * offer differently, and that call takes the route every rank offers. */
static inline int ls_far(const lockstep_comm_t *c)
{
    return ls_load_relaxed(&c->state->far) != 0;
}

/* Whether this rank offers a kernel copy for blocks of `bytes` on a route with window
 * w (tuning.h). The call moves that way only if every rank offers it (ls_kcopy_count). */
static inline int ls_kcopy_offer(const lockstep_comm_t *c, struct ls_kcopy_window w, size_t bytes)
{
    if (!c->kcopy)
        return 0;
    if (!ls_fits(c))
        return ls_far(c) ? bytes >= w.over_far_min && bytes <= w.over_far_max
                         : bytes >= w.over_min;
    if (ls_far(c) && bytes >= w.far_min)
        return 1;
    if (c->kcopy_wide)
        return bytes >= w.wide_min;
    return (bytes >= w.fits_min && bytes <= w.fits_max) || bytes >= w.fits_again;
}

/* The smallest block any rank might offer a kernel copy for on window w's route */
static inline size_t ls_kcopy_least(struct ls_kcopy_window w)
{
    size_t m = w.fits_min < w.wide_min ? w.fits_min : w.wide_min;
    m = m < w.fits_again ? m : w.fits_again;
    m = m < w.far_min ? m : w.far_min;
    m = m < w.over_far_min ? m : w.over_far_min;
    return m < w.over_min ? m : w.over_min;
}

static inline ls_ctl_t *ls_ctl(const lockstep_comm_t *c, int r)
{
    return (ls_ctl_t *)(void *)(c->base + c->hdr->off_ctl + (size_t)r * sizeof(ls_ctl_t));
}

static inline char *ls_small(const lockstep_comm_t *c, int r, unsigned b)
{
    return c->base + c->hdr->off_data + (size_t)r * c->hdr->data_stride + b * c->hdr->small_bytes;
}

static inline char *ls_chunk(const lockstep_comm_t *c, int r, unsigned b)
{
    return ls_small(c, r, 2) + b * c->hdr->chunk_bytes;
}

static inline ls_eager_entry_t *ls_eager_entry(const lockstep_comm_t *c, int r, uint32_t s)
{
    return (ls_eager_entry_t *)(void *)(ls_chunk(c, r, 2) + (s % LS_EAGER_DEPTH) * c->hdr->eager_stride);
}

static inline char *ls_buf(const lockstep_comm_t *c, int r)
{
    return c->base + c->hdr->off_buf + (size_t)r * c->hdr->buffer_bytes;
}

/* liveness.c: rank r by its pid, within this process's PID namespace, and by its
 * liveness lock (a rank that freed its communicator is not judged: like one that never
 * comes, it meets the deadline); the deadline, failure, and waiting on a peer's word */
int ls_rank_alive(const lockstep_comm_t *c, int r);
/* this process's PID namespace (0 unknown); whether pid of namespace ns runs, as seen
 * from namespace here (1 when that cannot be told) */
uint32_t ls_pid_ns(void);
int ls_pid_alive(pid_t pid, uint32_t ns, uint32_t here);
/* a rank's liveness lock on byte r of the segment's file: take it (0, -EAGAIN: held by
 * a live process, or another -errno); whether another holds it (1 also when unknown) */
int ls_lock_byte(int fd, int r);
int ls_byte_locked(int fd, int r);
/* the end of the next wait slice; between two slices, what a wait checks (0 to go
 * on, a recorded failure (negative), or a positive code this rank noticed) */
uint64_t ls_slice_end(uint64_t deadline);
int ls_between_slices(lockstep_comm_t *c, int peer, uint64_t deadline);
/* record code as the segment's failure unless one is recorded already */
void ls_seg_fail(ls_seg_state_t *st, int code);
uint64_t ls_comm_deadline(const lockstep_comm_t *c);
int ls_comm_fail(lockstep_comm_t *c, int code);
/* The checks every call makes, inline: the common case (healthy; the word already
 * there) costs a load, and only the rest calls into liveness.c */
int ls_comm_report_failure(lockstep_comm_t *c, uint32_t f);
static inline int ls_comm_failed(lockstep_comm_t *c)
{
    uint32_t f = ls_load_acquire(&c->state->failed);
    return LS_LIKELY(f == 0) ? 0 : ls_comm_report_failure(c, f);
}
int ls_comm_wait_word_slow(lockstep_comm_t *c, int peer, lockstep_waitword_t *ww, uint32_t target,
                           uint64_t deadline);
static inline int ls_comm_wait_word(lockstep_comm_t *c, int peer, lockstep_waitword_t *ww, uint32_t target,
                                    uint64_t deadline)
{
    if (ls_reached(ls_load_acquire(&ww->value), target))
        return 0;
    return ls_comm_wait_word_slow(c, peer, ww, target, deadline);
}
/* The same, and between slices check(c, peer) too: nonzero ends the wait with it */
int ls_comm_wait_word_checked(lockstep_comm_t *c, int peer, lockstep_waitword_t *ww, uint32_t target,
                              uint64_t deadline, int (*check)(lockstep_comm_t *c, int peer));
/* wait until every other rank's own.done has reached t */
int ls_comm_wait_done(lockstep_comm_t *c, uint32_t t);
/* call.c: announce call c->seq + 1 (wait_all: and wait for every rank's announcement
 * and verify the descriptors); steps; peer orders */
int ls_comm_announce(lockstep_comm_t *c, enum ls_call call, lockstep_op_t op, lockstep_dtype_t dt,
                     int root, uint64_t count, int wait_all);
int ls_comm_verify(lockstep_comm_t *c);
/* A call on a communicator of one rank: no shared memory, only the copy from src to
 * dst (none when they are the same), unless the communicator is broken */
int ls_comm_alone(lockstep_comm_t *c, void *dst, const void *src, size_t bytes);
int ls_comm_step(lockstep_comm_t *c, uint64_t deadline);
/* publish my step word = t (with where I run, when ranks outnumber CPUs) */
void ls_comm_publish_step(lockstep_comm_t *c, uint32_t t);
/* wait until every other rank's step word has reached t */
int ls_comm_wait_steps(lockstep_comm_t *c, uint32_t t, uint64_t deadline);
void ls_comm_order(lockstep_comm_t *c, lockstep_order_t order, int *out);
/* topology.c: c->topo, the peers nearest first (ORDER_TOPOLOGY), from own.cpu */
void ls_comm_topology(lockstep_comm_t *c);
/* params.c: LOCKSTEP_KERNEL_COPY as LOCKSTEP_KERNEL_COPY_*, -2 unset, -1 (and *bad =
 * the value) for anything else */
int ls_kernel_copy_env(const char **bad);
/* A threshold (params' relay_bytes, zero_copy_min_bytes, prefetch_max_bytes) as the
 * environment sets it over the params: the value, or `given` when the variable is
 * unset; -1 when it is malformed or past max (*bad = the variable's name) */
long long ls_threshold(const char *var, size_t given, size_t max, const char **bad);
/* LOCKSTEP_COMM_DISTANCE: 0 close, 1 far, -2 auto or unset, -1 malformed (*bad = it) */
int ls_distance_env(const char **bad);

/* eager.c: a broadcast of at most hdr->eager_bytes, and what every other call does
 * first after one (ls_comm_settle: 0 at once unless the last call was eager) */
int ls_eager_broadcast(lockstep_comm_t *c, void *buf, size_t bytes, int root, lockstep_xfer_t xfer);
int ls_eager_settle(lockstep_comm_t *c);
static inline int ls_comm_settle(lockstep_comm_t *c)
{
    return __builtin_expect(c->after_eager, 0) ? ls_eager_settle(c) : 0;
}

/* Zero-copy calls (lockstep_comm_buffer): each rank posts where its buffers lie in its
 * own shared buffer before announcing, and reads any rank's post once every rank has
 * announced (create.c). */
/* the offset of [p, p + bytes) in my buffer, or LS_NO_OFFSET if it is not all inside */
uint64_t ls_buffer_offset(const lockstep_comm_t *c, const void *p, size_t bytes);
/* into my next call's announcement */
void ls_zc_post(lockstep_comm_t *c, uint64_t send, uint64_t recv);
/* rank r's, for the call announced last */
struct ls_zc_offsets ls_zc_announced(const lockstep_comm_t *c, int r);
/* after the announcement: how many ranks posted a send in their buffer (the same on
 * every rank; all of them: the call runs zero-copy) */
int ls_zc_count(const lockstep_comm_t *c);

/* The CPU rank r published at byte offset `where` of its ls_ctl_t (-1: unknown) */
static inline int ls_cpu_hint(const lockstep_comm_t *c, int r, size_t where)
{
    return ls_load_relaxed((const int32_t *)(const void *)((const char *)ls_ctl(c, r) + where));
}

/* The ranks' distance (distance.c): a cache line's round trip between rank 0 and
 * partner (every rank passes the same: ls_distance_partner), judged against LS_FAR_NS
 * into state.far. At create (every rank calls it, give_up_ns the create's deadline)
 * and in the calls ls_distance_due names, after their announcement; ranks other than 0
 * and the partner return at once. */
void ls_distance_probe(lockstep_comm_t *c, int partner, uint64_t give_up_at);
/* Whether call s, whose announcements every rank has seen, probes: the same answer on
 * every rank. */
int ls_distance_due(lockstep_comm_t *c, uint32_t s);
/* The partner, from the CPUs every rank published at byte offset `where` of its
 * ls_ctl_t (own.cpu at create, this call's ann.where in a call): read alike by every
 * rank, all published before the wait that shows them. */
int ls_distance_partner(const lockstep_comm_t *c, size_t where);

/* An allreduce or reduce-scatter by kernel copy, after every rank posted its send:
 * n elements from byte `at` of every peer's send and from mine, reduced in rank order
 * into out, piece by piece through my chunk slots; with write_back, out's piece also
 * into every peer's recv at `at` (allreduce.c). No step: the caller ends the call. */
int ls_kcopy_reduce(lockstep_comm_t *c, lockstep_dtype_t dtype, lockstep_op_t op, const void *mine, void *out,
                    uint64_t at, size_t n, int write_back);

/* Kernel copies (kcopy.c): process_vm_readv/writev between the ranks' private memory,
 * for large blocks that are not in the shared buffers. c->kcopy: this rank could read
 * every peer at create, and params.kernel_copy is not LOCKSTEP_KERNEL_COPY_OFF. A call
 * that may move data this way posts its source, its destination and its offer next
 * to the zero-copy offsets before announcing; after the announcement it moves data
 * that way only if every rank offered, so every rank takes the same path. */
void ls_kcopy_init(lockstep_comm_t *c, int allowed);
/* src: what peers may read, dst: where they may write (src NULL: no offer) */
void ls_kcopy_post(lockstep_comm_t *c, const void *src, void *dst);
/* after ls_kcopy_post: whether this rank has copied into the slots before announcing;
 * after the announcement, ls_kcopy_early_peers: whether every other rank has */
void ls_kcopy_post_early(lockstep_comm_t *c, int early);
int ls_kcopy_early_peers(const lockstep_comm_t *c);
/* after the announcement: how many ranks offered (a kernel copy when all) */
int ls_kcopy_count(const lockstep_comm_t *c);
/* n bytes from rank r's posted source + at into dst: 0, or the error that breaks the
 * communicator (LOCKSTEP_EPEERDIED if r is gone, EIO otherwise) */
int ls_kcopy_read(lockstep_comm_t *c, int r, void *dst, uint64_t at, size_t n);
/* n bytes from src into rank r's posted destination + at; errors as ls_kcopy_read's */
int ls_kcopy_write(lockstep_comm_t *c, int r, const void *src, uint64_t at, size_t n);
/* Once the communicator has failed: wait until no peer is writing into my memory (each
 * peer's own.kcopy_into), so that a failed call writes nothing after it returns. */
void ls_kcopy_drain(lockstep_comm_t *c);

/* parallel.c: memcpy / ls_reduce, split across c->pool's threads when it pays */
void ls_comm_copy(lockstep_comm_t *c, void *dst, const void *src, size_t n);
void ls_comm_reduce(lockstep_comm_t *c, lockstep_dtype_t dt, lockstep_op_t op, void *out, void *const *also,
                    int nalso, const void *const *in, int nin, size_t count);

/* reduce.c */
/* A few f32 or i32 elements (at most LS_FEW_WORDS), or bf16 ones (at most
 * LS_FEW_HALVES, combined in f32 and rounded once): out = in[0] op ... op in[nin - 1]
 * in plain loops, with the same order and NaN rule as ls_reduce's kernels, so the same
 * bits. The inputs go through an accumulator on the stack and only the last loop
 * writes out, each element after reading it, so out may be any input. Not inline: its
 * vectorised loops would bloat every caller. ls_reduce tries it first. Returns 0, or
 * -1 (nothing done) for other dtypes, more elements or fewer than two inputs. */
int ls_reduce_few(lockstep_dtype_t dt, lockstep_op_t op, void *out, const void *const *in, int nin, size_t n);

/* Choose the kernels, once per process: 0, or -EINVAL if LOCKSTEP_ISA is not known
 * (nothing chosen). lockstep_comm_create calls it, so a communicator's kernels are
 * fixed before its first call. */
int ls_reduce_ready(void);
/* out = in[0] op ... op in[nin-1], and the result copied to also[0 .. nalso-1] too,
 * block by block while it is still in L1. An also[k] may be the in[j] that starts at
 * the same element (each block is read before it is written); out may be in[0], or
 * one other input (saved per block) */
void ls_reduce(lockstep_dtype_t dt, lockstep_op_t op, void *out, void *const *also, int nalso,
               const void *const *in, int nin, size_t count);

#endif
