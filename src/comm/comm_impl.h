/* The shared segment of a communicator and the helpers the collectives share.
 *
 *   [hdr: one line, written by rank 0 before magic]
 *   [state: one line: joined counter, failure code]
 *   [barrier: lockstep_barrier_t, AUTO, process-shared, `size` participants]
 *   [ctl[r]: three lines per rank: pid, cpu, step word, where | announcement 0 | announcement 1]
 *   [data[r]: small[0] small[1] chunk[0] chunk[1] eager ring (LS_EAGER_DEPTH entries,
 *             none without eager broadcasts) per rank]
 *   [buf[r]: params.buffer_bytes per rank, for zero-copy allreduces (allreduce.c)]
 *
 * Call protocol (see comm.c): a call numbered s writes its descriptor into ann[s & 1],
 * publishes ann[s & 1].seq = s, waits for every rank's ann[s & 1].seq to reach s and
 * compares their descriptors with its own. Tiny payloads ride in the announcement
 * (ann.data), small ones in small[s & 1]; a rank can only reuse either at call s + 2,
 * by which time every rank has announced s + 1 and so finished reading call s. Large payloads go
 * through the chunk slots in steps: every rank publishes ctl.step = t and waits for all
 * ranks to reach t before reading what they wrote before it. A large allreduce may
 * write its first chunk before announcing, into a slot no peer can still be reading
 * for the previous call (comm->busy, which every rank tracks alike). The large broadcast uses
 * the same words as a pipeline, waiting on the root only (see gather.c); every call
 * leaves every rank's step count equal. Eager broadcasts (eager.c) use neither
 * announcements nor steps: their own ring, and a settling wait before the next call. */
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
#include "pick.h"

/* A segment's header starts with "lsc" and the protocol in the low byte. Bump
 * LS_PROTOCOL with every change of the segment's layout or of the protocol on it: a
 * rank of another build then refuses to join (EPROTO) instead of misreading the
 * segment. 0x6d: up to session 36; 0x6e: liveness locks, pid_ns and left in own;
 * 0x6f: kernel_copy in the header, single-copy posts in 2-rank small broadcasts;
 * 0x70: rank 0's choices of way for large allreduces in the state line (pick);
 * 0x71: and for allgathers on the small path, whose ranks post for single copy;
 * 0x72: and for large all-to-alls; every rank offers single copy in both and posts
 * whether it copied into the slots before announcing;
 * 0x73: and the receiver's for 2-rank broadcasts on the small path below the single-copy
 * window; in 2-rank small broadcasts that post for single copy, ranks post whether they
 * copied in before announcing too. */
#define LS_MAGIC_BASE 0x6c736300u
#define LS_PROTOCOL 0x73u
#define LS_COMM_MAGIC (LS_MAGIC_BASE | LS_PROTOCOL)
static inline int ls_is_segment(uint32_t magic)
{
    return (magic & ~0xffu) == LS_MAGIC_BASE;
}
#define LS_LINE LOCKSTEP_CACHELINE

#define LS_BUSY_BOTH 2

enum ls_call { LS_CALL_ALLREDUCE = 1, LS_CALL_BROADCAST, LS_CALL_ALLGATHER, LS_CALL_BARRIER, LS_CALL_REDUCE_SCATTER,
              LS_CALL_ALLTOALL, LS_CALL_REFUSED /* ls_comm_refuse: this rank's arguments were invalid */ };

/* the header's kernel_copy (see LS_KCOPY_SLOW_RATIO) */
enum { LS_KCOPY_FAST = 1, LS_KCOPY_SLOW = 2 };

