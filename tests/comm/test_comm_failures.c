/* Failure semantics of the process communicator, each a subtest named on the command
 * line: a rank SIGKILLed in the middle of a call makes the others fail with
 * -LOCKSTEP_EPEERDIED (not -ETIMEDOUT: noticed before the deadline); a late rank makes
 * them time out; mismatched calls fail on every rank; of two failures at once, the
 * first recorded is the one every rank reports; a rank that exits once it has done its
 * part of a call fails no one; bad arguments and bad rendezvous give their codes;
 * nothing is left in /dev/shm. */
#define _GNU_SOURCE /* process_vm_readv */
#include <fcntl.h>
#include <pthread.h>
#include <sched.h> /* unshare */
#include <sys/stat.h>
#include <sys/statvfs.h>

#include "comm_harness.h"

#define SEG_MAGIC 0x6c736373 /* comm_impl.h's LS_COMM_MAGIC */
#include <sys/uio.h>

/* LS_CMA_PIECE (src/comm/comm_impl.h): a single-copy write goes this much per check */
#define LS_TEST_CMA_PIECE ((size_t)256 * 1024)

/* ---- peer death ------------------------------------------------------------------- */

static size_t kill_count;
static int kill_in_buffer; /* the calls run zero-copy, from the shared buffer */
static int kill_no_cma;    /* LOCKSTEP_NO_CMA: large calls copy through the slots */
static int kill_call;      /* 0: allreduce; 1: push broadcast, root it % size; 2: push allgather;
                              3: reduce-scatter; 4: all-to-all; 5: pull allgather; 6: push
                              broadcast in the rotated order, root (it + 2) % size: at 3
                              ranks, the 5th call's root is 1 and its relay's chain 2, 0,
                              so the rank killed then (2) is in the middle */

static int kill_one_call(lockstep_comm_t *c, float *buf, int it, int size)
{
    size_t bytes = kill_count * sizeof(float);
    switch (kill_call) {
    case 1: return lockstep_comm_broadcast(c, buf, bytes, it % size, LOCKSTEP_ORDER_LINEAR, LOCKSTEP_PUSH);
    case 6: return lockstep_comm_broadcast(c, buf, bytes, (it + 2) % size, LOCKSTEP_ORDER_ROTATED, LOCKSTEP_PUSH);
    case 2: case 5: {
        size_t block = bytes / (size_t)size;
        int me = lockstep_comm_rank(c);
        return lockstep_comm_allgather(c, (char *)buf + (size_t)me * block, buf, block, LOCKSTEP_ORDER_LINEAR,
                                       kill_call == 2 ? LOCKSTEP_PUSH : LOCKSTEP_PULL);
    }
    case 3: {
        size_t block = kill_count / (size_t)size;
        return lockstep_comm_reduce_scatter(c, buf, buf + (size_t)lockstep_comm_rank(c) * block, block,
                                            LOCKSTEP_F32, LOCKSTEP_SUM);
    }
    case 4: {
        size_t block = kill_count * sizeof(float) / 2 / (size_t)size; /* send, then recv */
        return lockstep_comm_alltoall(c, buf, (char *)buf + block * (size_t)size, block);
    }
    default: return lockstep_comm_allreduce(c, buf, buf, kill_count, LOCKSTEP_F32, LOCKSTEP_SUM);
    }
}

static int kill_body(int rank, int size, const char *job)
{
    lockstep_comm_params_t p = harness_params(rank, size, job);
    p.timeout_ms = 20000;
    p.buffer_bytes = kill_in_buffer ? kill_count * sizeof(float) : 0;
    if (kill_no_cma)
        CHECK_EQ(setenv("LOCKSTEP_NO_CMA", "1", 1), 0);
    lockstep_comm_t *c = lockstep_comm_create(&p);
    CHECK(c != NULL);
    struct shared_page *page = harness_page();
    page->value[rank][0] = getpid();
    float *buf = kill_in_buffer ? lockstep_comm_buffer(c, NULL) : calloc(kill_count, sizeof(float));
    CHECK(buf != NULL);
    for (int it = 0;; it++) {
        if (rank == 0 && it == 5) /* kill the last rank while everyone is inside calls */
            kill((pid_t)__atomic_load_n(&page->value[size - 1][0], __ATOMIC_ACQUIRE), SIGKILL);
        int rc = kill_one_call(c, buf, it, size);
        if (rc == 0)
            continue;
        page->value[rank][1] = rc;
        if (rc != -LOCKSTEP_EPEERDIED) {
            fprintf(stderr, "rank %d: got %s, want peer-died\n", rank, lockstep_strerror(rc));
            return 1;
        }
        /* the communicator stays broken */
        CHECK_EQ(lockstep_comm_barrier(c), -LOCKSTEP_EPEERDIED);
        break;
    }
    lockstep_comm_free(c);
    if (!kill_in_buffer)
        free(buf);
    return 0;
}

/* 3 ranks, or as many as the CPUs (at least 2) where the call must not oversubscribe
 * them: the single-copy allreduce runs only while ranks fit the CPUs */
static int kill_ranks = 3;

static void test_peer_death(size_t count, int in_buffer, int call)
{
    char job[96];
    harness_job(job, sizeof job, "kill");
    kill_count = count;
    kill_in_buffer = in_buffer;
    kill_call = call;
    CHECK_EQ(harness_run(kill_body, kill_ranks, job, 60, 1u << (kill_ranks - 1)), 0);
    CHECK_EQ(shm_entries_with(job), 0);
}

/* ---- a rank that dies once it has announced ----------------------------------------- */

/* The kill tests above do not control where in a call the rank dies. Here it dies
 * after its announcement is out, so every other rank gets through the announcement and
 * fails (or not) only where it waits for the dead rank's part. 3 ranks, root 1, 8 MiB
 * unless said; rank 2 calls first and waits for the root in the announcement; its
 * cancel callback, asked after the first wait slice, kills it; the root calls only
 * then.
 *   0: zero-copy PUSH broadcast in the rotated order, relayed along 2, 0: the root
 *      passes every piece to rank 2 and returns 0; rank 0 waits for the pieces rank 2
 *      never passes on and gets -LOCKSTEP_EPEERDIED.
 *   1: PUSH broadcast through the slots: the root waits for every receiver before it
 *      rewrites its ring of pieces (smaller than 8 MiB), so both fail.
 *   2: zero-copy allreduce: both fail.
 *   3: zero-copy PUSH broadcast of 512 KiB (not relayed) with the root's buf in its
 *      buffer too: each receiver copies from the root's buf, so the root waits for
 *      them all before it returns and fails; rank 0 has its copy and returns 0.
 * page value[2][0]: rank 2 is about to die. */
static int announced_kind, announced_armed;
static const size_t announced_bytes = (size_t)8 << 20;

static int announced_die(void *arg)
{
    struct shared_page *pg = arg;
    if (announced_armed) {
        __atomic_store_n(&pg->value[2][0], 1, __ATOMIC_RELEASE);
        raise(SIGKILL);
    }
    return 0;
}

static int announced_call(lockstep_comm_t *c, char *buf)
{
    switch (announced_kind) {
    case 0: return lockstep_comm_broadcast(c, buf, announced_bytes, 1, LOCKSTEP_ORDER_ROTATED, LOCKSTEP_PUSH);
    case 1: return lockstep_comm_broadcast(c, buf, announced_bytes, 1, LOCKSTEP_ORDER_LINEAR, LOCKSTEP_PUSH);
    case 3: return lockstep_comm_broadcast(c, buf, announced_bytes / 16, 1, LOCKSTEP_ORDER_LINEAR, LOCKSTEP_PUSH);
    default:
        return lockstep_comm_allreduce(c, buf, buf, announced_bytes / sizeof(float), LOCKSTEP_F32, LOCKSTEP_SUM);
    }
}

