/* Keeping ranks spread over the CPUs (src/comm/spread.c).
 *
 *   plan     the plan itself (spread.h), on placements written out: who moves where,
 *            and that nobody moves onto a CPU that something else may be using;
 *   stacked  4 ranks on 2 CPUs, started 3 on one and 1 on the other, run collectives
 *            long enough for several checks: every result is right and every rank's
 *            CPU set is, afterwards, exactly what it was (a move binds the thread to
 *            one CPU and must give the set back).
 * Where the ranks end up is the scheduler's to change at any time, so it is not
 * asserted; the plan is. Whether a rank moves in `stacked` is the scheduler's too: in
 * 8 of 12 runs one did (at the first check, call 16); in the others the scheduler had
 * spread them first. CI runs it in five builds. */
#define _GNU_SOURCE
#include <sched.h>

#include "comm_harness.h"
#include "../../src/comm/spread.h"

#define ALL LS_SPREAD_ALL

/* where/use for size ranks; returns each rank's target in out[] */
static void plan(const int *where, const int *use, int size, const int *cpus, int ncpus, int *out)
{
    int cap = (size + ncpus - 1) / ncpus;
    for (int r = 0; r < size; r++)
        out[r] = ls_spread_target(where, use, size, r, cpus, ncpus, cap);
}

static void check_plan(const int *where, const int *use, int size, const int *cpus, int ncpus, const int *want)
{
    int got[16];
    plan(where, use, size, cpus, ncpus, got);
    for (int r = 0; r < size; r++)
        if (got[r] != want[r]) {
            fprintf(stderr, "rank %d: target %d, want %d\n", r, got[r], want[r]);
            exit(1);
        }
}

static int test_plan(void)
{
    const int two[] = {3, 7}; /* CPU numbers need not start at 0 nor be adjacent */
    const int none4[] = {-1, -1, -1, -1};
    {   /* 3 + 1, the lone rank had its CPU to itself: the last rank of the three moves */
        int where[] = {3, 3, 3, 7}, use[] = {300, 300, 300, ALL}, want[] = {-1, -1, 7, -1};
        check_plan(where, use, 4, two, 2, want);
    }
    {   /* the same, ranks in another order: the extra one is the highest rank on 7 */
        int where[] = {7, 3, 7, 7}, use[] = {300, ALL, 300, 300}, want[] = {-1, -1, -1, 3};
        check_plan(where, use, 4, two, 2, want);
    }
    {   /* the lone rank shared its CPU with something else: nobody moves there */
        int where[] = {3, 3, 3, 7}, use[] = {300, 300, 300, 500};
        check_plan(where, use, 4, two, 2, none4);
    }
    {   /* 4 + 0: no rank shows that CPU 7 is free, so nobody moves */
        int where[] = {3, 3, 3, 3}, use[] = {250, 250, 250, 250};
        check_plan(where, use, 4, two, 2, none4);
    }
    {   /* balanced: nobody moves, whatever the use */
        int where[] = {3, 7, 3, 7}, use[] = {ALL, 0, 0, ALL};
        check_plan(where, use, 4, two, 2, none4);
    }
    {   /* a rank on a CPU this rank may not use: no plan at all */
        int where[] = {3, 3, 3, 9}, use[] = {300, 300, 300, ALL};
        check_plan(where, use, 4, two, 2, none4);
    }
    {   /* 8 ranks, 6 + 2: cap 4; the two ranks on 7 had it between them (500 + 450 of
         * 1000), so the 5th and 6th on 3 (ranks 5 and 7) move */
        int where[] = {3, 3, 7, 3, 3, 3, 7, 3}, use[] = {0, 0, 500, 0, 0, 0, 450, 0};
        int want[] = {-1, -1, -1, -1, -1, 7, -1, 7};
        check_plan(where, use, 8, two, 2, want);
    }
    {   /* the same, but 7 was not all theirs (400 + 450): nobody moves */
        int where[] = {3, 3, 7, 3, 3, 3, 7, 3}, use[] = {0, 0, 400, 0, 0, 0, 450, 0};
        int want[] = {-1, -1, -1, -1, -1, -1, -1, -1};
        check_plan(where, use, 8, two, 2, want);
    }
    {   /* 7 + 1 on 2: cap 4, so three extra ranks (4, 5, 6) and three places on 7 */
        int where[] = {3, 3, 3, 3, 3, 3, 3, 7}, use[] = {0, 0, 0, 0, 0, 0, 0, ALL};
        int want[] = {-1, -1, -1, -1, 7, 7, 7, -1};
        check_plan(where, use, 8, two, 2, want);
    }
    {   /* 3 CPUs, 6 ranks (cap 2), 5 + 1 + 0: three extra ranks (2, 3, 4) but one place
         * shown (on 1; 2 has no rank to show it free): only the first extra moves */
        const int three[] = {0, 1, 2};
        int where[] = {0, 0, 0, 0, 0, 1}, use[] = {0, 0, 0, 0, 0, ALL}, want[] = {-1, -1, 1, -1, -1, -1};
        check_plan(where, use, 6, three, 3, want);
    }
    {   /* 3 CPUs, 6 ranks (cap 2), 4 + 1 + 1: the two extra ranks fill one place on
         * each short CPU, in CPU order */
        const int three[] = {0, 1, 2};
        int where[] = {0, 1, 0, 0, 2, 0}, use[] = {0, ALL, 0, 0, ALL, 0}, want[] = {-1, -1, -1, 1, -1, 2};
        check_plan(where, use, 6, three, 3, want);
    }
    {   /* bad shapes: no CPUs, cap 0 */
        int where[] = {0, 0}, use[] = {ALL, ALL};
        const int one[] = {0};
        CHECK_EQ(ls_spread_target(where, use, 2, 1, one, 0, 1), -1);
        CHECK_EQ(ls_spread_target(where, use, 2, 1, one, 1, 0), -1);
    }
    return 0;
}