typedef struct ls_seg_hdr {
    uint32_t magic, size;
    int32_t creator_pid;
    uint32_t creator_ns; /* its PID namespace (comm.c: pid_ns): its pid means nothing elsewhere */
    uint64_t small_bytes, chunk_bytes, data_stride;
    uint32_t step_bytes;  /* the large allreduce's step: chunk_bytes (at most 2**30), or less
                             when oversubscribed */
    uint32_t kernel_copy; /* LS_KCOPY_FAST or LS_KCOPY_SLOW, as rank 0 found it (cma.c) */
    uint64_t allreduce_small; /* an allreduce up to this size takes the small path */
    uint64_t off_barrier, off_ctl, off_data, total;
    uint64_t buffer_bytes, off_buf; /* the ranks' zero-copy buffers (lockstep_comm_buffer) */
    uint64_t eager_bytes, eager_stride; /* eager broadcasts (eager.c): largest payload, entry size */
    uint64_t exchange_small; /* a reduce-scatter or all-to-all up to this total takes the small path */
} ls_seg_hdr_t;
_Static_assert(sizeof(ls_seg_hdr_t) <= LS_LINE, "the header must fit its line, before state");

/* Classes of calls whose way (the slots or single copy) is picked by timing both
 * (pick.h), each in LS_PICK_SIZES size classes: doublings from the class's smallest
 * size (ls_pick_size), the last one open-ended.
 *   LS_PICK_ALLREDUCE: allreduces from 64 KiB (allreduce.c), by element size (2
 *     bytes or not), picked by rank 0;
 *   LS_PICK_ALLGATHER_SMALL: allgathers on the small path, PULL then PUSH, picked by
 *     rank 0;
 *   LS_PICK_ALLTOALL: all-to-alls past LS_CMA_MAX_SLOW where kernel copies are slow,
 *     picked by rank 0;
 *   LS_PICK_BROADCAST_SMALL: 2-rank broadcasts on the small path below the single-copy
 *     window (gather.c), picked by the receiver;
 *   (the choices in these, the first LS_PICK_CLASSES, are in the state line: the others
 *   read them to know what to copy before announcing)
 *   LS_PICK_ALLGATHER: large allgathers, PULL then PUSH, picked by rank 0;
 *   LS_PICK_BROADCAST: large broadcasts between 2 ranks, picked by the receiver. */
#define LS_PICK_SIZES 8
#define LS_PICK_ALLREDUCE 0
#define LS_PICK_ALLGATHER_SMALL (2 * LS_PICK_SIZES)
#define LS_PICK_ALLTOALL (4 * LS_PICK_SIZES)
#define LS_PICK_BROADCAST_SMALL (5 * LS_PICK_SIZES)
#define LS_PICK_CLASSES (6 * LS_PICK_SIZES) /* those in the state line */
#define LS_PICK_ALLGATHER LS_PICK_CLASSES
#define LS_PICK_BROADCAST (LS_PICK_ALLGATHER + 2 * LS_PICK_SIZES)
#define LS_PICK_ALL (LS_PICK_BROADCAST + LS_PICK_SIZES)

/* Whether the picking rank's wait for the others' announcements counts in a call's
 * cost (ls_comm_announce): in a small broadcast the root copies into the slots before
 * announcing, and that copy is the slots' cost */
static inline int ls_pick_counts_wait(int cls)
{
    return cls >= LS_PICK_BROADCAST_SMALL && cls < LS_PICK_BROADCAST_SMALL + LS_PICK_SIZES;
}

/* The size class of bytes (>= min) within a class of calls */
static inline int ls_pick_size(size_t bytes, size_t min)
{
    int k = 0;
    while (k + 1 < LS_PICK_SIZES && bytes / 2 >= min << k)
        k++;
    return k;
}

typedef struct ls_seg_state {
    lockstep_waitword_t joined; /* ranks that have mapped the segment */
    uint32_t failed;            /* first failure (positive code), 0 while healthy */
    uint8_t pick[LS_PICK_CLASSES]; /* per class, the way of its next call, as the rank
                                      that picks chose it: 0 the slots, 1 single copy */
} ls_seg_state_t;
_Static_assert(sizeof(ls_seg_state_t) <= LS_LINE, "the state fits its line");

/* What a call announces; compared across ranks field by field. tag: the caller's
 * (lockstep_comm_tag), 0 unless set. */
typedef struct ls_desc {
    uint8_t call, op, dtype, tag;
    int32_t root;
    uint64_t count;
} ls_desc_t;