static int announced_body(int rank, int size, const char *job)
{
    struct shared_page *pg = harness_page();
    lockstep_comm_params_t p = harness_params(rank, size, job);
    p.timeout_ms = 120000; /* past the watchdog: only a dead peer ends the waits */
    p.buffer_bytes = announced_kind == 1 ? 0 : announced_bytes;
    p.cancel = announced_die;
    p.cancel_arg = pg;
    lockstep_comm_t *c = lockstep_comm_create(&p);
    if (!c)
        return 1;
    char *buf = announced_kind == 1 ? calloc(announced_bytes, 1) : lockstep_comm_buffer(c, NULL);
    CHECK(buf != NULL);
    memset(buf, rank == 1 ? 0x3c : 0, announced_bytes);
    if (rank == 2)
        announced_armed = 1;
    if (rank == 1)
        while (!__atomic_load_n(&pg->value[2][0], __ATOMIC_ACQUIRE))
            usleep(1000);
    int rc = announced_call(c, buf);
    CHECK(rank != 2); /* rank 2 dies in its call */
    int survives = announced_kind == 0 ? rank == 1 : announced_kind == 3 ? rank == 0 : 0;
    CHECK_EQ(rc, survives ? 0 : -LOCKSTEP_EPEERDIED);
    if (announced_kind == 3 && rank == 0)
        for (size_t i = 0; i < announced_bytes / 16; i++)
            CHECK_EQ((unsigned char)buf[i], 0x3c);
    CHECK_EQ(lockstep_comm_barrier(c), -LOCKSTEP_EPEERDIED); /* and the communicator stays broken */
    lockstep_comm_free(c);
    if (announced_kind == 1)
        free(buf);
    return 0;
}

static void test_announced_death(void)
{
    char job[96];
    for (announced_kind = 0; announced_kind < 4; announced_kind++) {
        harness_page()->value[2][0] = 0;
        harness_job(job, sizeof job, "announced");
        if (harness_run(announced_body, 3, job, 60, 1u << 2) != 0) {
            fprintf(stderr, "announced-death case %d failed\n", announced_kind);
            exit(1);
        }
        CHECK_EQ(shm_entries_with(job), 0);
    }
}

/* ---- a single-copy write under way when its target fails ------------------------------ */

/* 2 ranks, a PUSH allgather of 1 MiB blocks by single copy: each writes its block into
 * the other's recv with process_vm_writev. Rank 0's write is held after its check
 * (LOCKSTEP_TEST_CMA_STALL_MS, perturbation builds only) until well past rank 1's
 * deadline; rank 1 times out meanwhile. Rank 1 must not return while that piece is
 * under way: its recv is the same when it returns and once rank 0 has returned too,
 * and the piece that had passed its check is in it. */
#ifdef LOCKSTEP_TEST_HOOKS
static const size_t drain_block = (size_t)1 << 20;

static int drain_body(int rank, int size, const char *job)
{
    volatile int64_t *returned = &harness_page()->value[0][1];
    lockstep_comm_params_t p = harness_params(rank, size, job);
    p.timeout_ms = rank == 1 ? 200 : 120000;
    if (rank == 0)
        CHECK_EQ(setenv("LOCKSTEP_TEST_CMA_STALL_MS", "600", 1), 0);
    lockstep_comm_t *c = lockstep_comm_create(&p);
    if (!c)
        return 1;
    unsigned char *send = malloc(drain_block), *recv = calloc(2, drain_block);
    CHECK(send != NULL && recv != NULL);
    memset(send, rank == 0 ? 0xa5 : 0x5a, drain_block);
    int rc = lockstep_comm_allgather(c, send, recv, drain_block, LOCKSTEP_ORDER_LINEAR, LOCKSTEP_PUSH);
    CHECK_EQ(rc, -ETIMEDOUT); /* rank 1's, recorded first: rank 0 sees it at its next piece */
    if (rank == 0) {
        __atomic_store_n(returned, 1, __ATOMIC_RELEASE);
    } else {
        uint64_t at_return = digest(recv, drain_block);
        while (!__atomic_load_n(returned, __ATOMIC_ACQUIRE))
            usleep(1000);
        CHECK_EQ(digest(recv, drain_block), at_return); /* nothing landed after the return */
        CHECK_EQ(recv[0], 0xa5);                        /* the held piece landed before it */
        CHECK_EQ(recv[LS_TEST_CMA_PIECE], 0);           /* and no piece after it */
    }
    lockstep_comm_free(c);
    free(send);
    free(recv);
    return 0;
}

/* Whether one process may read a sibling's memory, as the ranks' single copy needs */
static int siblings_can_read(void)
{
    static int word = 42;
    pid_t a = fork();
    CHECK(a >= 0);
    if (a == 0) {
        pause();
        _exit(0);
    }
    pid_t b = fork();
    CHECK(b >= 0);
    if (b == 0) {
        int got = 0;
        struct iovec l = {&got, sizeof got}, r = {&word, sizeof word};
        _exit(process_vm_readv(a, &l, 1, &r, 1, 0) == (ssize_t)sizeof got && got == 42 ? 0 : 1);
    }
    int st = 0;
    CHECK(waitpid(b, &st, 0) == b);
    kill(a, SIGKILL);
    waitpid(a, NULL, 0);
    return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}
#endif

static int test_cma_drain(void)
{
#ifndef LOCKSTEP_TEST_HOOKS
    fprintf(stderr, "skipped: needs a perturbation build (-DLOCKSTEP_PERTURB=ON: the debug preset)\n");
    return 77;
#else
    if (lockstep_cpus_available() < 2 || !siblings_can_read()) {
        fprintf(stderr, "skipped: single copy needs 2 CPUs and process_vm_readv between siblings\n");
        return 77;
    }
    harness_page()->value[0][1] = 0;
    harness_run_clean(drain_body, 2, "drain", 60, 0);
    return 0;
#endif
}

/* ---- kernel copies: rank 0 decides for every rank ------------------------------------ */

/* 2 ranks, each with its own LOCKSTEP_KERNEL_COPY (NULL: unset) and LOCKSTEP_NO_CMA.
 * Every rank reports rank 0's choice unless it cannot copy that way itself ("off");
 * with the variable unset on rank 0 its measure, the same on both. */
static const char *copy_env[2];
static int copy_no_cma[2];

static int copy_code(const char *s)
{
    return !s ? -1 : strcmp(s, "fast") == 0 ? 1 : strcmp(s, "slow") == 0 ? 2 : strcmp(s, "off") == 0 ? 3 : 0;
}

static int copy_body(int rank, int size, const char *job)
{
    if (copy_env[rank])
        CHECK_EQ(setenv("LOCKSTEP_KERNEL_COPY", copy_env[rank], 1), 0);
    else
        CHECK_EQ(unsetenv("LOCKSTEP_KERNEL_COPY"), 0);
    if (copy_no_cma[rank])
        CHECK_EQ(setenv("LOCKSTEP_NO_CMA", "1", 1), 0);
    else
        CHECK_EQ(unsetenv("LOCKSTEP_NO_CMA"), 0);
    lockstep_comm_t *c = harness_comm(rank, size, job, 60000);
    if (!c)
        return 1;
    int mine = copy_code(lockstep_comm_kernel_copy(c)), theirs = -1;
    CHECK(mine > 0);
    /* each rank's answer to the other, through the communicator */
    int32_t all[2] = {mine, mine};
    CHECK_EQ(lockstep_comm_allgather(c, &all[rank], all, sizeof(int32_t), LOCKSTEP_ORDER_LINEAR, LOCKSTEP_PULL), 0);
    theirs = all[1 - rank];
    lockstep_comm_free(c);
    harness_page()->value[rank][2] = mine;
    return theirs > 0 ? 0 : 1;
}

static void copy_case(const char *env0, const char *env1, int no_cma1, int want0, int want1)
{
    copy_env[0] = env0;
    copy_env[1] = env1;
    copy_no_cma[0] = 0;
    copy_no_cma[1] = no_cma1;
    harness_page()->value[0][2] = harness_page()->value[1][2] = 0;
    harness_run_clean(copy_body, 2, "kcopy", 60, 0);
    int64_t got0 = harness_page()->value[0][2], got1 = harness_page()->value[1][2];
    if (want0) { /* a choice named: both say what it is */
        CHECK_EQ(got0, want0);
        CHECK_EQ(got1, want1);
    } else { /* measured: fast or slow, the same on both */
        CHECK(got0 == 1 || got0 == 2);
        CHECK_EQ(got1, got0);
    }
}

