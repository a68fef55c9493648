/* The ranks as processes: kernel copies between them as each rank sets them, a forked
 * child's copy of a communicator, ranks in other PID namespaces, and a rank that freed
 * its communicator. */
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

#include "failure_helpers.h"

/* ---- kernel copies: each rank's setting, and calls that mix them ------------------- */

/* 2 ranks, each with its own LOCKSTEP_KERNEL_COPY (NULL: unset). Each reports whether
 * it offers kernel copies, and all-to-alls and allgathers inside and past the table's
 * windows give every rank the right blocks however the settings mix: a call moves by
 * kernel copy only if both offer, else through the slots. */
static const char *copy_env[2];

static int copy_body(int rank, int size, const char *job)
{
    if (copy_env[rank])
        CHECK_EQ(setenv("LOCKSTEP_KERNEL_COPY", copy_env[rank], 1), 0);
    else
        CHECK_EQ(unsetenv("LOCKSTEP_KERNEL_COPY"), 0);
    lockstep_comm_t *c = harness_comm(rank, size, job, 60000);
    if (!c)
        return 1;
    harness_page()->value[rank][2] = lockstep_comm_kernel_copy(c);
    static const size_t blocks[] = {(size_t)64 << 10, (size_t)256 << 10, (size_t)1 << 20};
    for (unsigned i = 0; i < sizeof blocks / sizeof blocks[0]; i++) {
        size_t b = blocks[i];
        unsigned char *send = malloc(2 * b), *recv = malloc(2 * b);
        CHECK(send != NULL && recv != NULL);
        for (size_t k = 0; k < 2 * b; k++)
            send[k] = (unsigned char)(k / b * 16 + (size_t)rank * 4 + k % 3);
        CHECK_EQ(lockstep_comm_alltoall(c, send, recv, b), 0);
        for (size_t k = 0; k < 2 * b; k++) /* block r of recv: rank r's block `rank` */
            CHECK_EQ(recv[k], (unsigned char)((size_t)rank * 16 + k / b * 4 + (k % b + (size_t)rank * b) % 3));
        CHECK_EQ(lockstep_comm_allgather(c, send, recv, b, LOCKSTEP_ORDER_LINEAR, LOCKSTEP_XFER_PUSH), 0);
        for (size_t k = 0; k < 2 * b; k++) /* block r: rank r's first block */
            CHECK_EQ(recv[k], (unsigned char)(k / b * 4 + k % b % 3));
        free(send);
        free(recv);
    }
    lockstep_comm_free(c);
    return 0;
}

static void copy_case(const char *env0, const char *env1, int want0, int want1)
{
    copy_env[0] = env0;
    copy_env[1] = env1;
    harness_page()->value[0][2] = harness_page()->value[1][2] = -1;
    harness_run_clean(copy_body, 2, "kcopy", 60, 0);
    CHECK_EQ(harness_page()->value[0][2], want0);
    CHECK_EQ(harness_page()->value[1][2], want1);
}

static void test_kernel_copy(void)
{
    CHECK_EQ(lockstep_comm_kernel_copy(NULL), -EINVAL);
    int can = siblings_can_read();
    copy_case(NULL, NULL, can, can);
    copy_case("auto", "WIDE", can, can);
    copy_case("wide", "off", can, 0);
    copy_case("off", NULL, 0, can);

    /* anything else is refused, with a message that names the variable and the value */
    lockstep_comm_params_t p = lockstep_comm_params_default();
    char job[96], msg[256];
    harness_job(job, sizeof job, "kcopy-bad");
    snprintf(p.job, sizeof p.job, "%s", job);
    p.size = 2;
    CHECK_EQ(setenv("LOCKSTEP_KERNEL_COPY", "fast", 1), 0);
    CHECK_EQ(lockstep_comm_params_check(&p, msg, sizeof msg), -EINVAL);
    CHECK(strstr(msg, "LOCKSTEP_KERNEL_COPY") != NULL && strstr(msg, "\"fast\"") != NULL);
    errno = 0;
    CHECK(lockstep_comm_create(&p) == NULL && errno == EINVAL);
    CHECK_EQ(shm_entries_with(job), 0);
    CHECK_EQ(unsetenv("LOCKSTEP_KERNEL_COPY"), 0);
    p.kernel_copy = (lockstep_kernel_copy_t)3;
    CHECK_EQ(lockstep_comm_params_check(&p, msg, sizeof msg), -EINVAL);
    CHECK(strstr(msg, "kernel_copy") != NULL);
    /* alone there is no peer to probe; params.kernel_copy off, or the variable, turns it off */
    p.size = 1;
    p.kernel_copy = LOCKSTEP_KERNEL_COPY_AUTO;
    lockstep_comm_t *c = lockstep_comm_create(&p);
    CHECK(c != NULL);
    CHECK_EQ(lockstep_comm_kernel_copy(c), 1);
    lockstep_comm_free(c);
    p.kernel_copy = LOCKSTEP_KERNEL_COPY_OFF;
    c = lockstep_comm_create(&p);
    CHECK(c != NULL);
    CHECK_EQ(lockstep_comm_kernel_copy(c), 0);
    lockstep_comm_free(c);
    p.kernel_copy = LOCKSTEP_KERNEL_COPY_WIDE;
    CHECK_EQ(setenv("LOCKSTEP_KERNEL_COPY", "off", 1), 0);
    c = lockstep_comm_create(&p);
    CHECK(c != NULL);
    CHECK_EQ(lockstep_comm_kernel_copy(c), 0);
    lockstep_comm_free(c);
    CHECK_EQ(unsetenv("LOCKSTEP_KERNEL_COPY"), 0);
    CHECK_EQ(shm_entries_with(job), 0);
}