static inline int ls_same_desc(const ls_desc_t *a, const ls_desc_t *b)
{
    return a->call == b->call && a->op == b->op && a->dtype == b->dtype && a->tag == b->tag &&
           a->root == b->root && a->count == b->count;
}

#define LS_INLINE_BYTES (LS_LINE - sizeof(lockstep_waitword_t) - sizeof(ls_desc_t) - 4)

/* One announcement buffer: the sequence number a rank waits on, the descriptor, the CPU
 * the rank announced from (-1 unless ranks outnumber CPUs; see wait_peers in comm.c) and,
 * for payloads up to LS_INLINE_BYTES, the payload itself, so that the transfer that
 * shows a peer's arrival also brings its call and its data. */
typedef struct ls_announce {
    lockstep_waitword_t seq;
    ls_desc_t desc;
    int32_t where;
    unsigned char data[LS_INLINE_BYTES];
} ls_announce_t;
_Static_assert(sizeof(ls_announce_t) == LS_LINE, "an announcement is one line");

/* Where a payload of up to LS_INLINE_BYTES starts in ann.data. One that fits the rest
 * of the announcement's first 64-byte line (seq's) goes right after the header; one
 * that fits the second line alone fills that line, aligned, so that no store or load of
 * it straddles the two; a larger one fills data from its start. 2 ranks, 40 and 64 B:
 * 0.85-0.97x the time of straddling (both libraries alternating in one session). */
#define LS_HW_LINE 64
#define LS_INLINE_HEAD (LS_HW_LINE - offsetof(ls_announce_t, data) % LS_HW_LINE)
_Static_assert(LS_INLINE_HEAD + LS_HW_LINE <= LS_INLINE_BYTES, "the second line lies inside data");
static inline size_t ls_inline_at(size_t bytes)
{
    return bytes > LS_INLINE_HEAD && bytes <= LS_HW_LINE ? LS_INLINE_HEAD : 0;
}

typedef struct ls_ctl {
    struct {
        uint64_t base;            /* where the segment lies in this rank (single-copy reads) */
        int32_t pid, cpu;         /* cpu: at create, for ORDER_TOPOLOGY */
        lockstep_waitword_t step; /* last data step finished */
        int32_t where;            /* the CPU of the last step, as in ls_announce_t */
        uint32_t eager_seq;       /* the eager broadcast I am in or was last in (eager.c) */
        int32_t eager_root;       /* its root, as I called it */
        lockstep_waitword_t done; /* the last eager broadcast I finished */
        int32_t fences;           /* at create: registered for global membarrier (comm.c) */
        int32_t cma_into;         /* 1 + the rank my single-copy write goes into, or 0 (cma.c) */
        uint32_t pid_ns;          /* the PID namespace pid is in (comm.c: pid_ns), written after it */
        uint32_t left;            /* 1: freed its communicator (its liveness lock goes too) */
        int32_t use;              /* spread.c: how much of its CPU it had, at its last check */
        char pad[LS_LINE - 48 - 2 * sizeof(lockstep_waitword_t)];
    } own;
    ls_announce_t ann[2];         /* call s uses ann[s & 1] */
} ls_ctl_t;
_Static_assert(sizeof(ls_ctl_t) == 3 * LS_LINE, "three lines per rank");

#define LS_NO_OFFSET UINT64_MAX
struct ls_zc_offsets {
    uint64_t send, recv;
};