static void test_kernel_copy(void)
{
    errno = 0;
    CHECK(lockstep_comm_kernel_copy(NULL) == NULL && errno == EINVAL);
    /* rank 0's word holds on every rank, whatever the others' say */
    copy_case("slow", "fast", 0, 2, 2);
    copy_case("FAST", "slow", 0, 1, 1);
    copy_case("slow", NULL, 0, 2, 2);
    copy_case("auto", "slow", 0, 0, 0);
    copy_case(NULL, NULL, 0, 0, 0);
    /* a rank that cannot copy that way says so; rank 0's choice stands */
    copy_case("fast", NULL, 1, 1, 3);
    copy_case("slow", "fast", 1, 2, 3);

    /* anything else is refused, with a message that names the variable and the value */
    lockstep_comm_params_t p = lockstep_comm_params_default();
    char job[96], msg[256];
    harness_job(job, sizeof job, "kcopy-bad");
    snprintf(p.job, sizeof p.job, "%s", job);
    p.size = 2;
    CHECK_EQ(setenv("LOCKSTEP_KERNEL_COPY", "quick", 1), 0);
    CHECK_EQ(lockstep_comm_params_check(&p, msg, sizeof msg), -EINVAL);
    CHECK(strstr(msg, "LOCKSTEP_KERNEL_COPY") != NULL && strstr(msg, "\"quick\"") != NULL);
    errno = 0;
    CHECK(lockstep_comm_create(&p) == NULL && errno == EINVAL);
    CHECK_EQ(shm_entries_with(job), 0);
    /* alone, nothing is measured: fast, unless this rank cannot */
    CHECK_EQ(unsetenv("LOCKSTEP_KERNEL_COPY"), 0);
    CHECK_EQ(lockstep_comm_params_check(&p, msg, sizeof msg), 0);
    p.size = 1;
    lockstep_comm_t *c = lockstep_comm_create(&p);
    CHECK(c != NULL);
    CHECK_EQ(copy_code(lockstep_comm_kernel_copy(c)), 1);
    lockstep_comm_free(c);
    CHECK_EQ(setenv("LOCKSTEP_NO_CMA", "1", 1), 0);
    c = lockstep_comm_create(&p);
    CHECK(c != NULL);
    CHECK_EQ(copy_code(lockstep_comm_kernel_copy(c)), 3);
    lockstep_comm_free(c);
    CHECK_EQ(unsetenv("LOCKSTEP_NO_CMA"), 0);
    CHECK_EQ(shm_entries_with(job), 0);
}

/* ---- deadline ----------------------------------------------------------------------- */

static int late_body(int rank, int size, const char *job)
{
    lockstep_comm_t *c = harness_comm(rank, size, job, 300);
    if (!c)
        return 1;
    int x = rank;
    if (rank == 1) {
        usleep(1200 * 1000); /* well past rank 0's deadline */
        CHECK_EQ(lockstep_comm_allreduce(c, &x, &x, 1, LOCKSTEP_I32, LOCKSTEP_SUM), -ETIMEDOUT);
    } else {
        CHECK_EQ(lockstep_comm_allreduce(c, &x, &x, 1, LOCKSTEP_I32, LOCKSTEP_SUM), -ETIMEDOUT);
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
        int rc = kind == 0 ? lockstep_comm_allreduce(c, x, x, 3, LOCKSTEP_I32, LOCKSTEP_SUM)
                 : kind == 1 ? lockstep_comm_barrier(c)
                             : lockstep_comm_broadcast(c, x, sizeof x, 1, LOCKSTEP_ORDER_LINEAR, LOCKSTEP_PULL);
        CHECK_EQ(rc, -ECANCELED);
        CHECK_EQ(cancel_calls, 3);
        CHECK_EQ(x[0], 0); /* untouched */
        *done = 1;
        CHECK_EQ(lockstep_comm_barrier(c), -ECANCELED); /* broken, without asking again */
        CHECK_EQ(cancel_calls, 3);
    } else {
        while (!*done)
            usleep(1000);
        CHECK_EQ(lockstep_comm_allreduce(c, x, x, 3, LOCKSTEP_I32, LOCKSTEP_SUM), -ECANCELED);
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

/* ---- busy: one thread at a time ------------------------------------------------------ */

/* Rank 0's second thread waits in a barrier that rank 1 joins only later; rank 0's
 * cancel callback, asked between the wait's slices, says that thread is in the call.
 * Rank 0's main thread then makes every call on the same communicator: each gets
 * -EBUSY and leaves its buffers alone. The barrier in flight still ends with 0 once
 * rank 1 comes, and both ranks then reduce exactly. page value[0][0]: rank 1 may come. */
static int busy_inside;

static int busy_note(void *arg)
{
    (void)arg;
    __atomic_store_n(&busy_inside, 1, __ATOMIC_RELEASE);
    return 0;
}

static void *busy_barrier(void *arg)
{
    return (void *)(intptr_t)lockstep_comm_barrier(arg);
}

static int busy_body(int rank, int size, const char *job)
{
    volatile int64_t *go = &harness_page()->value[0][0];
    lockstep_comm_params_t p = harness_params(rank, size, job);
    p.timeout_ms = 30000;
    p.cancel = busy_note;
    lockstep_comm_t *c = lockstep_comm_create(&p);
    if (!c)
        return 1;
    int32_t x[4] = {7, 7, 7, 7}, y[8] = {0};
    if (rank == 0) {
        __atomic_store_n(&busy_inside, 0, __ATOMIC_RELAXED); /* create may have asked it */
        pthread_t t;
        CHECK_EQ(pthread_create(&t, NULL, busy_barrier, c), 0);
        while (!__atomic_load_n(&busy_inside, __ATOMIC_ACQUIRE))
            usleep(1000);
        CHECK_EQ(lockstep_comm_allreduce(c, x, x, 4, LOCKSTEP_I32, LOCKSTEP_SUM), -EBUSY);
        CHECK_EQ(lockstep_comm_broadcast(c, x, sizeof x, 1, LOCKSTEP_ORDER_LINEAR, LOCKSTEP_PULL), -EBUSY);
        CHECK_EQ(lockstep_comm_allgather(c, x, y, sizeof x, LOCKSTEP_ORDER_LINEAR, LOCKSTEP_PUSH), -EBUSY);
        CHECK_EQ(lockstep_comm_reduce_scatter(c, x, y, 2, LOCKSTEP_I32, LOCKSTEP_SUM), -EBUSY);
        CHECK_EQ(lockstep_comm_alltoall(c, x, y, 8), -EBUSY);
        CHECK_EQ(lockstep_comm_barrier(c), -EBUSY);
        for (int i = 0; i < 8; i++) {
            CHECK(i >= 4 || x[i] == 7);
            CHECK_EQ(y[i], 0);
        }
        *go = 1;
        void *rc;
        CHECK_EQ(pthread_join(t, &rc), 0);
        CHECK_EQ((intptr_t)rc, 0);
    } else {
        while (!*go)
            usleep(1000);
        CHECK_EQ(lockstep_comm_barrier(c), 0);
        for (int i = 0; i < 4; i++)
            x[i] = 5;
    }
    CHECK_EQ(lockstep_comm_allreduce(c, x, x, 4, LOCKSTEP_I32, LOCKSTEP_SUM), 0);
    for (int i = 0; i < 4; i++)
        CHECK_EQ(x[i], 12);
    lockstep_comm_free(c);
    return 0;
}

static void test_busy(void)
{
    harness_page()->value[0][0] = 0;
    harness_run_clean(busy_body, 2, "busy", 60, 0);
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
    CHECK_EQ(lockstep_comm_allreduce(c, x, y, 4, LOCKSTEP_I32, LOCKSTEP_SUM), 0);
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
            int ok = lockstep_comm_allreduce(c, z, z, 4, LOCKSTEP_I32, LOCKSTEP_SUM) == -LOCKSTEP_EFORKED &&
                     lockstep_comm_barrier(c) == -LOCKSTEP_EFORKED &&
                     lockstep_comm_broadcast(c, b, sizeof b, 0, LOCKSTEP_ORDER_LINEAR, LOCKSTEP_PUSH) ==
                         -LOCKSTEP_EFORKED &&
                     lockstep_comm_allgather(c, b, b, 0, LOCKSTEP_ORDER_LINEAR, LOCKSTEP_PULL) ==
                         -LOCKSTEP_EFORKED &&
                     z[0] == 100 && b[0] == 7 && b[299] == 7;
            lockstep_comm_free(c);
            /* a communicator of its own works */
            lockstep_comm_params_t q = lockstep_comm_params_default();
            snprintf(q.job, sizeof q.job, "%s-child", job);
            lockstep_comm_t *own = ok ? lockstep_comm_create(&q) : NULL;
            ok = own && lockstep_comm_allreduce(own, z, z, 4, LOCKSTEP_I32, LOCKSTEP_SUM) == 0 && z[3] == 100 &&
                 lockstep_comm_barrier(own) == 0;
            lockstep_comm_free(own);
            _exit(ok ? 0 : 3);
        }
        int st = -1;
        CHECK_EQ(waitpid(child, &st, 0), child);
        harness_page()->value[0][0] = st;
        x[0] = 10;
    }
    CHECK_EQ(lockstep_comm_allreduce(c, x, x, 4, LOCKSTEP_I32, LOCKSTEP_SUM), 0);
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
        CHECK_EQ(lockstep_comm_allreduce(c, x, x, 2, LOCKSTEP_I32, LOCKSTEP_SUM), 0);
        CHECK_EQ(x[0], 3);
        CHECK_EQ(x[1], 2 * i);
    }
    if (rank == 1)
        _exit(0); /* as if killed: nothing freed (pid 1 of a namespace ignores its own SIGKILL) */
    int x[2] = {0, 0};
    CHECK_EQ(lockstep_comm_allreduce(c, x, x, 2, LOCKSTEP_I32, LOCKSTEP_SUM), -LOCKSTEP_EPEERDIED);
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
    rc = kind == 1 ? lockstep_comm_barrier(c) : lockstep_comm_broadcast(c, b, sizeof b, 0, LOCKSTEP_ORDER_LINEAR, LOCKSTEP_PULL);
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
    int rc = lockstep_comm_allreduce(c, x, x, 4, LOCKSTEP_I32, LOCKSTEP_SUM);
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

