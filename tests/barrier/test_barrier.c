/* Barrier validation: one template for every algorithm, threads or fork()ed processes.
 *
 * usage: test_barrier KIND threads|fork full|split [episodes]
 * At each of 1, 2, 3, 4, 5, 7, 8, 9, 16, 17 participants and every episode e, checks:
 *   - arrivals[e] is exactly n once anyone leaves e (and never more than n);
 *   - no participant is more than one episode ahead of another;
 *   - plain (non-atomic) writes made before the barrier are all visible after it.
 * "split" does private work between lockstep_barrier_arrive and lockstep_barrier_wait. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/wait.h>

#include "lockstep/lockstep.h"
#include "../common/check.h"

#define MAXN 17

struct shared {
    uint32_t failures;
    uint32_t progress[MAXN * 32];   /* participant i's current episode at [i * 32] */
    uint64_t data[2][MAXN];         /* plain writes, double-buffered by episode parity */
    size_t arrivals_off, barrier_off;
};

struct run {
    char *base; /* start of the mapping: struct shared, arrivals[], barrier */
    unsigned n, episodes;
    int split;
};

static struct shared *S(const struct run *r) { return (struct shared *)(void *)r->base; }
static uint32_t *arrivals(const struct run *r) { return (uint32_t *)(void *)(r->base + S(r)->arrivals_off); }
static lockstep_barrier_t *bar(const struct run *r) { return (lockstep_barrier_t *)(void *)(r->base + S(r)->barrier_off); }

static void fail(const struct run *r, const char *what, unsigned tid, unsigned e)
{
    fprintf(stderr, "n=%u tid=%u episode=%u: %s\n", r->n, tid, e, what);
    __atomic_fetch_add(&S(r)->failures, 1u, __ATOMIC_RELAXED);
}

static void participant(const struct run *r, unsigned tid)
{
    struct shared *s = S(r);
    volatile uint64_t sink = 0;
    for (unsigned e = 0; e < r->episodes; e++) {
        s->data[e & 1][tid] = ((uint64_t)e << 32) | tid;  /* plain write */
        __atomic_store_n(&s->progress[tid * 32], e, __ATOMIC_RELAXED);
        __atomic_fetch_add(&arrivals(r)[e], 1u, __ATOMIC_RELAXED);
        int rc;
        if (r->split) {
            rc = lockstep_barrier_arrive(bar(r), tid);
            for (unsigned k = 0; k < (e & 15); k++)
                sink += k * tid; /* useful work between the phases */
            if (rc == 0)
                rc = lockstep_barrier_wait(bar(r), tid);
        } else {
            rc = lockstep_barrier_arrive_and_wait(bar(r), tid);
        }
        if (rc != 0) {
            fail(r, "barrier call failed", tid, e);
            return;
        }
        uint32_t got = __atomic_load_n(&arrivals(r)[e], __ATOMIC_RELAXED);
        if (got != r->n)
            fail(r, "left the episode before every participant arrived", tid, e);
        for (unsigned j = 0; j < r->n; j++) {
            uint32_t pj = __atomic_load_n(&s->progress[j * 32], __ATOMIC_RELAXED);
            if (pj != e && pj != e + 1)
                fail(r, "a participant is more than one episode away", tid, e);
            if (s->data[e & 1][j] != (((uint64_t)e << 32) | j))
                fail(r, "a plain write made before the barrier is not visible after it", tid, e);
        }
        if (__atomic_load_n(&s->failures, __ATOMIC_RELAXED) > 20)
            return;
    }
    (void)sink;
}

struct targ { const struct run *r; unsigned tid; };
static void *thread_main(void *p)
{
    struct targ *a = p;
    participant(a->r, a->tid);
    return NULL;
}

static int run_one(lockstep_barrier_kind_t kind, unsigned n, unsigned episodes, int use_fork, int split)
{
    size_t bsize = lockstep_barrier_size(kind, n, 3);
    CHECK(bsize > 0);
    size_t arr_off = (sizeof(struct shared) + 127) & ~(size_t)127;
    size_t bar_off = (arr_off + episodes * sizeof(uint32_t) + 127) & ~(size_t)127;
    size_t total = bar_off + bsize;
    char *base = mmap(NULL, total, PROT_READ | PROT_WRITE,
                      (use_fork ? MAP_SHARED : MAP_PRIVATE) | MAP_ANONYMOUS, -1, 0);
    CHECK(base != MAP_FAILED);
    struct run r = {base, n, episodes, split};
    S(&r)->arrivals_off = arr_off;
    S(&r)->barrier_off = bar_off;
    lockstep_barrier_params_t p = lockstep_barrier_params_default();
    p.kind = kind;
    p.fanin = 3; /* odd fan-in: uneven groups and several levels at 16-17 */
    p.process_shared = use_fork;
    CHECK_EQ(lockstep_barrier_init(bar(&r), bsize, n, &p), 0);
    if (kind != LOCKSTEP_BARRIER_AUTO)
        CHECK_EQ(lockstep_barrier_kind(bar(&r)), kind);

    if (use_fork) {
        pid_t pids[MAXN];
        for (unsigned i = 1; i < n; i++) {
            pids[i] = fork();
            CHECK(pids[i] >= 0);
            if (pids[i] == 0) {
                watchdog(120);
                participant(&r, i);
                _exit(0);
            }
        }
        participant(&r, 0);
        for (unsigned i = 1; i < n; i++) {
            int st = 0;
            CHECK(waitpid(pids[i], &st, 0) == pids[i]);
            if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
                fail(&r, "child process failed", i, 0);
        }
    } else {
        pthread_t th[MAXN];
        struct targ a[MAXN];
        for (unsigned i = 1; i < n; i++) {
            a[i] = (struct targ){&r, i};
            CHECK_EQ(pthread_create(&th[i], NULL, thread_main, &a[i]), 0);
        }
        participant(&r, 0);
        for (unsigned i = 1; i < n; i++)
            pthread_join(th[i], NULL);
    }
    for (unsigned e = 0; e < episodes; e++)
        if (arrivals(&r)[e] != n)
            fail(&r, "arrival count differs from n", 0, e);
    int failures = (int)S(&r)->failures;
    munmap(base, total);
    return failures;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: %s KIND threads|fork full|split [episodes]\n", argv[0]);
        return 1;
    }
    watchdog(240);
    int kind = lockstep_barrier_kind_parse(argv[1]);
    CHECK(kind >= 0);
    int use_fork = strcmp(argv[2], "fork") == 0;
    int split = strcmp(argv[3], "split") == 0;
    unsigned episodes = argc > 4 ? (unsigned)atoi(argv[4]) : 3000;
    static const unsigned counts[] = {1, 2, 3, 4, 5, 7, 8, 9, 16, 17};
    for (unsigned i = 0; i < sizeof counts / sizeof counts[0]; i++) {
        unsigned n = counts[i];
        /* oversubscribed counts are much slower per episode; keep the run bounded */
        unsigned eps = n > 4 ? episodes / 4 + 1 : episodes;
        int f = run_one((lockstep_barrier_kind_t)kind, n, eps, use_fork, split);
        if (f) {
            fprintf(stderr, "%s %s %s n=%u: %d failures\n", argv[1], argv[2], argv[3], n, f);
            return 1;
        }
    }
    return 0;
}