struct lockstep_comm {
    char *base;
    size_t total;
    int rank, size;
    uint32_t seq, step;
    int after_eager;   /* my last call was an eager broadcast (read by every call: kept
                          on the line of the fields every call reads) */
    int entered;       /* a thread is in a call (ls_comm_enter) */
    unsigned fork_gen; /* ls_fork_gen() at create: a forked child's copy is refused */
    int fd;            /* the segment's file, kept open for my liveness lock (-1: none) */
    int locks;         /* liveness locks work here (ls_rank_alive) */
    uint32_t pid_ns;   /* my PID namespace: peers' pids of another are not judged */
    uint64_t timeout_ns;
    lockstep_wait_t wait;
    ls_seg_hdr_t *hdr;
    ls_seg_state_t *state;
    lockstep_barrier_t *barrier;
    lockstep_pool_t *pool;             /* optional helper threads for large messages */
    int (*cancel)(void *arg);          /* params.cancel, asked between wait slices */
    void *cancel_arg;
    int topo[LOCKSTEP_COMM_MAX_RANKS]; /* peers, nearest first (ORDER_TOPOLOGY) */
    uint64_t rng;                      /* ORDER_RANDOM */
    int busy;                          /* which of my chunk slots peers may still read
                                          after my last call returned: -1 none, 0 or 1,
                                          LS_BUSY_BOTH; the same on every rank */
    uint32_t known;                    /* eager.c: every rank has finished the calls up to
                                          this one (as far as eager calls have seen) */
    uint32_t run_start;                /* eager.c: the first of the eager calls in a row */
    int in_eager;                      /* in an eager broadcast or settling after them */
    int cma;                           /* this rank can read every peer's memory (cma.c) */
    unsigned per_cpu;                  /* ranks (or cpu_sharers) per CPU, rounded up, as
                                          this rank saw at create: 1 while they fit */
    uint32_t spread_wait;              /* spread.c: calls from the next check to the one
                                          after (0: this rank never spreads) */
    uint32_t spread_next;              /* spread.c: the next check's call */
    long spread_switches;              /* spread.c: my involuntary process switches, CPU */
    uint64_t spread_cpu_ns, spread_ns; /* time and the clock, at my last check */
    /* My last call's descriptor, zero-copy offsets and single-copy post, as announced.
     * After announcing, a rank reads these, never its own announcement: the peers
     * that read that line may have taken it from this CPU's cache, and reading it
     * back costs a transfer (2 ranks, 256 B allreduce: about 90 ns of 500, on a line
     * that only confirms what this rank wrote). */
    ls_desc_t desc;
    uint8_t tag; /* lockstep_comm_tag's, for the calls from here on */
    struct ls_zc_offsets zc;
    int cma_posted;
    int drained; /* the communicator has failed and no single-copy write into this rank
                    is under way any more (ls_comm_failed) */
    ls_pick_t pick[LS_PICK_ALL]; /* per class, the costs behind the choices this rank
                                    makes (see LS_PICK_ALLREDUCE) */
    int timing;            /* the class of the call this rank times, or -1 */
    int timing_way;        /* its way: 0 the slots, 1 single copy, -1 single copy was
                              wanted and some rank could not take it */
    uint64_t timing_from;  /* its start, moved on by its wait for the announcements */
    size_t timing_bytes;   /* its size: the cost is per byte */
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
    return __atomic_exchange_n(&c->entered, 1, __ATOMIC_ACQUIRE) ? -EBUSY : 0;
}

static inline int ls_comm_leave(lockstep_comm_t *c, int rc)
{
    __atomic_store_n(&c->entered, 0, __ATOMIC_RELEASE);
    return rc;
}

/* comm.c: take part in this call only to refuse it (see lockstep_comm_refuse) */
int ls_comm_refuse(lockstep_comm_t *c);

/* Picking a call's way by timing (pick.h), on the rank that picks for class cls:
 * ls_pick_start times the call from now (ls_comm_announce leaves out its wait for the
 * others) and returns the way to offer, 1 for single copy; once the call knows its
 * way, ls_pick_way records it (0 the slots, 1 single copy, -1 single copy was offered
 * and some rank could not take it; -2: neither, the call is not timed);
 * ls_comm_end then records its cost (ls_pick_done). */
static inline int ls_pick_start(lockstep_comm_t *c, int cls, size_t bytes)
{
    c->timing = cls;
    c->timing_bytes = bytes;
    c->timing_from = lockstep_now_ns();
    return cls < LS_PICK_CLASSES ? __atomic_load_n(&c->state->pick[cls], __ATOMIC_RELAXED)
                                 : ls_pick_next(&c->pick[cls]);
}