/* ---- fork: a child's copy of a communicator is not a rank ---------------------------- */

/* Rank 0 forks while rank 1 already waits in an allreduce. The child's collectives on
 * its copy return -LOCKSTEP_EFORKED and touch nothing; it can free the copy and make
 * a communicator of its own. Then the parent makes the call rank 1 waits in, and both
 * get the right sum. (Before the fix the child's allreduce ran as rank 0 and paired
 * with rank 1's: rank 1 returned 102 with the child's 100 in it, and the next call
 * failed.) page value[0][0]: the child's exit status. */
static int fork_body(int rank, int size, const char *job)
{
    lockstep_comm_params_t p = harness_params(rank, size, job);
    lockstep_comm_t *c = lockstep_comm_create(&p);
    if (!c)
        return 1;
    int x[4] = {rank + 1, rank + 1, rank + 1, rank + 1}, y[4] = {0};
    CHECK_EQ(lockstep_comm_allreduce(c, x, y, 4, LOCKSTEP_DTYPE_I32, LOCKSTEP_OP_SUM), 0);
    CHECK_EQ(y[0], 3);
    if (rank == 0) {
        usleep(20000); /* rank 1 is in its next call by now, or soon: no matter which */
        fflush(NULL);
        pid_t child = fork();
        if (child == 0) {
            watchdog(60);
            int z[4] = {100, 100, 100, 100};
            char b[300];
            memset(b, 7, sizeof b);
            int ok = lockstep_comm_allreduce(c, z, z, 4, LOCKSTEP_DTYPE_I32, LOCKSTEP_OP_SUM) == -LOCKSTEP_EFORKED &&
                     lockstep_comm_barrier(c) == -LOCKSTEP_EFORKED &&
                     lockstep_comm_broadcast(c, b, sizeof b, 0, LOCKSTEP_ORDER_LINEAR, LOCKSTEP_XFER_PUSH) ==
                         -LOCKSTEP_EFORKED &&
                     lockstep_comm_allgather(c, b, b, 0, LOCKSTEP_ORDER_LINEAR, LOCKSTEP_XFER_PULL) ==
                         -LOCKSTEP_EFORKED &&
                     z[0] == 100 && b[0] == 7 && b[299] == 7;
            lockstep_comm_free(c);
            /* a communicator of its own works */
            lockstep_comm_params_t q = lockstep_comm_params_default();
            snprintf(q.job, sizeof q.job, "%s-child", job);
            lockstep_comm_t *own = ok ? lockstep_comm_create(&q) : NULL;
            ok = own && lockstep_comm_allreduce(own, z, z, 4, LOCKSTEP_DTYPE_I32, LOCKSTEP_OP_SUM) == 0 && z[3] == 100 &&
                 lockstep_comm_barrier(own) == 0;
            lockstep_comm_free(own);
            _exit(ok ? 0 : 3);
        }
        int st = -1;
        CHECK_EQ(waitpid(child, &st, 0), child);
        harness_page()->value[0][0] = st;
        x[0] = 10;
    }
    CHECK_EQ(lockstep_comm_allreduce(c, x, x, 4, LOCKSTEP_DTYPE_I32, LOCKSTEP_OP_SUM), 0);
    CHECK_EQ(x[0], 12); /* 10 + 2: the child's 100 never took part */
    CHECK_EQ(x[1], 3);
    CHECK_EQ(lockstep_comm_barrier(c), 0);
    lockstep_comm_free(c);
    return 0;
}

static void test_fork(void)
{
    harness_page()->value[0][0] = -1;
    harness_run_clean(fork_body, 2, "fork", 60, 0);
    CHECK_EQ(harness_page()->value[0][0], 0); /* the child's checks held */
}

/* ---- ranks in different PID namespaces (containers sharing /dev/shm) ---------------- */

