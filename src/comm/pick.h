/* Choosing between two ways of making the same call by timing both: the slots or
 * single copy, for large allreduces, allgathers and all-to-alls where kernel copies
 * are slow, allreduces from 64 KiB, allgathers of 16 KiB blocks or more on the small
 * path and 2-rank broadcasts of 16-64 KiB and past 512 KiB (the classes:
 * LS_PICK_ALLREDUCE in comm_impl.h).
 *
 * Which way wins can change while a job runs, not only from one machine to the next.
 * On the 2-vCPU AMD EPYC VM where kernel copies are slow, the host moves the two vCPUs
 * about: in most stretches a cache line goes from one to the other and back in 52-72
 * ns, but for seconds at a time it takes 210-285 ns (the vCPUs on cores far apart).
 * The slots hand every byte from one CPU's cache to the other's, and in those
 * stretches took 2.4-4.7x their usual time (medians); single copy reads what the peer's CPU
 * has not just written, and kept its time. 2 ranks, f32, 10 runs of 12 rounds (a
 * throwaway harness: per round, the round trip, then the median of 3 calls per way
 * and of MPI_Allreduce, in the same processes; the data barely changes between
 * calls, which flatters single copy at 1 MiB); median (quartiles) in us:
 *
 *   round trip            1 MiB                 4 MiB             16 MiB
 *   52-72 ns, 101 rounds  slots 149 (141-163)   467 (403-522)     2893 (2789-3120)
 *                         single 122 (110-129)  538 (508-626)     4192 (4017-4464)
 *                         MPI 145 (141-151)     602 (577-642)     5815 (5496-6235)
 *   215-283 ns, 17        slots 357 (349-544)   2183 (2107-2221)  9355 (9215-9580)
 *                         single 144 (140-147)  526 (486-608)     4405 (4172-4759)
 *                         MPI 580 (577-632)     2430 (2343-2591)  6700 (6104-7464)
 *
 * So the ways are timed as the job runs, on the rank whose offer decides (rank 0; a
 * broadcast's receiver: see allreduce.c and gather.c). Calls fall into classes (by
 * size; each class keeps its own record) and a way's cost is per byte, so that sizes
 * within a class compare. A way's estimate is the lowest of its last LS_PICK_KEEP
 * costs: a call that a preemption, page faults or a cold cache made slow does not
 * count against its way, while a way that has really become slower shows it after
 * LS_PICK_KEEP calls. Each way runs LS_PICK_FIRST times in a row before either is
 * preferred (the slots first), and the cheaper is preferred. From then on the
 * preferred way runs, and the other in a look of LS_PICK_LOOK_CALLS calls in a row
 * once every `every` calls of the class, to see whether it has become cheaper:
 * LS_PICK_EVERY_MIN calls after the preference changes, twice as many after each
 * look that leaves it as it was, up to LS_PICK_EVERY_MAX, or farther for a way much
 * dearer (ls_pick_every_max: in a long stretch of one state the looks add at most
 * about 1/32 to the calls' cost; a way 5x dearer is looked at every 512 calls, one
 * 11x dearer every 1024). The preference changes only when the other way's estimate
 * is lower by more than 1/LS_PICK_MARGIN of the preferred's, so that two ways that
 * nearly tie do not take turns on noise.
 *
 * Why a look, and the first calls, run a way several times in a row: the first calls
 * after a change of way pay for moving the lines of the user's buffers and of the
 * slots to where the new way keeps them, and with data that changes little between
 * calls the later calls do not pay it. 2 ranks, f32, 1 MiB out of place, unchanged
 * data, the ways forced in a fixed pattern (a throwaway harness, medians of 8 calls
 * per place in the pattern, 6 rounds in each state):
 *   usual (round trip 66-67 ns; rank 0's costs in ps per byte):
 *     single copy 125-138 steady, 142-169 in its first call;
 *     the slots 78-84 steady; after single copy, 87-124 in their first call,
 *     107-147 in their second and 85-97 in their third;
 *   apart (round trip 229-267 ns; calls in us):
 *     the slots 500-740;
 *     single copy 400-744 in its first call, 123-178 in its second and 108-143 in
 *     its third.
 * One call overstated the slots' steady cost by up to 1.9x in the usual state, and in
 * the apart state a look of one call found single copy dearer than the slots while
 * it was 3.5x cheaper or more: a class stayed with the way it had after the state
 * that made it cheaper had passed. Every call of a look is recorded, and the
 * estimate, the lowest, is the steadiest call's.
 *
 * Header-only and free of the communicator, so that tests can check the choices on
 * costs written out (tests/comm/test_comm_pick.c). */
#ifndef LOCKSTEP_COMM_PICK_H
#define LOCKSTEP_COMM_PICK_H

#include <stdint.h>

#define LS_PICK_KEEP 3        /* costs kept per way; its estimate is their lowest */
#define LS_PICK_LOOK_CALLS 3  /* calls in a row of the other way in a look */
#define LS_PICK_FIRST LS_PICK_LOOK_CALLS /* times each way runs in a row before either is
                                            preferred: a look's run, for the same reason */
