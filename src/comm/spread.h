/* Which CPU a rank should move to so that no CPU runs more ranks than its share.
 * Header-only and free of the communicator, so that tests can check the plan itself
 * (spread.c acts on it).
 *
 * where[r] is the CPU rank r announced the call from, use[r] how much of that CPU it
 * had since the last check, in thousandths (LS_SPREAD_ALL: nothing else ran there);
 * cpus the CPUs this rank may run on, ascending; cap the ranks each may hold
 * (ceil(size / ncpus)). On every CPU that holds more than cap, the ranks past the
 * first cap, in rank order, are extra. A CPU has free places (cap less the ranks on
 * it) only if the ranks on it had nearly all of it (their use adds up to
 * LS_SPREAD_OURS or more): a CPU with no rank on it, or that ran something else too,
 * may be busy with other work, and a rank moved there would wait for that work's time
 * slices (a busy loop on the other CPU of 2: 0.8-2 ms per 4-byte allreduce instead of
 * 2.6 us). The k-th extra rank overall takes the k-th free place, in CPU order. Every
 * rank that computes this from the same where[] and use[] and the same CPUs names the
 * same movers and sends them to different places.
 * Returns the CPU rank `me` should move to, or -1: it stays (it is not extra, no place
 * is free, or some rank runs on a CPU not in cpus: then nothing is planned). */
#ifndef LOCKSTEP_COMM_SPREAD_H
#define LOCKSTEP_COMM_SPREAD_H

#define LS_SPREAD_ALL 1000
#define LS_SPREAD_OURS 900

static inline int ls_spread_count(const int *where, int upto, int cpu)
{
    int n = 0;
    for (int r = 0; r < upto; r++)
        n += where[r] == cpu;
    return n;
}

static inline int ls_spread_target(const int *where, const int *use, int size, int me, const int *cpus,
                                   int ncpus, int cap)
{
    if (cap < 1 || ncpus < 1)
        return -1;
    int extra = 0, mine = -1; /* extra ranks before me; my index among them */
    for (int r = 0; r < size; r++) {
        int known = 0;
        for (int i = 0; i < ncpus && !known; i++)
            known = cpus[i] == where[r];
        if (!known)
            return -1;
        if (ls_spread_count(where, r, where[r]) >= cap) { /* cap ranks before r are there */
            if (r == me)
                mine = extra;
            extra++;
        }
    }
    if (mine < 0)
        return -1;
    for (int i = 0; i < ncpus; i++) {
        int ours = 0;
        for (int r = 0; r < size; r++)
            ours += where[r] == cpus[i] ? use[r] : 0;
        int free = ours >= LS_SPREAD_OURS ? cap - ls_spread_count(where, size, cpus[i]) : 0;
        if (free > mine)
            return cpus[i];
        if (free > 0)
            mine -= free;
    }
    return -1;
}

#endif