/* A class in the state line (cls < LS_PICK_CLASSES), picked by rank `picker` (rank 0;
 * a 2-rank broadcast's receiver): the way this rank offers (the picker: its own
 * choice, timed from here; the others: single copy in every call, so that the picker's
 * offer decides), and in *held whether to hold its copy into the slots back until
 * after announcing (the picker's last choice was single copy). The others read that
 * choice only for *held: in calls back to back one may read it before the picker has
 * stored the new one, and then merely copies late (ls_pick_slots). */
static inline int ls_pick_offer(lockstep_comm_t *c, int cls, size_t bytes, int picker, int *held)
{
    int offer = c->rank == picker ? ls_pick_start(c, cls, bytes) : 1;
    *held = __atomic_load_n(&c->state->pick[cls], __ATOMIC_RELAXED) != 0;
    return offer;
}

static inline void ls_pick_way(lockstep_comm_t *c, int way)
{
    if (way < -1)
        c->timing = -1;
    c->timing_way = way;
}

void ls_pick_done(lockstep_comm_t *c);

/* ls_comm_leave for the collectives: a call that found its arguments invalid before it
 * announced anything (-EINVAL with c->seq still seq0, what it was at the start) is
 * refused, so that the peers' calls end at once instead of at the deadline. The
 * caller gets its -EINVAL whatever the refusal met; a failure it met is recorded, and
 * the next call returns it. */
static inline int ls_comm_end(lockstep_comm_t *c, uint32_t seq0, int rc)
{
    if (LS_UNLIKELY(rc == -EINVAL) && c->seq == seq0 && c->size > 1)
        (void)ls_comm_refuse(c);
    if (c->timing >= 0) {
        if (rc == 0)
            ls_pick_done(c);
        c->timing = -1;
    }
    return ls_comm_leave(c, rc);
}

/* Ranks (or cpu_sharers) fit the CPUs, as this rank saw at create */
static inline int ls_fits(const lockstep_comm_t *c)
{
    return c->per_cpu == 1;
}

/* Kernel copies are slow here (LS_KCOPY_SLOW, the same on every rank) and ranks fit
 * the CPUs, as this rank saw at create: single copies only where they won on such a
 * machine (see each collective's limits) */
