/* One thread at a time: a second thread's call on a communicator in use returns -EBUSY
 * and touches nothing, and the call in flight goes on. */
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
        CHECK_EQ(lockstep_comm_allreduce(c, x, x, 4, LOCKSTEP_DTYPE_I32, LOCKSTEP_OP_SUM), -EBUSY);
        CHECK_EQ(lockstep_comm_broadcast(c, x, sizeof x, 1, LOCKSTEP_ORDER_LINEAR, LOCKSTEP_XFER_PULL), -EBUSY);
        CHECK_EQ(lockstep_comm_allgather(c, x, y, sizeof x, LOCKSTEP_ORDER_LINEAR, LOCKSTEP_XFER_PUSH), -EBUSY);
        CHECK_EQ(lockstep_comm_reduce_scatter(c, x, y, 2, LOCKSTEP_DTYPE_I32, LOCKSTEP_OP_SUM), -EBUSY);
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
    CHECK_EQ(lockstep_comm_allreduce(c, x, x, 4, LOCKSTEP_DTYPE_I32, LOCKSTEP_OP_SUM), 0);
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

int main(int argc, char **argv)
{
    watchdog(300);
    const char *t = argc > 1 ? argv[1] : "";
    if (strcmp(t, "busy") == 0) {
        test_busy();
    } else {
        fprintf(stderr, "usage: %s busy\n", argv[0]);
        return 1;
    }
    return 0;
}
