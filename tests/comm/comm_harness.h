/* Runs a function as N ranks in fork()ed processes, each with a watchdog, and reports
 * whether all of them exited 0. Ranks share one MAP_SHARED page for digests. */
#ifndef LOCKSTEP_TEST_COMM_HARNESS_H
#define LOCKSTEP_TEST_COMM_HARNESS_H

#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/wait.h>

#include "lockstep/lockstep.h"
#include "../common/check.h"

#define MAX_TEST_RANKS 16

struct shared_page {
    uint64_t digest[MAX_TEST_RANKS][64]; /* per-rank result digests, compared across ranks */
    int64_t value[MAX_TEST_RANKS][8];    /* free-form per-rank results */
};

static inline struct shared_page *harness_page(void)
{
    static struct shared_page *page;
    if (!page) {
        page = mmap(NULL, sizeof *page, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        CHECK(page != MAP_FAILED);
    }
    return page;
}

/* A job name no other test process uses. */
static inline void harness_job(char *out, size_t cap, const char *what)
{
    snprintf(out, cap, "test-%s-%d-%llu", what, (int)getpid(), (unsigned long long)lockstep_now_ns());
}

static inline int shm_entries_with(const char *job)
{
    DIR *d = opendir("/dev/shm");
    if (!d)
        return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        n += strstr(e->d_name, job) != NULL;
    closedir(d);
    return n;
}

/* fn(rank, size, job) is the body of each rank; its return value is the exit code. */
typedef int (*rank_fn)(int rank, int size, const char *job);

/* Runs the ranks; returns the number that failed. expect_killed: ranks that are allowed
 * (and expected) to die of SIGKILL, as a bit mask. */
static inline int harness_run(rank_fn fn, int size, const char *job, unsigned watchdog_s, unsigned expect_killed)
{
    pid_t pids[MAX_TEST_RANKS];
    harness_page();
    fflush(stdout);
    fflush(stderr);
    for (int r = 0; r < size; r++) {
        pids[r] = fork();
        CHECK(pids[r] >= 0);
        if (pids[r] == 0) {
            watchdog(watchdog_s);
            _exit(fn(r, size, job));
        }
    }
    int failed = 0;
    for (int r = 0; r < size; r++) {
        int st = 0;
        CHECK(waitpid(pids[r], &st, 0) == pids[r]);
        int killed = WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL;
        if ((expect_killed >> r) & 1u) {
            if (!killed) {
                fprintf(stderr, "rank %d was expected to be killed\n", r);
                failed++;
            }
        } else if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            fprintf(stderr, "rank %d failed (status %#x)\n", r, st);
            failed++;
        }
    }
    return failed;
}

/* The defaults, for rank of size in job: what a test changes starts from here. */
static inline lockstep_comm_params_t harness_params(int rank, int size, const char *job)
{
    lockstep_comm_params_t p = lockstep_comm_params_default();
    snprintf(p.job, sizeof p.job, "%s", job);
    p.rank = rank;
    p.size = size;
    return p;
}

static inline lockstep_comm_t *harness_comm(int rank, int size, const char *job, uint32_t timeout_ms)
{
    lockstep_comm_params_t p = harness_params(rank, size, job);
    p.timeout_ms = timeout_ms;
    lockstep_comm_t *c = lockstep_comm_create(&p);
    if (!c)
        fprintf(stderr, "rank %d: comm_create: %s\n", rank, lockstep_strerror(-errno));
    return c;
}

/* fn as `size` ranks of a new job named after `what` (watchdog_s and expect_killed as
 * for harness_run): every rank must pass, and no segment of the job may be left in
 * /dev/shm. */
static inline void harness_run_clean(rank_fn fn, int size, const char *what, unsigned watchdog_s,
                                     unsigned expect_killed)
{
    char job[96];
    harness_job(job, sizeof job, what);
    CHECK_EQ(harness_run(fn, size, job, watchdog_s, expect_killed), 0);
    CHECK_EQ(shm_entries_with(job), 0);
}

/* FNV-1a over bytes */
TEST_UNTRACED static inline uint64_t digest(const void *p, size_t n)
{
    const unsigned char *b = p;
    TEST_READS(p, n);
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

#endif
