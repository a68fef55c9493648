/* A peer that dies: a rank SIGKILLed in the middle of any call, on every route, makes
 * the others fail with -LOCKSTEP_EPEERDIED before the deadline, and nothing is left in
 * /dev/shm; a kernel-copy write under way when its target fails lands before the
 * target returns, never after. */
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

/* ---- peer death ------------------------------------------------------------------- */

static size_t kill_count;
static int kill_in_buffer; /* the calls run zero-copy, from the shared buffer */
static int kill_no_kcopy;  /* LOCKSTEP_KERNEL_COPY=off: large calls copy through the slots */
static int kill_call;      /* 0: allreduce; 1: push broadcast, root it % size; 2: push allgather;
                              3: reduce-scatter; 4: all-to-all; 5: pull allgather; 6: push
                              broadcast in the rotated order, root (it + 2) % size: at 3
                              ranks, the 5th call's root is 1 and its relay's chain 2, 0,
                              so the rank killed then (2) is in the middle */

static int kill_one_call(lockstep_comm_t *c, float *buf, int it, int size)
{
    size_t bytes = kill_count * sizeof(float);
    switch (kill_call) {
    case 1: return lockstep_comm_broadcast(c, buf, bytes, it % size, LOCKSTEP_ORDER_LINEAR, LOCKSTEP_XFER_PUSH);
    case 6: return lockstep_comm_broadcast(c, buf, bytes, (it + 2) % size, LOCKSTEP_ORDER_ROTATED, LOCKSTEP_XFER_PUSH);
    case 2: case 5: {
        size_t block = bytes / (size_t)size;
        int me = lockstep_comm_rank(c);
        return lockstep_comm_allgather(c, (char *)buf + (size_t)me * block, buf, block, LOCKSTEP_ORDER_LINEAR,
                                       kill_call == 2 ? LOCKSTEP_XFER_PUSH : LOCKSTEP_XFER_PULL);
    }
    case 3: {
        size_t block = kill_count / (size_t)size;
        return lockstep_comm_reduce_scatter(c, buf, buf + (size_t)lockstep_comm_rank(c) * block, block,
                                            LOCKSTEP_DTYPE_F32, LOCKSTEP_OP_SUM);
    }
    case 4: {
        size_t block = kill_count * sizeof(float) / 2 / (size_t)size; /* send, then recv */
        return lockstep_comm_alltoall(c, buf, (char *)buf + block * (size_t)size, block);
    }
    default: return lockstep_comm_allreduce(c, buf, buf, kill_count, LOCKSTEP_DTYPE_F32, LOCKSTEP_OP_SUM);
    }
}

static int kill_body(int rank, int size, const char *job)
{
    lockstep_comm_params_t p = harness_params(rank, size, job);
    p.timeout_ms = 20000;
    p.buffer_bytes = kill_in_buffer ? kill_count * sizeof(float) : 0;
    if (kill_no_kcopy)
        CHECK_EQ(setenv("LOCKSTEP_KERNEL_COPY", "off", 1), 0);
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
 * them: the kernel-copy allreduce runs only while ranks fit the CPUs */
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
    case 0: return lockstep_comm_broadcast(c, buf, announced_bytes, 1, LOCKSTEP_ORDER_ROTATED, LOCKSTEP_XFER_PUSH);
    case 1: return lockstep_comm_broadcast(c, buf, announced_bytes, 1, LOCKSTEP_ORDER_LINEAR, LOCKSTEP_XFER_PUSH);
    case 3: return lockstep_comm_broadcast(c, buf, announced_bytes / 16, 1, LOCKSTEP_ORDER_LINEAR, LOCKSTEP_XFER_PUSH);
    default:
        return lockstep_comm_allreduce(c, buf, buf, announced_bytes / sizeof(float), LOCKSTEP_DTYPE_F32, LOCKSTEP_OP_SUM);
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

/* ---- a kernel-copy write under way when its target fails ------------------------------ */

/* 2 ranks, a PUSH allgather of 1 MiB blocks by kernel copy: each writes its block into
 * the other's recv with process_vm_writev. Rank 0's write is held after its check
 * (LOCKSTEP_TEST_KCOPY_STALL_MS, perturbation builds only) until well past rank 1's
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
        CHECK_EQ(setenv("LOCKSTEP_TEST_KCOPY_STALL_MS", "600", 1), 0);
    lockstep_comm_t *c = lockstep_comm_create(&p);
    if (!c)
        return 1;
    unsigned char *send = malloc(drain_block), *recv = calloc(2, drain_block);
    CHECK(send != NULL && recv != NULL);
    memset(send, rank == 0 ? 0xa5 : 0x5a, drain_block);
    int rc = lockstep_comm_allgather(c, send, recv, drain_block, LOCKSTEP_ORDER_LINEAR, LOCKSTEP_XFER_PUSH);
    CHECK_EQ(rc, -ETIMEDOUT); /* rank 1's, recorded first: rank 0 sees it at its next piece */
    if (rank == 0) {
        __atomic_store_n(returned, 1, __ATOMIC_RELEASE);
    } else {
        uint64_t at_return = digest(recv, drain_block);
        while (!__atomic_load_n(returned, __ATOMIC_ACQUIRE))
            usleep(1000);
        CHECK_EQ(digest(recv, drain_block), at_return); /* nothing landed after the return */
        CHECK_EQ(recv[0], 0xa5);                        /* the held piece landed before it */
        CHECK_EQ(recv[LS_KCOPY_PIECE], 0);           /* and no piece after it */
    }
    lockstep_comm_free(c);
    free(send);
    free(recv);
    return 0;
}

