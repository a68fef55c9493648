/* The call protocol every collective runs on (segment.h): announce a call and verify
 * that every rank announced the same one, steps between the phases of a large call,
 * the peer orders, the barrier, refusals and tags. */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "comm_impl.h"
#include "../wait/loop.h"

/* Waiting for peers when ranks outnumber CPUs. The wait policy then yields at once,
 * which is right while a peer that has not arrived needs this CPU. But when every
 * missing peer last ran on another CPU, waiting's rule (the elsewhere hook of
 * src/wait/loop.h) spins first, then waits as usual. Where a rank runs is a hint it
 * publishes next to the word peers wait on (ann.where for announcements, own.where for
 * steps); -1, unknown, counts as this CPU. */
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
        int where = ls_cpu_hint(c, r, pw.where);
        if (where < 0 || where == cpu)
            return 0;
    }
    return 1;
}

/* Wait until every other rank's word has reached t. *deadline is read from the clock
 * only once some peer is missing (LS_NO_DEADLINE_YET until then). */
#define LS_NO_DEADLINE_YET UINT64_MAX

/* One missing peer's wait, in waiting's one shape (src/wait/loop.h): no spin of its
 * own, the elsewhere rule while every missing peer runs on another CPU, then the
 * collectives' wait for the word (spin, yield, park in slices, with the deadline and
 * the liveness checks), which ends it or fails it. */
struct peer_wait {
    lockstep_comm_t *c;
    lockstep_waitword_t *w;
    struct ls_peer_words pw;
    uint32_t t;
    int r, cpu, rc;
    uint64_t deadline;
};

static bool peer_done(void *arg)
{
    struct peer_wait *p = arg;
    return p->rc != 0 || ls_reached(ls_load_acquire(&p->w->value), p->t);
}

static bool peer_elsewhere(void *arg)
{
    struct peer_wait *p = arg;
    return p->cpu >= 0 && all_missing_elsewhere(p->c, p->pw, p->t, p->cpu);
}

static void peer_park(void *arg)
{
    struct peer_wait *p = arg;
    int rc = ls_comm_wait_word(p->c, p->r, p->w, p->t, p->deadline);
    p->rc = rc ? rc : 1; /* 1: reached (the word is checked again) */
}

static const struct ls_wait_hooks peer_hooks = {peer_done, NULL, peer_elsewhere, peer_park};

static int wait_peers(lockstep_comm_t *c, struct ls_peer_words pw, uint32_t t, int cpu, uint64_t *deadline)
{
    static const lockstep_wait_t parks; /* no flags: past the elsewhere spin, peer_park */
    for (int r = 0; r < c->size; r++) {
        if (r == c->rank)
            continue;
        lockstep_waitword_t *w = peer_word(c, r, pw);
        if (ls_reached(ls_load_acquire(&w->value), t))
            continue;
        if (*deadline == LS_NO_DEADLINE_YET)
            *deadline = ls_comm_deadline(c);
        struct peer_wait p = {c, w, pw, t, r, cpu, 0, *deadline};
        ls_wait_loop(&parks, 0, 0, &peer_hooks, &p);
        if (p.rc < 0)
            return p.rc;
    }
    return 0;
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
    ls_store_relaxed(&a->where, cpu);
    /* release: the descriptor and any payload (ann.data, small[s & 1]) before seq */
    lockstep_wait_publish(&c->wait, &a->seq, s);
    if (!wait_all)
        return 0;
    /* a missing peer's where is from its last call */
    size_t now = offsetof(ls_ctl_t, ann) + (s & 1) * sizeof(ls_announce_t);
    size_t last = offsetof(ls_ctl_t, ann) + ((s - 1) & 1) * sizeof(ls_announce_t);
    struct ls_peer_words pw = {now + offsetof(ls_announce_t, seq), last + offsetof(ls_announce_t, where)};
    uint64_t deadline = LS_NO_DEADLINE_YET;
    if ((rc = wait_peers(c, pw, s, cpu, &deadline)) != 0)
        return rc;
    if ((rc = ls_comm_verify(c)) != 0)
        return rc;
    /* every rank reads the same hints, so rank 0 and its partner probe together */
    if (LS_UNLIKELY(ls_distance_due(c, s)))
        ls_distance_probe(c, ls_distance_partner(c, now + offsetof(ls_announce_t, where)),
                          lockstep_now_ns() + LS_PROBE_GIVE_UP_NS);
    return 0;
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
        ls_store_relaxed(&me->own.where, sched_getcpu());
    lockstep_wait_publish(&c->wait, &me->own.step, t);
}

int ls_comm_wait_steps(lockstep_comm_t *c, uint32_t t, uint64_t deadline)
{
    struct ls_peer_words pw = {offsetof(ls_ctl_t, own.step), offsetof(ls_ctl_t, own.where)};
    int cpu = track_cpu(c) ? ls_load_relaxed(&ls_ctl(c, c->rank)->own.where) : -1;
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

/* One episode of the thread layer's barrier in the segment, waited in slices with the
 * same liveness checks as every wait. */
static int barrier_episode(lockstep_comm_t *c)
{
    unsigned tid = (unsigned)c->rank;
    int rc = lockstep_barrier_arrive(c->barrier, tid);
    uint64_t deadline = ls_comm_deadline(c);
    while (rc == 0 && (rc = lockstep_barrier_wait_until(c->barrier, tid, ls_slice_end(deadline))) == -ETIMEDOUT) {
        rc = ls_between_slices(c, -1, deadline);
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
