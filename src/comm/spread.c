/* Keeping ranks spread over the CPUs when they outnumber them.
 *
 * With 4 ranks on 2 CPUs the scheduler often settles on 3 ranks on one CPU and 1 on
 * the other, and keeps that: the lone rank waits for the other three most of the time
 * and sleeps, so its CPU looks idle rather than short of work, and the three are always
 * runnable and cache-hot, so none is pulled over. Every call then takes three turns
 * on one CPU instead of two. 4 ranks forked from one process, allreduce in place
 * (median of 11 batches; a run's placement holds for all of them): 4 B 1.8 us against
 * 1.0 with two ranks on each CPU, 4 KiB 4.4 against 3.2, 64 KiB 20.7 against 16.4,
 * 256 KiB 115-123 against 54-56; in 3+1 the lone rank slept 0.55 times per call, the
 * others never. The split came in about half the runs, at every size to 256 KiB.
 *
 * So at every check, every rank publishes how much of its CPU it had since the last
 * one (own.use: all of it if nothing else ran there, not even in a turn it yielded;
 * else its CPU time over the time between the checks), and once every rank has
 * announced (each announcement carries the CPU it was made from: ann.where, see
 * wait_peers in comm.c) every rank works out the same plan (spread.h): which ranks
 * are extra on a CPU past its share, and which CPUs have room, judged by that use. An
 * extra rank moves itself: it binds its thread to the CPU with room, which moves it
 * there at once, and gives the thread its CPU set back, which leaves it where it is;
 * so the thread's affinity is what it was, and the scheduler is free to move it again.
 * Checks come every SPREAD_EVERY calls at first and at twice the interval each time
 * after: up to SPREAD_CALM_MAX calls while no CPU holds more than its share, up to
 * SPREAD_BACKOFF_MAX while one does (a placement nothing can fix, or that something
 * keeps undoing, costs a check every few thousand calls). Every rank counts alike,
 * so all check at the same calls.
 *
 * Same run, same 4 forked ranks, 6 runs each: 4 B 1.05-1.10 us in every run (without:
 * 1.0-1.1 or 1.8-1.9), 4 KiB 3.2-3.3 (3.1-3.3 or 4.4-4.8), 256 KiB 53.8-54.9 (54-57 or
 * 84-123); 8 ranks, 4 B 3.1-3.3 (3.2-6.6), 4 KiB 7.8-8.3 (8.1-15.2). Started by
 * `python -m lockstep.launch -n 4`, 1-float allreduce from Python: 1.35-1.81 us in 9
 * runs, against 1.40-1.44 or 2.81-2.95 without. With the ranks placed well from the
 * start (each bound to a CPU) the checks cost nothing measurable (4 B: 1.055-1.099
 * against 1.051-1.091 us with LOCKSTEP_NO_SPREAD=1). With a busy loop bound to the
 * other CPU (the scheduler keeps all 4 ranks on one), nobody moves: 4 B 2.6-2.8 us
 * against 2.5-2.7; a first version that trusted any CPU with fewer ranks moved ranks
 * onto the busy one and took 0.8-2 ms per call.
 *
 * Only with the auto wait policy while ranks outnumber CPUs (the same condition as
 * the CPU hints themselves), at most SPREAD_MAX_RANKS ranks (the plan is quadratic in
 * them), and not with a pool (its threads share the CPUs in ways the announcements do
 * not show). LOCKSTEP_NO_SPREAD=1 turns it off. */
#define _GNU_SOURCE
#include <sched.h>
#include <sys/resource.h>
#include <time.h>

#include "comm_impl.h"
#include "spread.h"
#include "../common/cpus.h"

#define SPREAD_EVERY 16u
#define SPREAD_MAX_RANKS 64
#define SPREAD_BACKOFF_MAX 4096u
#define SPREAD_CALM_MAX 256u

