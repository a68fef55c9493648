/* Deadlines and abandoned waits: a late rank makes the others time out; params.cancel
 * abandons a wait on every rank; of two failures at once, the first recorded is the one
 * every rank reports; a rank that exits once it has done its part fails no one. */
#define _GNU_SOURCE /* process_vm_readv, unshare */
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/uio.h>

#include "comm_harness.h"
#include "../../src/comm/segment.h" /* LS_COMM_MAGIC: the segment a rank 0 of this build writes */
#include "../../src/comm/tuning.h"  /* LS_KCOPY_PIECE: a kernel-copy write goes this much per check */

/* ---- deadline ----------------------------------------------------------------------- */

static int late_body(int rank, int size, const char *job)
{
    lockstep_comm_t *c = harness_comm(rank, size, job, 300);
    if (!c)
        return 1;
    int x = rank;
    if (rank == 1) {
        usleep(1200 * 1000); /* well past rank 0's deadline */
        CHECK_EQ(lockstep_comm_allreduce(c, &x, &x, 1, LOCKSTEP_DTYPE_I32, LOCKSTEP_OP_SUM), -ETIMEDOUT);
    } else {
        CHECK_EQ(lockstep_comm_allreduce(c, &x, &x, 1, LOCKSTEP_DTYPE_I32, LOCKSTEP_OP_SUM), -ETIMEDOUT);
    }
    lockstep_comm_free(c);
    return 0;
}

/* ---- cancel: params.cancel abandons a wait ------------------------------------------- */

static int cancel_calls, cancel_at; /* cancel() says yes on its cancel_at-th call */

static int cancel_third(void *arg)
{
    CHECK(arg == &cancel_calls);
    return ++cancel_calls == cancel_at;
}

static lockstep_comm_params_t cancel_params(int rank, int size, const char *job)
{
    lockstep_comm_params_t p = harness_params(rank, size, job);
    p.timeout_ms = 120000; /* longer than harness_run's 60 s watchdog: only cancel ends a wait in time */
    p.cancel = cancel_third;
    p.cancel_arg = &cancel_calls;
    return p;
}

/* Rank 1 calls only once rank 0 has abandoned its call: rank 0's wait can end only
 * through cancel, and rank 1 then finds the communicator broken. Rank 0's cancel is
 * asked between wait slices only, so never before it must wait. */
static int cancel_body(int rank, int size, const char *job)
{
    volatile int64_t *done = &harness_page()->value[0][0];
    lockstep_comm_params_t p = cancel_params(rank, size, job);
    cancel_at = 1 << 30; /* never, during create */
    lockstep_comm_t *c = lockstep_comm_create(&p);
    if (!c)
        return 1;
    int x[3] = {rank, rank, rank};
    int kind = (int)harness_page()->value[1][0]; /* 0 allreduce, 1 barrier, 2 broadcast */
    if (rank == 0) {
        cancel_calls = 0;
        cancel_at = 3;
        int rc = kind == 0 ? lockstep_comm_allreduce(c, x, x, 3, LOCKSTEP_DTYPE_I32, LOCKSTEP_OP_SUM)
                 : kind == 1 ? lockstep_comm_barrier(c)
                             : lockstep_comm_broadcast(c, x, sizeof x, 1, LOCKSTEP_ORDER_LINEAR, LOCKSTEP_XFER_PULL);
        CHECK_EQ(rc, -ECANCELED);
        CHECK_EQ(cancel_calls, 3);
        CHECK_EQ(x[0], 0); /* untouched */
        *done = 1;
        CHECK_EQ(lockstep_comm_barrier(c), -ECANCELED); /* broken, without asking again */
        CHECK_EQ(cancel_calls, 3);
    } else {
        while (!*done)
            usleep(1000);
        CHECK_EQ(lockstep_comm_allreduce(c, x, x, 3, LOCKSTEP_DTYPE_I32, LOCKSTEP_OP_SUM), -ECANCELED);
        CHECK_EQ(lockstep_comm_barrier(c), -ECANCELED);
    }
    lockstep_comm_free(c);
    return 0;
}

static void test_cancel(void)
{
    char job[96];
    /* create: rank 0 waiting for peers to join, and rank 1 waiting for the segment */
    for (int rank = 0; rank < 2; rank++) {
        harness_job(job, sizeof job, "cancel-create");
        lockstep_comm_params_t p = cancel_params(rank, 2, job);
        cancel_calls = 0;
        cancel_at = 3;
        errno = 0;
        CHECK(lockstep_comm_create(&p) == NULL);
        CHECK_EQ(errno, ECANCELED);
        CHECK_EQ(cancel_calls, 3);
        CHECK_EQ(shm_entries_with(job), 0);
    }
    for (int kind = 0; kind < 3; kind++) {
        harness_page()->value[0][0] = 0;
        harness_page()->value[1][0] = kind;
        harness_run_clean(cancel_body, 2, "cancel", 60, 0);
    }
}

/* ---- leave: a peer that does its part and exits is no failure ----------------------- */

/* Rank 1 waits on rank 0 in a call that rank 0 finishes without waiting for rank 1:
 * an eager broadcast (0), the barrier rank 0 arrives at last (1), a small regular
 * broadcast (2), each from root 0. Rank 1's wait first runs out a slice; its cancel
 * callback, asked then, before the look at rank 0's pid, holds rank 1 until rank 0 has
 * made its call, returned and exited. Rank 1 must then get rank 0's payload and 0,
 * not LOCKSTEP_EPEERDIED: its wait ended before it looked. page value[0][0]: rank 0's
 * pid; value[1][0]: the case; value[1][1]: rank 1 is in its callback. */
