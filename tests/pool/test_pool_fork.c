/* fork(): a child's copy of a pool starts workers of its own at its first call and
 * then runs regions (whose shares wait for one another, so they must run at once),
 * parallel_for and graph runs on all n participants, as does a grandchild; a child
 * that only frees its copy ends; the parent's pool goes on untouched. A share that
 * forks ends the child's copy of its region instead of waiting for shares that stayed
 * in the parent: participant 0 of a run (the child can run again) and of a graph run
 * (-LOCKSTEP_EABORTED), and a worker (its thread, and so the child, ends). A pool
 * that another thread is driving at the fork is the child's to use (that thread
 * stayed in the parent), and the parent's region goes on.
 * Before the fix a child's first region waited forever for the parent's workers; a
 * pool driven by another thread at the fork gave -EBUSY in the child for good. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <sys/wait.h>

#include "lockstep/lockstep.h"
#include "../common/check.h"

#if defined(__SANITIZE_THREAD__)
#define UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define UNDER_TSAN 1
#endif
#endif

/* LeakSanitizer's check at a forked child's exit (a worker's child ends through exit)
 * counts the parent's threads as running ones and may report false leaks: it checks
 * the parent only. */
static pid_t main_pid;
int __lsan_is_turned_off(void);
int __lsan_is_turned_off(void)
{
    return main_pid && getpid() != main_pid;
}

#define MAXN 8

struct meet {
    int n;
    uint32_t calls[MAXN], arrived;
    pthread_t thread[MAXN];
};

/* Every share counts itself and waits until all n have come: run one after another
 * (no workers), the first would wait forever and the watchdog would fail the test. */
static void meet_share(void *p, int ith, int nth)
{
    struct meet *m = p;
    if (nth != m->n || ith < 0 || ith >= nth)
        return;
    m->thread[ith] = pthread_self();
    __atomic_fetch_add(&m->calls[ith], 1u, __ATOMIC_RELAXED);
    __atomic_fetch_add(&m->arrived, 1u, __ATOMIC_ACQ_REL);
    while (__atomic_load_n(&m->arrived, __ATOMIC_ACQUIRE) < (uint32_t)nth)
        sched_yield();
}

/* A region in which every share ran once, each on a thread of its own. */
static void check_region(lockstep_pool_t *pool, int n)
{
    struct meet m;
    memset(&m, 0, sizeof m);
    m.n = n;
    CHECK_EQ(lockstep_pool_run(pool, meet_share, &m), 0);
    for (int i = 0; i < n; i++) {
        CHECK_EQ(m.calls[i], 1);
        for (int j = 0; j < i; j++)
            CHECK(!pthread_equal(m.thread[i], m.thread[j]));
    }
    CHECK(pthread_equal(m.thread[0], pthread_self()));
}

static uint32_t hits[1000];

static void pfor(void *arg, int64_t b, int64_t e, int ith)
{
    (void)arg;
    (void)ith;
    for (int64_t i = b; i < e; i++)
        __atomic_fetch_add(&hits[i], 1u, __ATOMIC_RELAXED);
}

struct order {
    int nth;
    uint32_t done[6];   /* shares done per node */
    uint32_t bad;
};

/* node i's shares all run after every share of node i - 1 */
static int node_share(void *p, int node, int ith, int nth)
{
    (void)ith;
    struct order *o = p;
    if (nth != o->nth || (node > 0 && __atomic_load_n(&o->done[node - 1], __ATOMIC_ACQUIRE) != (uint32_t)nth))
        __atomic_store_n(&o->bad, 1u, __ATOMIC_RELAXED);
    __atomic_fetch_add(&o->done[node], 1u, __ATOMIC_ACQ_REL);
    return 0;
}

/* The whole API on this process's copy of pool */
static void check_all(lockstep_pool_t *pool, int n)
{
    check_region(pool, n);
    check_region(pool, n);
    memset(hits, 0, sizeof hits);
    CHECK_EQ(lockstep_pool_parallel_for(pool, 1000, 7, LOCKSTEP_SCHEDULE_DYNAMIC, pfor, NULL), 0);
    for (int i = 0; i < 1000; i++)
        CHECK_EQ(hits[i], 1);
    struct order o;
    memset(&o, 0, sizeof o);
    o.nth = n;
    CHECK_EQ(lockstep_pool_graph_run(pool, 6, n, node_share, &o), 0);
    CHECK_EQ(o.bad, 0);
    for (int i = 0; i < 6; i++)
        CHECK_EQ(o.done[i], n);
}

/* 0 when child exited with status 0 */
static int reap(pid_t child)
{
    int st;
    CHECK(child > 0);
    CHECK_EQ(waitpid(child, &st, 0), child);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        fprintf(stderr, "child %d ended with status %#x\n", (int)child, (unsigned)st);
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1;
}

/* In a child: the whole API on its copy of pool, then free the copy and end. */
static _Noreturn void child_checks(lockstep_pool_t *pool, int n)
{
    check_all(pool, n);
    lockstep_pool_free(pool);
    _exit(0);
}

