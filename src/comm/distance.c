/* How far apart the ranks sit: the time a cache line takes to go from rank 0 to its
 * partner and back (rank 1, or where ranks outnumber the CPUs one on another CPU:
 * ls_distance_partner). It is what decides between the routes that move a block once,
 * through the kernel, and the slots, which move every line between the CPUs twice
 * (tuning.h): on one die that costs little, across sockets, core complexes, or vCPUs a
 * host has placed apart, several times more. It is a probe of the machine's state, not
 * a race between two routes: it measures no route, and every rank reads one judgement.
 *
 * Rank 0 and the partner bounce state.ping: rank 0 stores an odd value, the partner
 * answers with the next even one. Each probe has its own range of values (from its
 * number), so a late answer to a probe given up never counts in the next one. Rank 0
 * judges from the fastest group of LS_PROBE_GROUP round trips and stores state.far and
 * state.round_trip_ns; every rank reads state.far when it chooses a route (ls_far).
 * Rank 0's params.distance, and over it LOCKSTEP_COMM_DISTANCE (close or far, in rank
 * 0's environment), override the judgement; the round trip is still measured. */
#include <stdlib.h>
#include <strings.h>

#include "comm_impl.h"
#include "../wait/kernel.h"

/* Spin until *w holds want, or until the clock passes until: 1 got it, 0 gave up.
 * After spin PAUSE rounds it yields between checks: where ranks outnumber the CPUs the
 * partner may be waiting for this CPU, and a round trip that long judges nothing. */
static int await_ping(const uint32_t *w, uint32_t want, uint64_t until, uint32_t spin)
{
    for (uint32_t i = 1; ls_load_acquire(w) != want; i++) {
        if (i < spin)
            ls_cpu_relax();
        else
            ls_yield();
        if (!(i & (i < spin ? 255u : 15u)) && lockstep_now_ns() >= until)
            return 0;
    }
    return 1;
}

int ls_distance_env(const char **bad)
{
    const char *s = getenv("LOCKSTEP_COMM_DISTANCE");
    if (!s || !*s || strcasecmp(s, "auto") == 0)
        return -2;
    if (strcasecmp(s, "close") == 0)
        return 0;
    if (strcasecmp(s, "far") == 0)
        return 1;
    if (bad)
        *bad = s;
    return -1;
}

/* Rank 0's side: one group of round trips from value v on, its mean in ns (0: gave up) */
static uint64_t group(uint32_t *w, uint32_t v, uint64_t until, uint32_t spin)
{
    uint64_t t0 = lockstep_now_ns();
    for (uint32_t i = 0; i < LS_PROBE_GROUP; i++, v += 2) {
        ls_store_release(w, v + 1);
        if (!await_ping(w, v + 2, until, spin))
            return 0;
    }
    uint64_t mean = (lockstep_now_ns() - t0) / LS_PROBE_GROUP;
    return mean ? mean : 1;
}

/* Rank 0: store the judgement from a round trip of best ns (0: none measured, where
 * only a forced setting changes it) */
static void judge(lockstep_comm_t *c, uint64_t best)
{
    int forced = ls_distance_env(NULL);
    forced = forced >= 0 ? forced : c->distance != LOCKSTEP_DISTANCE_AUTO ? c->distance : -1;
    if (best)
        ls_store_relaxed(&c->state->round_trip_ns, (uint32_t)(best < UINT32_MAX ? best : UINT32_MAX));
    if (forced >= 0 || best)
        ls_store_relaxed(&c->state->far, (uint32_t)(forced >= 0 ? forced : best >= LS_FAR_NS));
}

/* Rank 0's side of one probe from value v: the fastest group's mean, 0 if the partner
 * did not answer in time or, where ranks outnumber the CPUs (share), if every group
 * timed a process switch (the partner ran on this CPU) rather than a cache line */