/* ---- mismatched calls --------------------------------------------------------------- */

static int mismatch_case;

static int mismatch_body(int rank, int size, const char *job)
{
    /* cases 11-13: calls alike but for their tag (lockstep_comm_tag); case 13's
     * broadcast is eager (its root does not wait: only the receiver fails in it) */
    lockstep_comm_params_t params = harness_params(rank, size, job);
    params.timeout_ms = 20000;
    params.broadcast_eager_bytes = mismatch_case == 13 ? 64 : 0;
    lockstep_comm_t *c = lockstep_comm_create(&params);
    if (!c)
        return 1;
    float v[64] = {0};
    int rc = -1;
    int odd = rank == 1;
    if (mismatch_case >= 11) { /* first the same tag on both: it holds for every call until set again */
        CHECK_EQ(lockstep_comm_tag(c, 200), 0);
        for (int k = 0; k < 2; k++) {
            v[0] = (float)(rank + 1);
            CHECK_EQ(lockstep_comm_allreduce(c, v, v, 1, LOCKSTEP_F32, LOCKSTEP_SUM), 0);
            CHECK(v[0] == 3.0f);
        }
        CHECK_EQ(lockstep_comm_tag(c, odd ? 201 : 200), 0);
    }
    switch (mismatch_case) {
    case 0: rc = lockstep_comm_allreduce(c, v, v, odd ? 11 : 10, LOCKSTEP_F32, LOCKSTEP_SUM); break;
    case 1: rc = lockstep_comm_allreduce(c, v, v, 8, odd ? LOCKSTEP_I32 : LOCKSTEP_F32, LOCKSTEP_SUM); break;
    case 2: rc = lockstep_comm_allreduce(c, v, v, 8, LOCKSTEP_F32, odd ? LOCKSTEP_MAX : LOCKSTEP_SUM); break;
    case 3: rc = lockstep_comm_broadcast(c, v, 16, odd ? 1 : 0, LOCKSTEP_ORDER_LINEAR, LOCKSTEP_PULL); break;
    case 4: rc = odd ? lockstep_comm_barrier(c) : lockstep_comm_allreduce(c, v, v, 4, LOCKSTEP_F32, LOCKSTEP_SUM); break;
    case 5: rc = odd ? lockstep_comm_allgather(c, v, v + 16, 8, 0, 0) : lockstep_comm_broadcast(c, v, 8, 0, 0, 0); break;
    case 6: /* large on one side, small on the other */
    {
        size_t n = odd ? 1u << 20 : 100;
        float *big = calloc(n, sizeof(float));
        rc = lockstep_comm_allreduce(c, big, big, n, LOCKSTEP_F32, LOCKSTEP_SUM);
        free(big);
        break;
    }
    case 7: rc = lockstep_comm_broadcast(c, v, 16, 0, LOCKSTEP_ORDER_LINEAR, odd ? LOCKSTEP_PUSH : LOCKSTEP_PULL); break;
    case 8: rc = lockstep_comm_allgather(c, v, v + 16, 8, LOCKSTEP_ORDER_LINEAR, odd ? LOCKSTEP_PULL : LOCKSTEP_PUSH); break;
    case 9: /* reduce-scatter against an allreduce of as many elements */
        rc = odd ? lockstep_comm_reduce_scatter(c, v, v + 32, 8, LOCKSTEP_F32, LOCKSTEP_SUM)
                 : lockstep_comm_allreduce(c, v, v, 8, LOCKSTEP_F32, LOCKSTEP_SUM);
        break;
    case 10: /* all-to-all against an allgather of as many bytes */
        rc = odd ? lockstep_comm_alltoall(c, v, v + 32, 16) : lockstep_comm_allgather(c, v, v + 32, 16, 0, 0);
        break;
    case 11: rc = lockstep_comm_allreduce(c, v, v, 4, LOCKSTEP_F32, LOCKSTEP_SUM); break;
    case 12: rc = lockstep_comm_barrier(c); break;
    case 13:
        rc = lockstep_comm_broadcast(c, v, 16, 0, LOCKSTEP_ORDER_LINEAR, LOCKSTEP_PULL);
        if (rank == 0) { /* the eager root: done; the mismatch meets it in its next call */
            CHECK_EQ(rc, 0);
            rc = lockstep_comm_barrier(c);
        }
        break;
    }
    if (rc != -LOCKSTEP_EMISMATCH) {
        fprintf(stderr, "case %d rank %d: got %s, want mismatch\n", mismatch_case, rank, lockstep_strerror(rc));
        return 1;
    }
    CHECK_EQ(lockstep_comm_allreduce(c, v, v, 1, LOCKSTEP_F32, LOCKSTEP_SUM), -LOCKSTEP_EMISMATCH);
    lockstep_comm_free(c);
    return 0;
}

/* ---- bad arguments ------------------------------------------------------------------ */

static int args_body(int rank, int size, const char *job)
{
    lockstep_comm_t *c = harness_comm(rank, size, job, 20000);
    if (!c)
        return 1;
    float v[16] = {0};
    CHECK_EQ(lockstep_comm_allreduce(NULL, v, v, 1, LOCKSTEP_F32, LOCKSTEP_SUM), -EINVAL);
    CHECK_EQ(lockstep_comm_allreduce(c, v, v, 1, (lockstep_dtype_t)7, LOCKSTEP_SUM), -EINVAL);
    CHECK_EQ(lockstep_comm_allreduce(c, v, v, 1, LOCKSTEP_F32, (lockstep_op_t)5), -EINVAL);
    CHECK_EQ(lockstep_comm_allreduce(c, NULL, v, 1, LOCKSTEP_F32, LOCKSTEP_SUM), -EINVAL);
    CHECK_EQ(lockstep_comm_allreduce(c, v, v + 1, 4, LOCKSTEP_F32, LOCKSTEP_SUM), -EINVAL);
    CHECK_EQ(lockstep_comm_allreduce(c, v, v, SIZE_MAX / 2, LOCKSTEP_F32, LOCKSTEP_SUM), -EINVAL);
    CHECK_EQ(lockstep_comm_broadcast(c, v, 4, -1, 0, 0), -EINVAL);
    CHECK_EQ(lockstep_comm_broadcast(c, v, 4, size, 0, 0), -EINVAL);
    CHECK_EQ(lockstep_comm_broadcast(c, NULL, 4, 0, 0, 0), -EINVAL);
    CHECK_EQ(lockstep_comm_broadcast(c, v, 4, 0, (lockstep_order_t)9, 0), -EINVAL);
    CHECK_EQ(lockstep_comm_allgather(c, v, v, 4, 0, (lockstep_xfer_t)3), -EINVAL);
    CHECK_EQ(lockstep_comm_allgather(c, v + 1, v, 8, 0, 0), -EINVAL); /* overlapping, not in place */
    CHECK_EQ(lockstep_comm_barrier(NULL), -EINVAL);
    CHECK_EQ(lockstep_comm_rank(NULL), -EINVAL);
    CHECK_EQ(lockstep_comm_tag(NULL, 1), -EINVAL);
    CHECK_EQ(lockstep_comm_tag(c, 256), -EINVAL); /* and the tag stays 0, as on the other rank */
    CHECK_EQ(lockstep_comm_tag(c, rank == 1 ? 1000 : 0), rank == 1 ? -EINVAL : 0);
    /* none of that broke the communicator: a real call still works */
    v[0] = 1.0f;
    CHECK_EQ(lockstep_comm_allreduce(c, v, v, 1, LOCKSTEP_F32, LOCKSTEP_SUM), 0);
    CHECK(v[0] == (float)size);
    lockstep_comm_free(c);
    return 0;
}