/* ---- stacked ------------------------------------------------------------------------ */

static cpu_set_t two_cpus;
static int cpu_a, cpu_b;

static int bind_to(int cpu)
{
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    return sched_setaffinity(0, sizeof one, &one);
}

static int stacked_rank(int rank, int size, const char *job)
{
    /* 3 ranks on cpu_a, 1 on cpu_b, each free to run on both afterwards */
    CHECK_EQ(bind_to(rank < 3 ? cpu_a : cpu_b), 0);
    CHECK_EQ(sched_setaffinity(0, sizeof two_cpus, &two_cpus), 0);
    lockstep_comm_t *c = harness_comm(rank, size, job, 60000);
    CHECK(c != NULL);
    int32_t v[256], want = size * (size + 1) / 2;
    for (int i = 0; i < 600; i++) {
        int n = i % 3 == 2 ? 256 : 1; /* tiny (in the announcement) and small */
        for (int k = 0; k < n; k++)
            v[k] = rank + 1;
        CHECK_EQ(lockstep_comm_allreduce(c, v, v, (size_t)n, LOCKSTEP_I32, LOCKSTEP_SUM), 0);
        for (int k = 0; k < n; k++)
            CHECK_EQ(v[k], want);
        if (i % 50 == 0)
            CHECK_EQ(lockstep_comm_barrier(c), 0);
    }
    lockstep_comm_free(c);
    cpu_set_t now;
    CHECK_EQ(sched_getaffinity(0, sizeof now, &now), 0);
    CHECK(CPU_EQUAL(&now, &two_cpus));
    return 0;
}

static int test_stacked(void)
{
    cpu_set_t set;
    CHECK_EQ(sched_getaffinity(0, sizeof set, &set), 0);
    cpu_a = cpu_b = -1;
    for (int cpu = 0; cpu < CPU_SETSIZE && cpu_b < 0; cpu++)
        if (CPU_ISSET(cpu, &set)) {
            if (cpu_a < 0)
                cpu_a = cpu;
            else
                cpu_b = cpu;
        }
    if (cpu_b < 0) {
        fprintf(stderr, "skip: one CPU\n");
        return TEST_SKIP;
    }
    /* 2 CPUs for the whole job, before anything counts them, so that 4 ranks outnumber
     * them on any machine */
    CPU_ZERO(&two_cpus);
    CPU_SET(cpu_a, &two_cpus);
    CPU_SET(cpu_b, &two_cpus);
    CHECK_EQ(sched_setaffinity(0, sizeof two_cpus, &two_cpus), 0);
    harness_run_clean(stacked_rank, 4, "spread", 120, 0);
    return 0;
}

int main(int argc, char **argv)
{
    watchdog(300);
    const char *what = argc > 1 ? argv[1] : "";
    if (strcmp(what, "plan") == 0)
        return test_plan();
    if (strcmp(what, "stacked") == 0)
        return test_stacked();
    fprintf(stderr, "usage: %s plan|stacked\n", argv[0]);
    return 1;
}