#endif


static int test_kcopy_drain(void)
{
#ifndef LOCKSTEP_TEST_HOOKS
    fprintf(stderr, "skipped: needs a perturbation build (-DLOCKSTEP_PERTURB=ON: the debug preset)\n");
    return 77;
#else
    if (lockstep_cpus_available() < 2 || !siblings_can_read()) {
        fprintf(stderr, "skipped: kernel copies need 2 CPUs and process_vm_readv between siblings\n");
        return 77;
    }
    harness_page()->value[0][1] = 0;
    harness_run_clean(drain_body, 2, "drain", 60, 0);
    return 0;
#endif
}

int main(int argc, char **argv)
{
    watchdog(300);
    const char *t = argc > 1 ? argv[1] : "";
    /* the kernel copies these cases kill or stall in, past the table's upper limits */
    CHECK_EQ(setenv("LOCKSTEP_KERNEL_COPY", "wide", 1), 0);
    if (strcmp(t, "peer_death") == 0) {
        test_peer_death(1000, 0, 0);     /* small messages */
        kill_ranks = lockstep_cpus_available();
        kill_ranks = kill_ranks < 2 ? 2 : kill_ranks > 3 ? 3 : kill_ranks;
        test_peer_death(1u << 21, 0, 0); /* 8 MiB, kernel copy (process_vm_readv/writev) */
        test_peer_death(1u << 21, 0, 1); /* push broadcast, 2 ranks: kernel copy, half each */
        test_peer_death(1u << 15, 0, 1); /* the same at 128 KiB, on the small path */
        kill_ranks = 3;
        test_peer_death(1u << 21, 1, 0); /* 8 MiB, zero-copy */
        test_peer_death(1u << 21, 1, 1); /* zero-copy push broadcast: the root dies too */
        test_peer_death(1u << 21, 1, 6); /* the same, a rank in the middle of the relay dies */
        test_peer_death(1u << 21, 1, 2); /* zero-copy push allgather */
        test_peer_death(1u << 21, 0, 3); /* chunked reduce-scatter */
        test_peer_death(1u << 21, 1, 4); /* zero-copy all-to-all */
        test_peer_death(1u << 21, 0, 4); /* kernel-copy all-to-all (process_vm_writev) */
        test_peer_death(1u << 21, 0, 5); /* pull allgather: kernel copy (process_vm_readv) where
                                          * 3 ranks fit the CPUs, else through the slots */
        test_peer_death(1u << 21, 0, 2); /* kernel-copy push allgather (process_vm_writev),
                                          * at any CPU count */
        kill_no_kcopy = 1;
        test_peer_death(1u << 21, 0, 0); /* 8 MiB through the slots: killed between chunk steps */
        test_peer_death(1u << 21, 0, 4); /* all-to-all through the slots */
    } else if (strcmp(t, "announced_death") == 0) {
        test_announced_death();
    } else if (strcmp(t, "kcopy_drain") == 0) {
        return test_kcopy_drain();
    } else {
        fprintf(stderr, "usage: %s peer_death|announced_death|kcopy_drain\n", argv[0]);
        return 1;
    }
    return 0;
}