/* ---- one rank's invalid arguments: a refused call --------------------------------- */

/* Rank 1 (or every rank) passes invalid arguments; the others call the same collective
 * correctly (or another one). The deadline (60 s) is twice the watchdog: peers that
 * waited for it instead of seeing the refusal fail by the watchdog. */
static int refuse_case;
enum { REFUSE_CASES = 11 };

/* Rank `bad`'s call in case k with invalid arguments when bad, else a valid one. */
static int refuse_call(lockstep_comm_t *c, int k, int bad, float *v, float *big, size_t nbig, int size)
{
    switch (k) {
    case 0: return lockstep_comm_allreduce(c, bad ? NULL : v, v, 4, LOCKSTEP_F32, LOCKSTEP_SUM);
    case 1: return lockstep_comm_broadcast(c, v, 16, bad ? size : 0, LOCKSTEP_ORDER_LINEAR, LOCKSTEP_PULL);
    case 2: return lockstep_comm_allgather(c, bad ? v + 1 : v + 64, v, 8, 0, 0); /* bad: overlapping */
    case 3: return lockstep_comm_alltoall(c, v, bad ? v + 1 : v + 64, 4);      /* bad: overlapping */
    case 4: return lockstep_comm_reduce_scatter(c, v, v + 64, 2, LOCKSTEP_F32, bad ? (lockstep_op_t)9 : LOCKSTEP_SUM);
    case 5: /* the others are in a barrier: the refuser joins its episode */
        return bad ? lockstep_comm_allreduce(c, v, v, 1, (lockstep_dtype_t)7, LOCKSTEP_SUM) : lockstep_comm_barrier(c);
    case 6: /* every rank's arguments are invalid */
        return lockstep_comm_allreduce(c, v, v + 1, 4, LOCKSTEP_F32, LOCKSTEP_SUM);
    case 7: /* the others copy a large message's first chunk in before announcing */
        return bad ? lockstep_comm_refuse(c) : lockstep_comm_allreduce(c, big, big, nbig, LOCKSTEP_F32, LOCKSTEP_SUM);
    default: return -1;
    }
}

static int refuse_body(int rank, int size, const char *job)
{
    lockstep_comm_t *c = harness_comm(rank, size, job, 60000);
    if (!c)
        return 1;
    float v[128] = {0};
    size_t nbig = (size_t)1 << 18; /* 1 MiB: the large path, CMA where ranks fit the CPUs */
    float *big = malloc(nbig * sizeof(float));
    CHECK(big != NULL);
    for (size_t i = 0; i < nbig; i++)
        big[i] = (float)(i % 7);
    int k = refuse_case, bad = rank == 1 || k == 6;
    int rc = refuse_call(c, k, bad, v, big, nbig, size);
    int want = k == 7 && bad ? 0 : bad ? -EINVAL : -LOCKSTEP_EPEERINVAL;
    if (rc != want) {
        fprintf(stderr, "refuse case %d rank %d of %d: got %s, want %s\n", k, rank, size, lockstep_strerror(rc),
                lockstep_strerror(want));
        return 1;
    }
    /* the call did nothing, and the communicator goes on: a large and a small call */
    for (size_t i = 0; i < nbig; i++)
        big[i] = (float)((i + (size_t)rank) % 5);
    CHECK_EQ(lockstep_comm_allreduce(c, big, big, nbig, LOCKSTEP_F32, LOCKSTEP_SUM), 0);
    for (size_t i = 0; i < nbig; i += 4099) {
        float want_i = 0;
        for (int r = 0; r < size; r++)
            want_i += (float)((i + (size_t)r) % 5);
        CHECK(big[i] == want_i);
    }
    v[0] = (float)rank;
    CHECK_EQ(lockstep_comm_allreduce(c, v, v, 1, LOCKSTEP_F32, LOCKSTEP_SUM), 0);
    CHECK(v[0] == (float)(size * (size - 1) / 2));
    CHECK_EQ(lockstep_comm_barrier(c), 0);
    free(big);
    lockstep_comm_free(c);
    return 0;
}

/* Calls the refusal cannot void: the communicator breaks, at once, on every rank.
 * Case 8 (3 ranks): rank 0 in a barrier, rank 2 in an allreduce, rank 1 refuses: rank
 * 2's allreduce is void, but rank 0's barrier cannot end, so the refuser breaks it.
 * Case 9: eager broadcasts, and the root refuses: the receivers never wait for it.
 * Case 10: the same, a receiver refuses: the root has gone on, the other receivers got
 * their data; the refuser's own wait finds the eager call and breaks it. */
static int refuse_break_body(int rank, int size, const char *job)
{
    lockstep_comm_params_t p = harness_params(rank, size, job);
    p.timeout_ms = 60000;
    p.broadcast_eager_bytes = refuse_case == 8 ? 0 : 1024;
    lockstep_comm_t *c = lockstep_comm_create(&p);
    CHECK(c != NULL);
    float v[16] = {0};
    int rc, want;
    if (refuse_case == 8) {
        rc = rank == 0 ? lockstep_comm_barrier(c)
             : rank == 1 ? lockstep_comm_allreduce(c, NULL, v, 4, LOCKSTEP_F32, LOCKSTEP_SUM)
                         : lockstep_comm_allreduce(c, v, v, 4, LOCKSTEP_F32, LOCKSTEP_SUM);
        want = rank == 0 ? -LOCKSTEP_EMISMATCH : rank == 1 ? -EINVAL : -LOCKSTEP_EPEERINVAL;
    } else {
        int refuser = refuse_case == 9 ? 0 : 1;
        rc = lockstep_comm_broadcast(c, rank == refuser ? NULL : v, 16, 0, 0, 0);
        /* case 10: the root and the other receivers finished theirs */
        want = rank == refuser ? -EINVAL : refuse_case == 10 ? 0 : -LOCKSTEP_EMISMATCH;
    }
    if (rc != want) {
        fprintf(stderr, "refuse case %d rank %d: got %s, want %s\n", refuse_case, rank, lockstep_strerror(rc),
                lockstep_strerror(want));
        return 1;
    }
    CHECK_EQ(lockstep_comm_allreduce(c, v, v, 1, LOCKSTEP_F32, LOCKSTEP_SUM), -LOCKSTEP_EMISMATCH);
    lockstep_comm_free(c);
    return 0;
}

static void test_refuse(void)
{
    char job[96];
    static const int sizes[] = {2, 3, 4};
    for (refuse_case = 0; refuse_case < REFUSE_CASES; refuse_case++)
        for (int i = 0; i < 3; i++) {
            int size = refuse_case == 8 ? 3 : refuse_case > 8 ? sizes[i] + 1 : sizes[i];
            if (refuse_case == 8 && i)
                break;
            harness_job(job, sizeof job, "refuse");
            int failed = harness_run(refuse_case >= 8 ? refuse_break_body : refuse_body, size, job, 30, 0);
            if (failed)
                fprintf(stderr, "refuse case %d at %d ranks: %d ranks failed\n", refuse_case, size, failed);
            CHECK_EQ(failed, 0);
            CHECK_EQ(shm_entries_with(job), 0);
        }
}

/* ---- rendezvous --------------------------------------------------------------------- */

static int disagree_on; /* 0: the size; 1: the allreduce switch point; 2: the buffer */

static int disagree_body(int rank, int size, const char *job)
{
    (void)size;
    lockstep_comm_params_t p = harness_params(rank, 2, job);
    if (disagree_on == 0)
        p.size = rank == 0 ? 2 : 3;
    else if (rank == 1 && disagree_on == 1)
        p.allreduce_small_bytes = 4096; /* the ranks would take different paths */
    else if (rank == 1)
        p.buffer_bytes = 4096;
    /* Far past any scheduling delay: the mismatch, not the clock, must end both
     * creates (rank 0's through the failure rank 1 records in the segment). */
    p.timeout_ms = 10000;
    if (rank == 1)
        usleep(20 * 1000); /* most often rank 0 is then waiting for it */
    errno = 0;
    lockstep_comm_t *c = lockstep_comm_create(&p);
    CHECK(c == NULL);
    CHECK_EQ(errno, LOCKSTEP_EMISMATCH);
    return 0;
}