static inline int ls_cma_slow(const lockstep_comm_t *c)
{
    return c->hdr->kernel_copy == LS_KCOPY_SLOW && ls_fits(c);
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

/* One entry of rank r's eager ring (eager.c): seq, the descriptor, then the payload */
typedef struct ls_eager_entry {
    lockstep_waitword_t seq;
    ls_desc_t desc;
    unsigned char data[];
} ls_eager_entry_t;
#define LS_EAGER_DEPTH 16u
#define LS_EAGER_MAX ((size_t)64 * 1024)

static inline ls_eager_entry_t *ls_eager_entry(const lockstep_comm_t *c, int r, uint32_t s)
{
    return (ls_eager_entry_t *)(void *)(ls_chunk(c, r, 2) + (s % LS_EAGER_DEPTH) * c->hdr->eager_stride);
}

static inline char *ls_buf(const lockstep_comm_t *c, int r)
{
    return c->base + c->hdr->off_buf + (size_t)r * c->hdr->buffer_bytes;
}

/* comm.c */
/* rank r: by its pid, within this process's PID namespace, and by its liveness lock
 * (comm.c; a rank that freed its communicator is not judged: like one that never
 * comes, it meets the deadline) */
int ls_rank_alive(const lockstep_comm_t *c, int r);
uint64_t ls_comm_deadline(const lockstep_comm_t *c);
int ls_comm_failed(lockstep_comm_t *c);
int ls_comm_fail(lockstep_comm_t *c, int code);
int ls_comm_wait_word(lockstep_comm_t *c, int peer, lockstep_waitword_t *ww, uint32_t target, uint64_t deadline);
/* The same, and between slices check(c, peer) too: nonzero ends the wait with it */
int ls_comm_wait_word_checked(lockstep_comm_t *c, int peer, lockstep_waitword_t *ww, uint32_t target,
                              uint64_t deadline, int (*check)(lockstep_comm_t *c, int peer));
/* wait until every other rank's own.done has reached t */
int ls_comm_wait_done(lockstep_comm_t *c, uint32_t t);
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

/* eager.c: a broadcast of at most hdr->eager_bytes, and what every other call does
 * first after one (ls_comm_settle: 0 at once unless the last call was eager) */
int ls_eager_broadcast(lockstep_comm_t *c, void *buf, size_t bytes, int root, lockstep_xfer_t xfer);
int ls_eager_settle(lockstep_comm_t *c);
static inline int ls_comm_settle(lockstep_comm_t *c)
{
    return __builtin_expect(c->after_eager, 0) ? ls_eager_settle(c) : 0;
}

/* Zero-copy calls (lockstep_comm_buffer): where a call's buffers lie in the rank's own
 * shared buffer, as offsets into it, posted in the announcement's data (which only the
 * tiny allreduce uses otherwise) before announcing, and read from any rank's
 * announcement once every rank has announced. */
_Static_assert(sizeof(struct ls_zc_offsets) <= LS_INLINE_BYTES, "offsets ride in the announcement");
/* the offset of [p, p + bytes) in my buffer, or LS_NO_OFFSET if it is not all inside */
uint64_t ls_buffer_offset(const lockstep_comm_t *c, const void *p, size_t bytes);
/* into my next call's announcement */
void ls_zc_post(lockstep_comm_t *c, uint64_t send, uint64_t recv);
/* rank r's, for the call announced last */
struct ls_zc_offsets ls_zc_announced(const lockstep_comm_t *c, int r);
/* after the announcement: how many ranks posted a send in their buffer (the same on
 * every rank; all of them: the call runs zero-copy) */
int ls_zc_count(const lockstep_comm_t *c);

/* Single copies between peers' private memory (process_vm_readv, process_vm_writev),
 * for large blocks that are not in the shared buffers. c->cma: this rank could read
 * every peer at create (and LOCKSTEP_NO_CMA is unset; writing takes the same
 * permission). A call that may move data this way posts the addresses of its source
 * and destination and its c->cma next to the zero-copy offsets before announcing;
 * after the announcement it moves data that way only if every rank posted c->cma, so
 * every rank takes the same path. */
/* The smallest blocks an all-to-all writes this way: LS_CMA_MIN_FITS while ranks fit
 * the CPUs, LS_CMA_MIN when they outnumber them. Measured against the slots in the
 * same processes (median of 9 paired batches) with new data written into send before
 * every call, as an inference step does (unchanged data flatters single copies: their
 * lines stay clean and end up cached on the other core). 2 ranks: blocks of 4 KiB
 * 1.36-1.43x the time, 8 KiB 0.82x, 16-256 KiB 0.57-0.68x, 512 KiB 0.61x (unchanged
 * data: 8 KiB 0.76x, 16-256 KiB 0.48-0.63x); 4 ranks on 2 CPUs: 16 KiB 1.07-1.09x, 32
 * KiB 0.90-0.98x, 48-64 KiB 0.76-0.79x, 256 KiB 0.81x; 8 ranks, 64 KiB 0.90-0.93x.
 * The writer's copy is the cheaper one: its source lines are in its own cache, where a
 * reader would fetch them from the writer's. Reading (each rank its block of every
 * peer's send, process_vm_readv) lost to the slots with new data up to 256 KiB blocks
 * at 2 ranks (16-64 KiB 1.15-1.47x), and took 1.6x the writes' time at 512 KiB. */
#define LS_CMA_MIN ((size_t)32 * 1024)
#define LS_CMA_MIN_FITS ((size_t)8 * 1024)
/* Where kernel copies are slow (LS_KCOPY_SLOW) and ranks fit the CPUs, all-to-alls
 * write blocks from LS_CMA_MIN to LS_CMA_MAX_SLOW this way. AMD EPYC with 2 vCPUs
 * (process_vm_readv 3.6-4x memcpy's time), 2 ranks, new data before every call, the
 * same comparison: blocks of 8 KiB 1.60x the time, 16 KiB 1.14x, 24 KiB 0.96x, 32 KiB
 * 0.81-0.89x, 48-128 KiB 0.71-0.81x (one run of two 1.17x at 112-128 KiB), 144-160 KiB
 * 0.81-0.94x, 192 KiB 1.02-1.09x, 256 KiB 1.20-1.24x, 1 MiB 1.38-1.39x. Ranks
 * outnumbering the CPUs keep LS_CMA_MIN and no limit: 4 ranks on the 2 vCPUs, 32 KiB-1
 * MiB 0.31-0.46x (the slots' steps wait for ranks to be scheduled). Past it, rank 0
 * picks between the two by timing both (pick.h): in stretches where the host had
 * moved the vCPUs apart, the slots' all-to-all at 2 ranks took 2.9-4.4x OpenMPI's
 * time with unchanged data (256 KiB blocks 129 us against 29.9, 1 MiB 494 against
 * 113, 4 MiB 2077 against 721; the benchmark's alltoall_2r). With the pick, 2 ranks,
 * unchanged data, median of 11 calls per way and round, in us, the pick (the slots
 * alone, MPI): 3 rounds apart (round trip 487-493 ns), 256 KiB 32 (140, 30), 1 MiB
 * 110 (555, 104), 4 MiB 795 (2623, 649); usual rounds (108-127 ns), 12 runs of 3
 * rounds, 6 with the pick and 6 without, alike: 256 KiB 22-28, 1 MiB 76-84 (the
 * slots alone 75-80). Some runs, with the pick or without, had lockstep's
 * communicator at 96-108 at 1 MiB in every round, while a trace showed it taking the
 * slots in every call but the looks: that communicator, not the pick. */
#define LS_CMA_MAX_SLOW ((size_t)160 * 1024)
/* The header's kernel_copy. Rank 0 times process_vm_readv of its own memory against
 * memcpy of the same bytes at create (ls_kernel_copy_measure): slow when the kernel's
 * copy takes more than LS_KCOPY_SLOW_RATIO times memcpy's. Through the slots a byte is
 * copied twice, by two CPUs in turn; by single copy once, through the kernel; so past
 * twice memcpy's time single copies lose wherever copying dominates, as it does while
 * ranks fit the CPUs. LOCKSTEP_KERNEL_COPY (fast, slow, or auto or unset: measure)
 * decides instead, on rank 0. The machines where single copies were first measured
 * won with them; a later one (AMD EPYC, 2 vCPUs) measured 3.6-4.0x at 256 KiB to 4
 * MiB, in cache, and single copies lost to the slots there past the limits below. */
#define LS_KCOPY_SLOW_RATIO 2
/* LOCKSTEP_KERNEL_COPY as LS_KCOPY_FAST or LS_KCOPY_SLOW, 0 unset, empty or auto, -1
 * (and *bad = the value) for anything else */
int ls_kernel_copy_env(const char **bad);
/* rank 0 at create: LS_KCOPY_FAST or LS_KCOPY_SLOW */
uint32_t ls_kernel_copy_measure(void);
/* ls_cma_write moves at most this per system call, each after a check that the call
 * has not failed (see cma_move) */
#define LS_CMA_PIECE ((size_t)256 * 1024)
void ls_comm_cma_init(lockstep_comm_t *c);
/* spread.c: whether this rank keeps ranks spread over the CPUs (at create); before
 * announcing call c->seq, publish how much of my CPU I had since the last check, if
 * it is a check; after every rank announced it (my_cpu: where I announced from),
 * move to a CPU short of its share when the plan says so */
void ls_comm_spread_init(lockstep_comm_t *c);
void ls_comm_spread_post(lockstep_comm_t *c);
void ls_comm_spread(lockstep_comm_t *c, int my_cpu);
/* Once the communicator has failed: wait until no peer is writing into my memory (each
 * peer's own.cma_into), so that a failed call writes nothing after it returns. */
void ls_cma_drain(lockstep_comm_t *c);
/* src: what peers may read, dst: where they may write (src NULL: neither, as when
 * c->cma is 0) */
void ls_cma_post(lockstep_comm_t *c, const void *src, void *dst);
/* after ls_cma_post: whether this rank has copied into the slots before announcing
 * (allreduce.c, gather.c, exchange.c); after the announcement, whether every other
 * rank has */
void ls_cma_post_early(lockstep_comm_t *c, int early);
int ls_cma_early_peers(const lockstep_comm_t *c);

/* For ls_pick_way, a call that went through the slots: 0, or -2 (not timed) where this
 * rank copied in before announcing and some peer did not. That peer read rank 0's
 * choice before rank 0 had stored it (calls back to back: it started this call while
 * rank 0 was still ending the last), so it held its copy back for single copy, and
 * its late copy and the step that waits for it would count against the slots. The
 * next call goes the same way, and by then every peer has read the choice: it was
 * stored before rank 0 announced this call. Without this, 2 ranks, small-path
 * allgathers of 64 KiB back to back: every look at the slots cost 3-6x their time. */
static inline int ls_pick_slots(const lockstep_comm_t *c, int copied)
{
    return c->timing >= 0 && copied && !ls_cma_early_peers(c) ? -2 : 0;
}
/* after the announcement: how many ranks posted their c->cma (single copy when all) */
int ls_cma_count(const lockstep_comm_t *c);
/* n bytes from rank r's posted source + at into dst: 0, or the error that breaks the
 * communicator (LOCKSTEP_EPEERDIED if r is gone, EIO otherwise) */
int ls_cma_read(lockstep_comm_t *c, int r, void *dst, uint64_t at, size_t n);
/* n bytes from src into rank r's posted destination + at; errors as ls_cma_read's */
int ls_cma_write(lockstep_comm_t *c, int r, const void *src, uint64_t at, size_t n);

/* parallel.c: memcpy / ls_reduce, split across c->pool's threads when it pays */
void ls_comm_copy(lockstep_comm_t *c, void *dst, const void *src, size_t n);
void ls_comm_reduce(lockstep_comm_t *c, lockstep_dtype_t dt, lockstep_op_t op, void *out, void *const *also,
                    int nalso, const void *const *in, int nin, size_t count);

/* reduce.c */
/* A few f32 or i32 elements (at most LS_FEW_WORDS; a tiny allreduce has 25 or fewer),
 * or bf16 ones (at most LS_FEW_HALVES, combined in f32 and rounded once):
 * out = in[0] op ... op in[nin - 1] in plain loops. The inputs go through an
 * accumulator on the stack (f32/i32: all but the last) and only the last loop writes
 * out, each element after reading it, so out may be any input. The same order and NaN rule as ls_reduce's
 * kernels, so the same bits, without its blocks and its kernel table's indirect calls,
 * which cost more than the arithmetic here (2 ranks, 4 B allreduce 0.79-0.80x the
 * time, 16 B 0.91-0.93x). No memcpy of n * 4 bytes, which GCC makes a rep movs when n
 * is only known at run time: its start-up cost made an 8 B allreduce 20-25 ns slower
 * than a 4 B one (without it, 2 ranks, 8-96 B: 0.72-0.84x the time). And not inline:
 * inlined, its vectorised loops doubled lockstep_comm_allreduce and made 4 B calls
 * slower. bf16, 2 ranks: 4 B 0.76x the time, 16-100 B 0.93-0.97x. (All figures: both
 * libraries alternating in the same processes.) ls_reduce tries it first. Returns 0, or
 * -1 (nothing done) for other dtypes, more elements or fewer than two inputs. */
#define LS_FEW_WORDS 32
#define LS_FEW_HALVES 64 /* bf16 elements; a tiny allreduce has 50 or fewer */
int ls_reduce_few(lockstep_dtype_t dt, lockstep_op_t op, void *out, const void *const *in, int nin, size_t n);

/* LOCKSTEP_ISA's cap on the kernels (0 base, 1 avx2, 2 avx512; unset: 2), or -1 with
 * *bad (if bad) pointing at the value it does not know */
int ls_isa_cap(const char **bad);
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