static int leave_armed, leave_held;

static int leave_hold(void *arg)
{
    struct shared_page *pg = arg;
    if (!leave_armed || leave_held)
        return 0;
    leave_held = 1;
    __atomic_store_n(&pg->value[1][1], 1, __ATOMIC_RELEASE);
    while (kill((pid_t)__atomic_load_n(&pg->value[0][0], __ATOMIC_ACQUIRE), 0) == 0)
        usleep(1000); /* until rank 0 is gone (harness_run reaps it at once) */
    return 0;
}

static int leave_body(int rank, int size, const char *job)
{
    struct shared_page *pg = harness_page();
    int kind = (int)pg->value[1][0];
    lockstep_comm_params_t p = harness_params(rank, size, job);
    p.timeout_ms = 120000; /* past the watchdog: only the calls end the waits */
    p.broadcast_eager_bytes = kind == 0 ? 256 : 0;
    p.cancel = leave_hold;
    p.cancel_arg = pg;
    if (rank == 0)
        __atomic_store_n(&pg->value[0][0], (int64_t)getpid(), __ATOMIC_RELEASE);
    lockstep_comm_t *c = lockstep_comm_create(&p);
    if (!c)
        return 1;
    unsigned char b[64];
    memset(b, rank == 0 ? 0x5a : 0, sizeof b);
    int rc;
    if (rank == 0) {
        while (!__atomic_load_n(&pg->value[1][1], __ATOMIC_ACQUIRE))
            usleep(1000); /* until rank 1 waits, and is held between two slices */
    } else {
        leave_armed = 1;
    }
    rc = kind == 1 ? lockstep_comm_barrier(c) : lockstep_comm_broadcast(c, b, sizeof b, 0, LOCKSTEP_ORDER_LINEAR, LOCKSTEP_XFER_PULL);
    CHECK_EQ(rc, 0);
    if (rank == 1) {
        CHECK_EQ(leave_held, 1); /* the wait did run past a slice */
        for (size_t k = 0; kind != 1 && k < sizeof b; k++)
            CHECK_EQ(b[k], 0x5a);
    }
    lockstep_comm_free(c);
    return 0;
}

static void test_leave(void)
{
    char job[96];
    for (int kind = 0; kind < 3; kind++) {
        harness_page()->value[0][0] = 0;
        harness_page()->value[1][0] = kind;
        harness_page()->value[1][1] = 0;
        harness_job(job, sizeof job, "leave");
        if (harness_run(leave_body, 2, job, 60, 0) != 0) {
            fprintf(stderr, "leave case %d failed\n", kind);
            exit(1);
        }
        CHECK_EQ(shm_entries_with(job), 0);
    }
}

/* ---- two failures at once ---------------------------------------------------------- */

/* Rank 0 dies after a barrier; ranks 1 and 2 then wait for it in an allreduce. Rank 1's
 * cancel callback says yes from the start, so its first wait slice ends in -ECANCELED;
 * rank 2 has none, so its first slice ends in -LOCKSTEP_EPEERDIED. Both slices start
 * within microseconds of each other: two failures race, and whichever is recorded
 * first must be the one every rank reports, then and on every later call. */
static int race_armed;

static int race_cancel(void *arg)
{
    (void)arg;
    return race_armed;
}

static int race_body(int rank, int size, const char *job)
{
    lockstep_comm_params_t p = harness_params(rank, size, job);
    p.timeout_ms = 30000;
    if (rank == 1)
        p.cancel = race_cancel;
    lockstep_comm_t *c = lockstep_comm_create(&p);
    if (!c)
        return 1;
    CHECK_EQ(lockstep_comm_barrier(c), 0);
    if (rank == 0)
        kill(getpid(), SIGKILL);
    race_armed = 1;
    int x[4] = {0};
    int rc = lockstep_comm_allreduce(c, x, x, 4, LOCKSTEP_DTYPE_I32, LOCKSTEP_OP_SUM);
    CHECK(rc == -ECANCELED || rc == -LOCKSTEP_EPEERDIED);
    harness_page()->value[rank][0] = rc;
    CHECK_EQ(lockstep_comm_barrier(c), rc); /* broken, with the same error */
    lockstep_comm_free(c);
    return 0;
}

static void test_race(void)
{
    char job[96];
    int wins[2] = {0, 0}; /* cancelled, peer died */
    for (int round = 0; round < 60; round++) {
        harness_job(job, sizeof job, "race");
        struct shared_page *page = harness_page();
        page->value[1][0] = page->value[2][0] = 0;
        CHECK_EQ(harness_run(race_body, 3, job, 60, 1u << 0), 0);
        CHECK_EQ(page->value[1][0], page->value[2][0]); /* the same failure on both ranks */
        wins[page->value[1][0] == -LOCKSTEP_EPEERDIED]++;
        CHECK_EQ(shm_entries_with(job), 0);
    }
    fprintf(stderr, "race: cancel first %d times, peer death first %d times\n", wins[0], wins[1]);
}

int main(int argc, char **argv)
{
    watchdog(300);
    const char *t = argc > 1 ? argv[1] : "";
    if (strcmp(t, "timeout") == 0) {
        harness_run_clean(late_body, 2, "late", 60, 0);
    } else if (strcmp(t, "cancel") == 0) {
        test_cancel();
    } else if (strcmp(t, "race") == 0) {
        test_race();
    } else if (strcmp(t, "leave") == 0) {
        test_leave();
    } else {
        fprintf(stderr, "usage: %s timeout|cancel|race|leave\n", argv[0]);
        return 1;
    }
    return 0;
}