/* A rank given to two processes: 3 ranks, with processes 1 and 3 both rank 1 (3 a
 * little later, so most often it is the one refused). Whichever claims the rank second
 * gets EBUSY and touches nothing of the job: rank 2 comes only after that (value[0][0]
 * says so), and ranks 0, 1 and 2 then join and reduce their own values exactly. */
static int duplicate_body(int proc, int size, const char *job)
{
    (void)size;
    volatile int64_t *refused = &harness_page()->value[0][0];
    int rank = proc == 3 ? 1 : proc;
    if (proc == 3)
        usleep(50 * 1000);
    if (proc == 2) /* the job must still be joining when the second claim comes */
        for (int i = 0; i < 20000 && __atomic_load_n(refused, __ATOMIC_ACQUIRE) == 0; i++)
            usleep(1000);
    lockstep_comm_params_t p = harness_params(rank, 3, job);
    p.timeout_ms = 30000;
    errno = 0;
    lockstep_comm_t *c = lockstep_comm_create(&p);
    if (!c) {
        CHECK(rank == 1);
        CHECK_EQ(errno, EBUSY);
        CHECK_EQ(__atomic_fetch_add(refused, 1, __ATOMIC_RELEASE), 0); /* only one is refused */
        return 0;
    }
    CHECK_EQ(__atomic_load_n(refused, __ATOMIC_ACQUIRE), 1); /* the other rank 1 was refused */
    int32_t v = 1 << (4 * rank);
    CHECK_EQ(lockstep_comm_allreduce(c, &v, &v, 1, LOCKSTEP_I32, LOCKSTEP_SUM), 0);
    CHECK_EQ(v, 0x111);
    CHECK_EQ(lockstep_comm_barrier(c), 0);
    lockstep_comm_free(c);
    return 0;
}

/* allreduce_small_bytes = 0: rank 0 picks the switch (32 KiB / (size - 1), at least
 * 512 B, while ranks fit the CPUs, 8 KiB when they outnumber them). A rank that names
 * the same value joins; another value is a mismatch; a rank that leaves it at 0 takes
 * rank 0's choice. */
/* 0: rank 1 names rank 0's choice; 1: another; 2: rank 0 names it; 3 and 4: rank 0 is
 * told that more processes than CPUs share them (cpu_sharers), so it picks the
 * oversubscribed switch, and rank 1 names that (3) or the other (4) */
static int auto_switch_mode;

static int auto_switch_body(int rank, int size, const char *job)
{
    lockstep_comm_params_t p = harness_params(rank, size, job);
    int cpus = lockstep_cpus_available();
    CHECK_EQ(p.cpu_sharers, 0);
    if (auto_switch_mode >= 3 && rank == 0)
        p.cpu_sharers = cpus + 1 > size ? cpus + 1 : size;
    size_t fits = (size_t)32768 / (size_t)(size - 1) / 256 * 256;
    if (fits < 512)
        fits = 512;
    size_t picked = (unsigned)size > (unsigned)cpus || auto_switch_mode >= 3 ? 8192 : fits;
    CHECK_EQ(p.allreduce_small_bytes, 0);
    if ((auto_switch_mode == 0 || auto_switch_mode == 3) && rank == 1)
        p.allreduce_small_bytes = picked;
    else if ((auto_switch_mode == 1 || auto_switch_mode == 4) && rank == 1)
        p.allreduce_small_bytes = picked == 8192 ? 512 : 8192;
    else if (auto_switch_mode == 2 && rank == 0)
        p.allreduce_small_bytes = 4096;
    p.timeout_ms = 10000;
    errno = 0;
    lockstep_comm_t *c = lockstep_comm_create(&p);
    if (auto_switch_mode == 1 || auto_switch_mode == 4) {
        CHECK(c == NULL);
        CHECK_EQ(errno, LOCKSTEP_EMISMATCH);
        return 0;
    }
    CHECK(c != NULL);
    /* both ranks take the same path on each side of the switch: the sums agree */
    static float v[10000]; /* up to 39 KiB: both sides of every switch */
    for (size_t n = 50; n <= 10000; n += 1400) {
        for (size_t i = 0; i < n; i++)
            v[i] = (float)(rank + 1) * (float)(i % 7);
        CHECK_EQ(lockstep_comm_allreduce(c, v, v, n, LOCKSTEP_F32, LOCKSTEP_SUM), 0);
        for (size_t i = 0; i < n; i++)
            CHECK(v[i] == 3.0f * (float)(i % 7));
    }
    lockstep_comm_free(c);
    return 0;
}

