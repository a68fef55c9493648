/* The shared segment of a communicator: its layout, and the call protocol on it.
 *
 *   [hdr: one line, written by rank 0 before magic]
 *   [state: one line: joined counter, failure code]
 *   [barrier: lockstep_barrier_t, AUTO, process-shared, `size` participants]
 *   [ctl[r]: three lines per rank: own words | announcement 0 | announcement 1]
 *   [data[r]: small[0] small[1] chunk[0] chunk[1] eager ring (LS_EAGER_DEPTH entries,
 *             none without eager broadcasts) per rank]
 *   [buf[r]: params.buffer_bytes per rank, for zero-copy calls (lockstep_comm_buffer)]
 *
 * Call protocol (call.c): a call numbered s writes its descriptor into ann[s & 1],
 * publishes ann[s & 1].seq = s, waits for every rank's ann[s & 1].seq to reach s and
 * compares their descriptors with its own. Tiny payloads ride in the announcement
 * (ann.data), small ones in small[s & 1]; a rank reuses either only at call s + 2, by
 * which time every rank has announced s + 1 and so finished reading call s. Large
 * payloads go through the chunk slots in steps: every rank publishes own.step = t and
 * waits for all ranks to reach t before reading what they wrote before it. A large
 * call may write its first chunk before announcing, into a slot no peer can still be
 * reading for the previous call (lockstep_comm.busy, which every rank tracks alike).
 * The large broadcast uses the same words as a pipeline, waiting on the root only
 * (broadcast.c); every call leaves every rank's step count equal. Eager broadcasts
 * (eager.c) use neither announcements nor steps: their own ring, and a settling wait
 * before the next call. */
#ifndef LOCKSTEP_COMM_SEGMENT_H
#define LOCKSTEP_COMM_SEGMENT_H

#include <stddef.h>
#include <stdint.h>

#include "lockstep/comm.h"
#include "../internal.h"

/* A segment's header starts with "lsc" and the protocol in the low byte: a rank of
 * another build refuses to join (EPROTO) instead of misreading the segment. 0x75 is the
 * protocol of release 0.1.0; any change of the segment's layout or of the protocol on
 * it takes a new value. */
#define LS_MAGIC_BASE 0x6c736300u
#define LS_PROTOCOL 0x75u
#define LS_COMM_MAGIC (LS_MAGIC_BASE | LS_PROTOCOL)
static inline int ls_is_segment(uint32_t magic)
{
    return (magic & ~0xffu) == LS_MAGIC_BASE;
}
#define LS_LINE LOCKSTEP_CACHELINE
#define LS_HW_LINE 64 /* a hardware cache line: LS_LINE spans two */

enum ls_call {
    LS_CALL_ALLREDUCE = 1,
    LS_CALL_BROADCAST,
    LS_CALL_ALLGATHER,
    LS_CALL_BARRIER,
    LS_CALL_REDUCE_SCATTER,
    LS_CALL_ALLTOALL,
    LS_CALL_REFUSED /* ls_comm_refuse: this rank's arguments were invalid */
};

typedef struct ls_seg_hdr {
    uint32_t magic, size;
    int32_t creator_pid;
    uint32_t creator_ns; /* its PID namespace (liveness.c): its pid means nothing elsewhere */
    uint64_t small_bytes, chunk_bytes, data_stride;
    uint32_t step_bytes; /* the large allreduce's step: chunk_bytes, or less when oversubscribed */
    uint32_t relay_bytes; /* a zero-copy PUSH broadcast among 3+ ranks is relayed from here */
    uint64_t allreduce_small; /* an allreduce up to this size takes the small path */
    uint64_t off_barrier, off_ctl, off_data, total;
    uint64_t buffer_bytes, off_buf; /* the ranks' zero-copy buffers (lockstep_comm_buffer) */
    uint64_t eager_bytes, eager_stride; /* eager broadcasts (eager.c): largest payload, entry size */
    uint64_t exchange_small; /* a reduce-scatter or all-to-all up to this total takes the small path */
} ls_seg_hdr_t;
_Static_assert(sizeof(ls_seg_hdr_t) <= LS_LINE, "the header must fit its line, before state");

typedef struct ls_seg_state {
    lockstep_waitword_t joined; /* ranks that have mapped the segment */
    uint32_t failed;            /* first failure (positive code), 0 while healthy */
    uint32_t far;               /* the ranks sit far apart, as rank 0 last judged (distance.c) */
    uint32_t round_trip_ns;     /* the round trip it judged from, 0 until measured */
    uint32_t probe_call;        /* a call rank 0 named for the next probe (distance.c) */
    char pad[LS_HW_LINE - sizeof(lockstep_waitword_t) - 4 * sizeof(uint32_t)];
    uint32_t ping;              /* the probe's word, on a line no call reads (distance.c) */
} ls_seg_state_t;
_Static_assert(sizeof(ls_seg_state_t) <= LS_LINE, "the state is one line");

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

/* One announcement: the sequence number a rank waits on, the descriptor, the CPU the
 * rank announced from (-1 unless ranks outnumber CPUs; see wait_peers in call.c) and,
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
 * it straddles the two lines; a larger one fills data from its start. */
#define LS_INLINE_HEAD (LS_HW_LINE - offsetof(ls_announce_t, data) % LS_HW_LINE)
_Static_assert(LS_INLINE_HEAD + LS_HW_LINE <= LS_INLINE_BYTES, "the second line lies inside data");
static inline size_t ls_inline_at(size_t bytes)
{
    return bytes > LS_INLINE_HEAD && bytes <= LS_HW_LINE ? LS_INLINE_HEAD : 0;
}

typedef struct ls_ctl {
    struct {
        uint64_t base;            /* where the segment lies in this rank (kernel-copy reads) */
        int32_t pid, cpu;         /* cpu: at create, for ORDER_TOPOLOGY */
        lockstep_waitword_t step; /* last data step finished */
        int32_t where;            /* the CPU of the last step, as in ls_announce_t */
        uint32_t eager_seq;       /* the eager broadcast I am in or was last in (eager.c) */
        int32_t eager_root;       /* its root, as I called it */
        lockstep_waitword_t done; /* the last eager broadcast I finished */
        int32_t fences;           /* at create: registered for global membarrier (create.c) */
        int32_t kcopy_into;       /* 1 + the rank my kernel-copy write goes into, or 0 (kcopy.c) */
        uint32_t pid_ns;          /* the PID namespace pid is in (liveness.c), written after it */
        uint32_t left;            /* 1: freed its communicator (its liveness lock goes too) */
        char pad[LS_LINE - 44 - 2 * sizeof(lockstep_waitword_t)];
    } own;
    ls_announce_t ann[2];         /* call s uses ann[s & 1] */
} ls_ctl_t;
_Static_assert(sizeof(ls_ctl_t) == 3 * LS_LINE, "three lines per rank");

/* Zero-copy calls post where their buffers lie in the rank's shared buffer, as offsets
 * into it, in the announcement's data (which only inline payloads use otherwise) */
#define LS_NO_OFFSET UINT64_MAX
struct ls_zc_offsets {
    uint64_t send, recv;
};
_Static_assert(sizeof(struct ls_zc_offsets) <= LS_INLINE_BYTES, "offsets ride in the announcement");

/* One entry of rank r's eager ring (eager.c): seq, the descriptor, then the payload */
typedef struct ls_eager_entry {
    lockstep_waitword_t seq;
    ls_desc_t desc;
    unsigned char data[];
} ls_eager_entry_t;

#endif