#define LS_PICK_MARGIN 5        /* the other way must be cheaper by a fifth to take over */
#define LS_PICK_EVERY_MIN 8u
#define LS_PICK_EVERY_MAX 128u  /* a way under 3x dearer: a look every 128 calls at most */
#define LS_PICK_LOOK_SHARE 32u  /* farther apart for a dearer way: at most 1/32 more */
#define LS_PICK_EVERY_CAP 1024u /* ... up to every 1024 calls */
#define LS_PICK_NONE UINT64_MAX /* the cost of a way that could not run */

typedef struct ls_pick {
    uint64_t cost[2][LS_PICK_KEEP]; /* per way, the last costs, newest first */
    uint32_t calls;                 /* calls of the class so far */
    uint32_t last[2];               /* per way, `calls` when it last ran */
    uint32_t every;                 /* 0 until both ways have run LS_PICK_FIRST times */
    uint8_t n[2];                   /* per way, costs kept */
    uint8_t pref;                   /* the preferred way, once `every` is set */
    uint8_t look;                   /* calls of the look under way (0: none) */
} ls_pick_t;

/* A way's estimate: the lowest of its kept costs (LS_PICK_NONE: never timed) */
static inline uint64_t ls_pick_estimate(const ls_pick_t *p, int way)
{
    uint64_t low = LS_PICK_NONE;
    for (int i = 0; i < p->n[way]; i++)
        low = p->cost[way][i] < low ? p->cost[way][i] : low;
    return low;
}

/* How far apart the looks at the other way may grow, where its estimate is `other`
 * and the preferred's `mine`: each of a look's LS_PICK_LOOK_CALLS calls costs
 * other - mine more than a call the preferred way, so they may grow until that adds
 * at most 1/LS_PICK_LOOK_SHARE to the calls' cost, and at least to LS_PICK_EVERY_MAX.
 * A way that could not run costs nothing to look at (the call goes the other way),
 * and keeps the least. */
static inline uint32_t ls_pick_every_max(uint64_t mine, uint64_t other)
{
    if (other == LS_PICK_NONE || other <= mine)
        return LS_PICK_EVERY_MAX;
    uint64_t extra = (other - mine) / (mine ? mine : 1); /* whole times mine */
    if (extra >= LS_PICK_EVERY_CAP / (LS_PICK_LOOK_SHARE * LS_PICK_LOOK_CALLS))
        return LS_PICK_EVERY_CAP;
    uint32_t want = (uint32_t)extra * LS_PICK_LOOK_SHARE * LS_PICK_LOOK_CALLS;
    return want > LS_PICK_EVERY_MAX ? want : LS_PICK_EVERY_MAX;
}

/* The way for the class's next call (0 for a class never recorded) */
static inline int ls_pick_next(const ls_pick_t *p)
{
    if (p->n[0] < LS_PICK_FIRST || p->n[1] < LS_PICK_FIRST)
        return p->n[0] < LS_PICK_FIRST ? 0 : 1;
    if (p->look)
        return !p->pref; /* the look goes on */
    return p->calls - p->last[!p->pref] >= p->every ? !p->pref : p->pref;
}

/* Record a call of the class that went `way` (0 or 1) at `cost` (LS_PICK_NONE: the
 * way could not run; it is then tried again only as a look, and that look ends at
 * once). Returns the way for the class's next call. */
static inline int ls_pick_record(ls_pick_t *p, int way, uint64_t cost)
{
    for (int i = LS_PICK_KEEP - 1; i > 0; i--)
        p->cost[way][i] = p->cost[way][i - 1];
    p->cost[way][0] = cost;
    if (cost == LS_PICK_NONE) /* forget what it cost when it could run */
        for (int i = 1; i < LS_PICK_KEEP; i++)
            p->cost[way][i] = cost;
    if (p->n[way] < LS_PICK_KEEP)
        p->n[way]++;
    if (cost == LS_PICK_NONE && p->n[way] < LS_PICK_FIRST)
        p->n[way] = LS_PICK_FIRST;
    p->last[way] = ++p->calls;
    if (p->n[0] < LS_PICK_FIRST || p->n[1] < LS_PICK_FIRST)
        return ls_pick_next(p);
    uint64_t mine = ls_pick_estimate(p, p->pref), other = ls_pick_estimate(p, !p->pref);
    if (!p->every) {
        p->pref = (uint8_t)(other < mine ? !p->pref : p->pref);
        p->every = LS_PICK_EVERY_MIN;
    } else if (other < mine - mine / LS_PICK_MARGIN) {
        p->pref = (uint8_t)!p->pref; /* the other way is clearly cheaper now */
        p->every = LS_PICK_EVERY_MIN;
        p->look = 0;
    } else if (way != p->pref) {
        if (++p->look < LS_PICK_LOOK_CALLS && cost != LS_PICK_NONE)
            return ls_pick_next(p); /* the look's next call */
        p->look = 0;
        if (p->every < ls_pick_every_max(mine, other))
            p->every *= 2; /* the look left the preference as it was */
    }
    return ls_pick_next(p);
}

#endif