static void test_rendezvous(void)
{
    char job[96];
    lockstep_comm_params_t p = lockstep_comm_params_default();
    CHECK(lockstep_comm_create(NULL) == NULL && errno == EINVAL);
    CHECK(lockstep_comm_create(&p) == NULL && errno == EINVAL); /* empty job */
    snprintf(p.job, sizeof p.job, "x");
    p.size = 0;
    CHECK(lockstep_comm_create(&p) == NULL && errno == EINVAL);
    p.size = 2;
    p.rank = 2;
    CHECK(lockstep_comm_create(&p) == NULL && errno == EINVAL);
    p.rank = 0;
    p.small_bytes = 100;
    CHECK(lockstep_comm_create(&p) == NULL && errno == EINVAL);
    p.small_bytes = 4096 + 32; /* not a multiple of 64 */
    CHECK(lockstep_comm_create(&p) == NULL && errno == EINVAL);
    p = lockstep_comm_params_default();
    snprintf(p.job, sizeof p.job, "x");
    p.allreduce_small_bytes = 100;
    CHECK(lockstep_comm_create(&p) == NULL && errno == EINVAL);
    p.allreduce_small_bytes = ((size_t)1 << 30) + 1;
    CHECK(lockstep_comm_create(&p) == NULL && errno == EINVAL);
    p.allreduce_small_bytes = 8192;
    p.chunk_bytes = 4000;
    CHECK(lockstep_comm_create(&p) == NULL && errno == EINVAL);
    /* the check create makes, with the field to fix named */
    char why[160];
    CHECK_EQ(lockstep_comm_params_check(&p, why, sizeof why), -EINVAL);
    CHECK(strstr(why, "chunk_bytes") == why && strstr(why, "got 4000") != NULL);
    p.chunk_bytes = 4096;
    CHECK_EQ(lockstep_comm_params_check(&p, why, sizeof why), 0);
    CHECK_EQ(why[0], 0);
    p.allreduce_small_bytes = 100;
    CHECK_EQ(lockstep_comm_params_check(&p, NULL, 0), -EINVAL);
    CHECK_EQ(lockstep_comm_params_check(&p, why, sizeof why), -EINVAL);
    CHECK(strstr(why, "allreduce_small_bytes") == why);
    p.allreduce_small_bytes = 8192;
    p.small_bytes = 4096 + 32;
    CHECK_EQ(lockstep_comm_params_check(&p, why, 12), -EINVAL); /* truncated, terminated */
    CHECK(strcmp(why, "small_bytes") == 0);
    CHECK_EQ(lockstep_comm_params_check(NULL, why, sizeof why), -EINVAL);

    /* a rank that never comes: the others time out and the name is gone */
    harness_job(job, sizeof job, "alone");
    p = lockstep_comm_params_default();
    snprintf(p.job, sizeof p.job, "%s", job);
    p.size = 2;
    p.timeout_ms = 200;
    CHECK(lockstep_comm_create(&p) == NULL && errno == ETIMEDOUT);
    CHECK_EQ(shm_entries_with(job), 0);
    p.rank = 1; /* a non-zero rank whose rank 0 never comes */
    CHECK(lockstep_comm_create(&p) == NULL && errno == ETIMEDOUT);

    /* ranks that disagree on the size */
    harness_run_clean(disagree_body, 2, "size", 30, 0);
    disagree_on = 1;
    harness_run_clean(disagree_body, 2, "switch", 30, 0);
    disagree_on = 2;
    harness_run_clean(disagree_body, 2, "buffer", 30, 0);
    disagree_on = 0;
    harness_page()->value[0][0] = 0;
    harness_run_clean(duplicate_body, 4, "duplicate", 60, 0);
    for (auto_switch_mode = 0; auto_switch_mode < 5; auto_switch_mode++) {
        harness_run_clean(auto_switch_body, 2, "auto", 30, 0);
    }
    p = lockstep_comm_params_default();
    snprintf(p.job, sizeof p.job, "x");
    p.allreduce_small_bytes = 0;
    CHECK_EQ(lockstep_comm_params_check(&p, why, sizeof why), 0);
    /* cpu_sharers: 0, or at least size */
    p.size = 3;
    p.cpu_sharers = 3;
    CHECK_EQ(lockstep_comm_params_check(&p, why, sizeof why), 0);
    p.cpu_sharers = 2;
    CHECK_EQ(lockstep_comm_params_check(&p, why, sizeof why), -EINVAL);
    CHECK(strstr(why, "cpu_sharers") == why && strstr(why, "got 2, size 3") != NULL);
    p.cpu_sharers = -1;
    CHECK_EQ(lockstep_comm_params_check(&p, why, sizeof why), -EINVAL);
    CHECK(lockstep_comm_create(&p) == NULL && errno == EINVAL);

    /* buffer_bytes: at most 2**40; a segment /dev/shm cannot hold fails with ENOSPC at
     * create (every page is allocated there), not with a SIGBUS at first use */
    p = lockstep_comm_params_default();
    snprintf(p.job, sizeof p.job, "x");
    p.buffer_bytes = ((size_t)1 << 40) + 1;
    CHECK_EQ(lockstep_comm_params_check(&p, why, sizeof why), -EINVAL);
    CHECK(strstr(why, "buffer_bytes") == why);
    struct statvfs fs;
    if (statvfs("/dev/shm", &fs) == 0 && fs.f_blocks > 0 && (uint64_t)fs.f_blocks * fs.f_frsize < ((uint64_t)1 << 40)) {
        harness_job(job, sizeof job, "full");
        snprintf(p.job, sizeof p.job, "%s", job);
        p.buffer_bytes = (size_t)fs.f_blocks * fs.f_frsize; /* the whole of /dev/shm, plus the slots */
        errno = 0;
        CHECK(lockstep_comm_create(&p) == NULL);
        CHECK_EQ(errno, ENOSPC);
        CHECK_EQ(shm_entries_with(job), 0);
    }

    /* a stale segment (creator dead) is replaced; a live one is refused */
    harness_job(job, sizeof job, "stale");
    char name[160];
    snprintf(name, sizeof name, "/lockstep-%s", job);
    pid_t dead = fork();
    if (dead == 0)
        _exit(0);
    waitpid(dead, NULL, 0);
    int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
    CHECK(fd >= 0);
    struct stat ns;
    CHECK(stat("/proc/self/ns/pid", &ns) == 0);
    /* magic (comm_impl.h: LS_COMM_MAGIC, "lsc" and the protocol), size, the creator's
     * pid and PID namespace */
    int32_t hdr[4] = {SEG_MAGIC, 1, (int32_t)dead, (int32_t)(uint32_t)ns.st_ino};
    CHECK(ftruncate(fd, 4096) == 0);
    CHECK(write(fd, hdr, sizeof hdr) == (ssize_t)sizeof hdr);
    close(fd);
    p = lockstep_comm_params_default();
    snprintf(p.job, sizeof p.job, "%s", job);
    lockstep_comm_t *c = lockstep_comm_create(&p);
    CHECK(c != NULL);
    CHECK_EQ(shm_entries_with(job), 0);
    lockstep_comm_free(c);

    /* an abandoned segment of another job (its rank 0 killed mid-rendezvous) is swept
     * away by the next rank 0 of any job */
    char other[96], other_name[160];
    harness_job(other, sizeof other, "abandoned");
    snprintf(other_name, sizeof other_name, "/lockstep-%s", other);
    fd = shm_open(other_name, O_CREAT | O_EXCL | O_RDWR, 0600);
    CHECK(fd >= 0);
    hdr[2] = (int32_t)dead;
    CHECK(ftruncate(fd, 4096) == 0);
    CHECK(write(fd, hdr, sizeof hdr) == (ssize_t)sizeof hdr);
    close(fd);
    CHECK_EQ(shm_entries_with(other), 1);
    c = lockstep_comm_create(&p);
    CHECK(c != NULL);
    CHECK_EQ(shm_entries_with(other), 0);
    lockstep_comm_free(c);

    /* the same from another PID namespace (a container sharing /dev/shm): its pid
     * names no process here, so its creator's liveness lock on byte 0 decides. Held
     * (as a live rank 0 holds it): neither swept nor replaced; let go: swept */
    struct flock creator = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1};
    hdr[3] = (int32_t)((uint32_t)ns.st_ino + 1u);
    fd = shm_open(other_name, O_CREAT | O_EXCL | O_RDWR, 0600);
    CHECK(fd >= 0);
    CHECK(ftruncate(fd, 4096) == 0);
    CHECK(write(fd, hdr, sizeof hdr) == (ssize_t)sizeof hdr);
    CHECK(fcntl(fd, F_OFD_SETLK, &creator) == 0);
    c = lockstep_comm_create(&p); /* sweeps: leaves it */
    CHECK(c != NULL);
    lockstep_comm_free(c);
    CHECK_EQ(shm_entries_with(other), 1);
    lockstep_comm_params_t q = p;
    snprintf(q.job, sizeof q.job, "%s", other);
    CHECK(lockstep_comm_create(&q) == NULL && errno == EEXIST); /* not replaced */
    CHECK_EQ(shm_entries_with(other), 1);
    close(fd); /* its creator ends */
    c = lockstep_comm_create(&p);
    CHECK(c != NULL);
    lockstep_comm_free(c);
    CHECK_EQ(shm_entries_with(other), 0); /* swept */
    hdr[3] = (int32_t)(uint32_t)ns.st_ino;

    /* a live rank 0 of another build (another protocol byte): a joiner refuses it at
     * once with EPROTO, and leaves it alone, instead of waiting for a header it can
     * read until its deadline */
    fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
    CHECK(fd >= 0);
    int32_t other_build[4] = {SEG_MAGIC + 1, 2, (int32_t)getpid(), hdr[3]};
    CHECK(ftruncate(fd, 4096) == 0);
    CHECK(write(fd, other_build, sizeof other_build) == (ssize_t)sizeof other_build);
    CHECK(fcntl(fd, F_OFD_SETLK, &creator) == 0);
    q = p;
    q.rank = 1;
    q.size = 2;
    q.timeout_ms = 20000;
    errno = 0;
    CHECK(lockstep_comm_create(&q) == NULL);
    CHECK_EQ(errno, EPROTO);
    int32_t after[4] = {0};
    CHECK(pread(fd, after, sizeof after, 0) == (ssize_t)sizeof after);
    CHECK(memcmp(after, other_build, sizeof after) == 0);
    CHECK_EQ(shm_entries_with(job), 1);
    close(fd);
    shm_unlink(name);

    fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
    CHECK(fd >= 0);
    hdr[2] = (int32_t)getpid(); /* alive: us, holding the creator's lock */
    CHECK(ftruncate(fd, 4096) == 0);
    CHECK(write(fd, hdr, sizeof hdr) == (ssize_t)sizeof hdr);
    CHECK(fcntl(fd, F_OFD_SETLK, &creator) == 0);
    CHECK(lockstep_comm_create(&p) == NULL && errno == EEXIST);
    close(fd);
    shm_unlink(name);
}

/* ---- environment ------------------------------------------------------------------- */

static void clear_env(void)
{
    const char *vars[] = {"LOCAL_RANK", "LOCAL_WORLD_SIZE", "RANK", "WORLD_SIZE", "MASTER_ADDR",
                          "MASTER_PORT", "TORCHELASTIC_RUN_ID", "GROUP_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
                          "OMPI_COMM_WORLD_LOCAL_SIZE", "OMPI_MCA_orte_ess_jobid", "PMIX_NAMESPACE",
                          "LOCKSTEP_RANK", "LOCKSTEP_SIZE", "LOCKSTEP_JOB"};
    for (unsigned i = 0; i < sizeof vars / sizeof vars[0]; i++)
        unsetenv(vars[i]);
}