/* this thread's involuntary process switches so far */
static long switches(void)
{
    struct rusage u;
    return getrusage(RUSAGE_THREAD, &u) == 0 ? u.ru_nivcsw : -1;
}

static uint64_t cpu_ns(void)
{
    struct timespec t;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t) != 0)
        return 0;
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

void ls_comm_spread_init(lockstep_comm_t *c)
{
    c->spread_wait = 0;
    if (c->wait.policy != LOCKSTEP_WAIT_AUTO || c->wait.spin != 0 || c->size > SPREAD_MAX_RANKS || c->pool ||
        ls_env_set("LOCKSTEP_NO_SPREAD"))
        return;
    c->spread_wait = SPREAD_EVERY;
    c->spread_next = SPREAD_EVERY;
    c->spread_switches = switches();
    c->spread_cpu_ns = cpu_ns();
    c->spread_ns = lockstep_now_ns();
}

static int is_check(const lockstep_comm_t *c)
{
    return c->spread_wait && c->seq % SPREAD_EVERY == 0 && (int32_t)(c->seq - c->spread_next) >= 0;
}

void ls_comm_spread_post(lockstep_comm_t *c)
{
    if (!is_check(c))
        return;
    long sw = switches();
    uint64_t cpu = cpu_ns(), now = lockstep_now_ns();
    /* Nothing else took this CPU from me (not even to take a turn when I yielded), or
     * the share of the time I ran. (Another thread than at the last check, or a clock
     * that failed, reads as some other count and as no time run.) */
    uint64_t ran = cpu > c->spread_cpu_ns ? cpu - c->spread_cpu_ns : 0, span = now - c->spread_ns;
    int use = sw >= 0 && sw == c->spread_switches ? LS_SPREAD_ALL
              : span                  ? (int)(ran >= span ? LS_SPREAD_ALL : ran * LS_SPREAD_ALL / span)
                                      : 0;
    __atomic_store_n(&ls_ctl(c, c->rank)->own.use, use, __ATOMIC_RELAXED);
    c->spread_switches = sw;
    c->spread_cpu_ns = cpu;
    c->spread_ns = now;
}

void ls_comm_spread(lockstep_comm_t *c, int my_cpu)
{
    if (!is_check(c))
        return;
    uint32_t s = c->seq;
    int N = c->size, where[SPREAD_MAX_RANKS], use[SPREAD_MAX_RANKS], crowded = 0;
    for (int r = 0; r < N; r++) {
        const ls_ctl_t *p = ls_ctl(c, r);
        where[r] = r == c->rank ? my_cpu : __atomic_load_n(&p->ann[s & 1].where, __ATOMIC_RELAXED);
        use[r] = __atomic_load_n(&p->own.use, __ATOMIC_RELAXED);
        crowded |= where[r] < 0; /* not known: no plan, and checks as if crowded */
    }
    for (int r = 0; r < N && !crowded; r++)
        crowded = ls_spread_count(where, N, where[r]) > (int)c->per_cpu;
    c->spread_next = s + c->spread_wait;
    uint32_t most = crowded ? SPREAD_BACKOFF_MAX : SPREAD_CALM_MAX;
    c->spread_wait = c->spread_wait < most / 2 ? c->spread_wait * 2 : most;
    if (!crowded)
        return;
    cpu_set_t set;
    int cpus[SPREAD_MAX_RANKS];
    int n = ls_allowed_cpus(&set, cpus, SPREAD_MAX_RANKS);
    if (n < 2 || n >= N) /* else oversubscribed only by cpu_sharers or a CPU quota */
        return;
    int to = ls_spread_target(where, use, N, c->rank, cpus, n, (N + n - 1) / n);
    if (to < 0)
        return;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(to, &one);
    if (sched_setaffinity(0, sizeof one, &one) == 0 && sched_setaffinity(0, sizeof set, &set) != 0)
        c->spread_wait = 0; /* could not give the CPU set back (a cpuset changed): no more */
}