/* Rank 1 runs in a PID namespace of its own (unshare, as a container would), where rank
 * 0's pid names no process and rank 1's own pid is 1. The ranks must still join and
 * run calls whose waits span several liveness slices (rank 0 comes 50 ms late to
 * each); before, rank 1 took rank 0 for dead: it never saw the segment's creator alive
 * and its join timed out. Then rank 1's process ends in the middle of the job, without
 * freeing anything: rank 0's next call fails with -LOCKSTEP_EPEERDIED, from rank 1's
 * liveness lock (its pid means nothing here), long before its 30 s deadline. */
static int pidns_rank(int rank, int size, const char *job)
{
    lockstep_comm_params_t p = harness_params(rank, size, job);
    p.timeout_ms = 30000;
    lockstep_comm_t *c = lockstep_comm_create(&p);
    if (!c) {
        fprintf(stderr, "rank %d: create: %s\n", rank, lockstep_strerror(-errno));
        return 1;
    }
    for (int i = 0; i < 3; i++) {
        if (rank == 0)
            usleep(50000);
        CHECK_EQ(lockstep_comm_barrier(c), 0);
        int x[2] = {rank + 1, i};
        CHECK_EQ(lockstep_comm_allreduce(c, x, x, 2, LOCKSTEP_DTYPE_I32, LOCKSTEP_OP_SUM), 0);
        CHECK_EQ(x[0], 3);
        CHECK_EQ(x[1], 2 * i);
    }
    if (rank == 1)
        _exit(0); /* as if killed: nothing freed (pid 1 of a namespace ignores its own SIGKILL) */
    int x[2] = {0, 0};
    CHECK_EQ(lockstep_comm_allreduce(c, x, x, 2, LOCKSTEP_DTYPE_I32, LOCKSTEP_OP_SUM), -LOCKSTEP_EPEERDIED);
    lockstep_comm_free(c);
    return 0;
}

/* ---- a rank that freed its communicator has not died ------------------------------ */

/* Rank 1 frees its communicator, which lets its liveness lock go, and stays alive until
 * rank 0 is done. Rank 0's barrier, which rank 1 never makes, meets its deadline
 * (-ETIMEDOUT), as for a rank that never comes: the lock says the rank is gone, its
 * flag that it left, not died. page value[0][0]: rank 0 is done. */
static int freed_body(int rank, int size, const char *job)
{
    lockstep_comm_params_t p = harness_params(rank, size, job);
    p.timeout_ms = rank == 0 ? 2000 : 30000;
    lockstep_comm_t *c = lockstep_comm_create(&p);
    if (!c)
        return 1;
    CHECK_EQ(lockstep_comm_barrier(c), 0);
    if (rank == 1) {
        lockstep_comm_free(c);
        while (!__atomic_load_n(&harness_page()->value[0][0], __ATOMIC_ACQUIRE))
            usleep(1000);
        return 0;
    }
    CHECK_EQ(lockstep_comm_barrier(c), -ETIMEDOUT);
    __atomic_store_n(&harness_page()->value[0][0], 1, __ATOMIC_RELEASE);
    lockstep_comm_free(c);
    return 0;
}

static void test_freed(void)
{
    harness_page()->value[0][0] = 0;
    harness_run_clean(freed_body, 2, "freed", 60, 0);
}

static int pidns_body(int rank, int size, const char *job)
{
    if (rank == 0)
        return pidns_rank(rank, size, job);
    if (unshare(CLONE_NEWPID) != 0)
        return 2;
    fflush(NULL);
    pid_t inner = fork(); /* the first process of the new namespace: pid 1 there */
    if (inner == 0) {
        watchdog(60);
        _exit(getpid() == 1 ? pidns_rank(rank, size, job) : 3);
    }
    int st = -1;
    if (inner < 0 || waitpid(inner, &st, 0) != inner)
        return 4;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 5;
}

/* Can this process make PID namespaces (root, or CAP_SYS_ADMIN)? */
static int can_unshare_pid(void)
{
    pid_t probe = fork();
    if (probe == 0)
        _exit(unshare(CLONE_NEWPID) == 0 ? 0 : 1);
    int st = -1;
    return probe > 0 && waitpid(probe, &st, 0) == probe && WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

static int test_pidns(void)
{
    if (!can_unshare_pid()) {
        fprintf(stderr, "skipped: cannot make a PID namespace here\n");
        return TEST_SKIP;
    }
    harness_run_clean(pidns_body, 2, "pidns", 60, 0);
    return 0;
}

int main(int argc, char **argv)
{
    watchdog(300);
    const char *t = argc > 1 ? argv[1] : "";
    if (strcmp(t, "kernel_copy") == 0) {
        test_kernel_copy();
    } else if (strcmp(t, "fork") == 0) {
        test_fork();
    } else if (strcmp(t, "pidns") == 0) {
        return test_pidns();
    } else if (strcmp(t, "freed") == 0) {
        test_freed();
    } else {
        fprintf(stderr, "usage: %s kernel_copy|fork|pidns|freed\n", argv[0]);
        return 1;
    }
    return 0;
}