static void test_env(void)
{
    lockstep_comm_params_t p = lockstep_comm_params_default();
    clear_env();
    CHECK_EQ(lockstep_comm_params_from_env(&p), -ENOENT);
    CHECK_EQ(lockstep_comm_params_from_env(NULL), -EINVAL);

    setenv("LOCAL_RANK", "1", 1);
    setenv("LOCAL_WORLD_SIZE", "4", 1);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("MASTER_PORT", "29500", 1);
    CHECK_EQ(lockstep_comm_params_from_env(&p), 0);
    CHECK_EQ(p.rank, 1);
    CHECK_EQ(p.size, 4);
    CHECK(strcmp(p.job, "torch-127.0.0.1-29500") == 0);
    setenv("GROUP_RANK", "0", 1); /* torchrun's node 0: the name as before */
    CHECK_EQ(lockstep_comm_params_from_env(&p), 0);
    CHECK(strcmp(p.job, "torch-127.0.0.1-29500") == 0);
    setenv("TORCHELASTIC_RUN_ID", "none", 1);
    setenv("GROUP_RANK", "1", 1); /* another node (emulated on this machine): a job of its own */
    CHECK_EQ(lockstep_comm_params_from_env(&p), 0);
    CHECK(strcmp(p.job, "torch-127.0.0.1-29500-none-node1") == 0);
    unsetenv("GROUP_RANK");
    unsetenv("TORCHELASTIC_RUN_ID");
    setenv("LOCAL_RANK", "one", 1);
    CHECK_EQ(lockstep_comm_params_from_env(&p), -EINVAL);
    CHECK(strcmp(lockstep_comm_env_error(), "LOCAL_RANK") == 0);
    setenv("LOCAL_RANK", "4", 1); /* rank >= size: the rank is blamed */
    CHECK_EQ(lockstep_comm_params_from_env(&p), -EINVAL);
    CHECK(strcmp(lockstep_comm_env_error(), "LOCAL_RANK") == 0);
    setenv("LOCAL_RANK", "0", 1);
    setenv("LOCAL_WORLD_SIZE", "0", 1); /* no ranks at all: the size */
    CHECK_EQ(lockstep_comm_params_from_env(&p), -EINVAL);
    CHECK(strcmp(lockstep_comm_env_error(), "LOCAL_WORLD_SIZE") == 0);
    setenv("LOCAL_WORLD_SIZE", "257", 1); /* past LOCKSTEP_COMM_MAX_RANKS */
    CHECK_EQ(lockstep_comm_params_from_env(&p), -EINVAL);
    CHECK(strcmp(lockstep_comm_env_error(), "LOCAL_WORLD_SIZE") == 0);
    unsetenv("LOCAL_WORLD_SIZE");
    setenv("LOCAL_RANK", "0", 1);
    CHECK_EQ(lockstep_comm_params_from_env(&p), -EINVAL); /* half a set */
    CHECK(strcmp(lockstep_comm_env_error(), "LOCAL_WORLD_SIZE") == 0);

    clear_env();
    setenv("RANK", "2", 1);
    setenv("WORLD_SIZE", "3", 1);
    CHECK_EQ(lockstep_comm_params_from_env(&p), 0);
    CHECK_EQ(p.rank, 2);
    CHECK_EQ(p.size, 3);
    setenv("RANK", "3", 1); /* torchrun's global pair in use: its names are blamed */
    CHECK_EQ(lockstep_comm_params_from_env(&p), -EINVAL);
    CHECK(strcmp(lockstep_comm_env_error(), "RANK") == 0);
    unsetenv("WORLD_SIZE");
    CHECK_EQ(lockstep_comm_params_from_env(&p), -EINVAL);
    CHECK(strcmp(lockstep_comm_env_error(), "WORLD_SIZE") == 0);

    clear_env();
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "3", 1);
    setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "8", 1);
    setenv("PMIX_NAMESPACE", "prterun-host-123@1", 1);
    CHECK_EQ(lockstep_comm_params_from_env(&p), 0);
    CHECK_EQ(p.rank, 3);
    CHECK_EQ(p.size, 8);
    CHECK(strcmp(p.job, "ompi-prterun-host-123_1") == 0);

    clear_env();
    setenv("LOCKSTEP_RANK", "0", 1);
    setenv("LOCKSTEP_SIZE", "2", 1);
    setenv("LOCKSTEP_JOB", "myjob", 1);
    CHECK_EQ(lockstep_comm_params_from_env(&p), 0);
    CHECK(strcmp(p.job, "myjob") == 0);
    clear_env();
}

int main(int argc, char **argv)
{
    watchdog(300);
    const char *t = argc > 1 ? argv[1] : "";
    char job[96];
    /* the single copies these cases kill or stall in, wherever kernel copies are slow */
    if (strcmp(t, "peer_death") == 0 || strcmp(t, "cma_drain") == 0)
        CHECK_EQ(setenv("LOCKSTEP_KERNEL_COPY", "fast", 1), 0);
    if (strcmp(t, "peer_death") == 0) {
        test_peer_death(1000, 0, 0);     /* small messages */
        kill_ranks = lockstep_cpus_available();
        kill_ranks = kill_ranks < 2 ? 2 : kill_ranks > 3 ? 3 : kill_ranks;
        test_peer_death(1u << 21, 0, 0); /* 8 MiB, single copy (process_vm_readv/writev) */
        test_peer_death(1u << 21, 0, 1); /* push broadcast, 2 ranks: single copy, half each */
        test_peer_death(1u << 15, 0, 1); /* the same at 128 KiB, on the small path */
        kill_ranks = 3;
        test_peer_death(1u << 21, 1, 0); /* 8 MiB, zero-copy */
        test_peer_death(1u << 21, 1, 1); /* zero-copy push broadcast: the root dies too */
        test_peer_death(1u << 21, 1, 6); /* the same, a rank in the middle of the relay dies */
        test_peer_death(1u << 21, 1, 2); /* zero-copy push allgather */
        test_peer_death(1u << 21, 0, 3); /* chunked reduce-scatter */
        test_peer_death(1u << 21, 1, 4); /* zero-copy all-to-all */
        test_peer_death(1u << 21, 0, 4); /* single-copy all-to-all (process_vm_writev) */
        test_peer_death(1u << 21, 0, 5); /* pull allgather: single copy (process_vm_readv) where
                                          * 3 ranks fit the CPUs, else through the slots */
        test_peer_death(1u << 21, 0, 2); /* single-copy push allgather (process_vm_writev),
                                          * at any CPU count */
        kill_no_cma = 1;
        test_peer_death(1u << 21, 0, 0); /* 8 MiB through the slots: killed between chunk steps */
        test_peer_death(1u << 21, 0, 4); /* all-to-all through the slots */
    } else if (strcmp(t, "announced_death") == 0) {
        test_announced_death();
    } else if (strcmp(t, "cma_drain") == 0) {
        return test_cma_drain();
    } else if (strcmp(t, "timeout") == 0) {
        harness_run_clean(late_body, 2, "late", 60, 0);
    } else if (strcmp(t, "mismatch") == 0) {
        for (mismatch_case = 0; mismatch_case <= 13; mismatch_case++) {
            harness_job(job, sizeof job, "mismatch");
            if (harness_run(mismatch_body, 2, job, 60, 0) != 0) {
                fprintf(stderr, "mismatch case %d failed\n", mismatch_case);
                return 1;
            }
        }
    } else if (strcmp(t, "args") == 0) {
        harness_job(job, sizeof job, "args");
        CHECK_EQ(harness_run(args_body, 2, job, 60, 0), 0);
    } else if (strcmp(t, "refuse") == 0) {
        test_refuse();
    } else if (strcmp(t, "rendezvous") == 0) {
        test_rendezvous();
    } else if (strcmp(t, "env") == 0) {
        test_env();
    } else if (strcmp(t, "cancel") == 0) {
        test_cancel();
    } else if (strcmp(t, "race") == 0) {
        test_race();
    } else if (strcmp(t, "leave") == 0) {
        test_leave();
    } else if (strcmp(t, "busy") == 0) {
        test_busy();
    } else if (strcmp(t, "fork") == 0) {
        test_fork();
    } else if (strcmp(t, "pidns") == 0) {
        return test_pidns();
    } else if (strcmp(t, "freed") == 0) {
        test_freed();
    } else if (strcmp(t, "kernel_copy") == 0) {
        test_kernel_copy();
    } else {
        fprintf(stderr, "usage: %s peer_death|announced_death|cma_drain|timeout|mismatch|args|refuse|rendezvous|env|cancel|race|leave|busy|fork|pidns|freed|kernel_copy\n", argv[0]);
        return 1;
    }
    return 0;
}