static uint64_t lead(uint32_t *w, uint32_t v, uint64_t give_up_at, int share, uint32_t spin)
{
    ls_store_release(w, v + 1); /* the sync round: the partner is here */
    if (!await_ping(w, v + 2, give_up_at, spin))
        return 0;
    uint64_t best = UINT64_MAX;
    for (uint32_t g = 0; g < LS_PROBE_ROUNDS / LS_PROBE_GROUP; g++) {
        uint64_t mean = group(w, v + 2 + 2 * g * LS_PROBE_GROUP, give_up_at, spin);
        if (!mean)
            return 0;
        best = mean < best ? mean : best;
    }
    return share && best >= LS_PROBE_SWITCH_NS ? 0 : best;
}

/* Where ranks outnumber the CPUs, the first rank on another CPU than rank 0's: a
 * partner on rank 0's own CPU times process switches and its probes are dropped (with
 * rank 1 there, the judgement never moved from its start). Rank 1 otherwise, or where
 * no hint names one. */
int ls_distance_partner(const lockstep_comm_t *c, size_t where)
{
    int zero = ls_fits(c) ? -1 : ls_cpu_hint(c, 0, where);
    for (int r = 1; zero >= 0 && r < c->size; r++) {
        int cpu = ls_cpu_hint(c, r, where);
        if (cpu >= 0 && cpu != zero)
            return r;
    }
    return 1;
}

/* Every LS_PROBE_CALLS-th call, and the call rank 0 named in state.probe_call: in a
 * call whose route follows the distance (it posted for a kernel copy) LS_PROBE_INTERVAL_NS
 * after its last probe, rank 0 names the next one. Its store precedes its announcement
 * of that call, which every rank has acquired when it asks; it stores again only after
 * every rank has announced the call after. */
int ls_distance_due(lockstep_comm_t *c, uint32_t s)
{
    if (!(s & (LS_PROBE_CALLS - 1)) || ls_load_relaxed(&c->state->probe_call) == s)
        return 1;
    if (c->rank == 0 && c->posted_call == s && lockstep_now_ns() - c->probed_ns >= LS_PROBE_INTERVAL_NS)
        ls_store_relaxed(&c->state->probe_call, s + 1);
    return 0;
}

void ls_distance_probe(lockstep_comm_t *c, int partner, uint64_t give_up_at)
{
    if ((c->rank != 0 && c->rank != partner) || c->size < 2)
        return;
    if (c->rank == 0)
        c->probed_ns = lockstep_now_ns();
    int share = !ls_fits(c);
    uint32_t spin = share ? ls_wait_pauses_for(LS_PROBE_SWITCH_NS) : UINT32_MAX;
    _Static_assert(LS_PROBE_ROUNDS % LS_PROBE_GROUP == 0, "whole groups");
    uint32_t *w = &c->state->ping;
    /* this probe's values: one sync round, then the groups (the same on both ranks:
     * c->seq is; wrapping, a range comes back after 2^32 / 34 calls) */
    uint32_t v = c->seq * (2 * LS_PROBE_ROUNDS + 2);
    if (c->rank == 0) {
        judge(c, lead(w, v, give_up_at, share, spin));
        return;
    }
    for (uint32_t i = 0; i <= LS_PROBE_ROUNDS; i++, v += 2) {
        if (!await_ping(w, v + 1, give_up_at, spin))
            return;
        ls_store_release(w, v + 2);
    }
}

int lockstep_comm_distance(const lockstep_comm_t *c, uint32_t *round_trip_ns)
{
    if (!c)
        return -EINVAL;
    if (round_trip_ns)
        *round_trip_ns = ls_load_relaxed(&c->state->round_trip_ns);
    return ls_far(c) ? LOCKSTEP_DISTANCE_FAR : LOCKSTEP_DISTANCE_CLOSE;
}

int lockstep_comm_route(const lockstep_comm_t *c)
{
    return c ? c->route : -EINVAL;
}