/* Fork a child that runs child_checks; 0 when it passed. */
static int check_in_child(lockstep_pool_t *pool, int n)
{
    fflush(NULL);
    pid_t child = fork();
    if (child == 0) {
        watchdog(60);
        child_checks(pool, n);
    }
    return reap(child);
}

/* ---- a share that forks ----------------------------------------------------------- */

struct forker {
    int who;            /* the share that forks */
    pid_t child;        /* in the parent: the child's pid */
    int in_child;       /* set in the child's copy only */
};

static void fork_share(void *p, int ith, int nth)
{
    (void)nth;
    struct forker *f = p;
    if (ith != f->who)
        return;
    pid_t c = fork();
    if (c == 0) {
        watchdog(30);
        f->in_child = 1;
    } else {
        f->child = c;
    }
}

static int fork_node(void *p, int node, int ith, int nth)
{
    if (node == 1)
        fork_share(p, ith, nth);
    return 0;
}

/* ---- another thread drives the pool at the fork ------------------------------------ */

struct held {
    lockstep_pool_t *pool;
    uint32_t inside, go;
    int rc;
};

/* participant 0 stays in the region until told to go */
static void hold_share(void *p, int ith, int nth)
{
    (void)nth;
    struct held *h = p;
    if (ith != 0)
        return;
    __atomic_store_n(&h->inside, 1u, __ATOMIC_RELEASE);
    while (!__atomic_load_n(&h->go, __ATOMIC_ACQUIRE))
        sched_yield();
}

static void *drive(void *p)
{
    struct held *h = p;
    h->rc = lockstep_pool_run(h->pool, hold_share, h);
    return NULL;
}

static void fork_while_driven(lockstep_pool_t *pool, int n)
{
    struct held h;
    memset(&h, 0, sizeof h);
    h.pool = pool;
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, drive, &h), 0);
    while (!__atomic_load_n(&h.inside, __ATOMIC_ACQUIRE))
        sched_yield();
    CHECK_EQ(lockstep_pool_run(pool, hold_share, &h), -EBUSY); /* the parent's is in use */
    int rc = check_in_child(pool, n);
    __atomic_store_n(&h.go, 1u, __ATOMIC_RELEASE);
    CHECK_EQ(pthread_join(t, NULL), 0);
    CHECK_EQ(h.rc, 0);
    CHECK_EQ(rc, 0);
    check_all(pool, n);
}

int main(void)
{
#ifdef UNDER_TSAN
    /* ThreadSanitizer does not follow threads started in a child of a threaded process
     * (it stops at "dup thread"); the other builds run this test */
    fprintf(stderr, "skipped under ThreadSanitizer\n");
    return TEST_SKIP;
#endif
    main_pid = getpid();
    watchdog(120);
    for (int n = 1; n <= 5; n += 2) {
        lockstep_pool_params_t p = lockstep_pool_params_default();
        p.n_threads = n;
        lockstep_pool_t *pool = lockstep_pool_create(&p);
        CHECK(pool != NULL);
        check_all(pool, n);

        fflush(NULL);
        pid_t child = fork();
        if (child == 0) {
            watchdog(60);
            check_all(pool, n);
            int rc = check_in_child(pool, n); /* a grandchild */
            check_all(pool, n); /* the child's workers are still its own */
            lockstep_pool_free(pool);
            _exit(rc);
        }
        CHECK_EQ(reap(child), 0);

        fflush(NULL);
        child = fork(); /* a child that only frees its copy */
        if (child == 0) {
            watchdog(30);
            lockstep_pool_free(pool);
            _exit(0);
        }
        CHECK_EQ(reap(child), 0);
        check_all(pool, n); /* the parent's workers are untouched */

        /* participant 0 forks inside a region: the child's run returns, then runs again */
        struct forker f = {0, 0, 0};
        fflush(NULL);
        CHECK_EQ(lockstep_pool_run(pool, fork_share, &f), 0);
        if (f.in_child)
            child_checks(pool, n);
        CHECK_EQ(reap(f.child), 0);

        /* ... inside a graph node: the child's run stops after that node */
        memset(&f, 0, sizeof f);
        fflush(NULL);
        int rc = lockstep_pool_graph_run(pool, 3, n, fork_node, &f);
        if (f.in_child) {
            if (rc != -LOCKSTEP_EABORTED)
                _exit(2);
            child_checks(pool, n);
        }
        CHECK_EQ(rc, 0);
        CHECK_EQ(reap(f.child), 0);

        /* a worker forks: the child's only thread returns from the share and ends,
         * and with it the child, instead of waiting at the join */
        if (n > 1) {
            memset(&f, 0, sizeof f);
            f.who = n - 1;
            fflush(NULL);
            CHECK_EQ(lockstep_pool_run(pool, fork_share, &f), 0);
            CHECK_EQ(reap(f.child), 0);
        }
        fork_while_driven(pool, n);
        check_all(pool, n);
        lockstep_pool_free(pool);
    }
    return 0;
}
