/* The choice of way by timing both (src/comm/pick.h) in real calls, back to back, as a
 * loop of layers makes them: 2 ranks, kernel copies taken as slow
 * (LOCKSTEP_KERNEL_COPY=slow), so that small-path allgathers of 64 KiB blocks, large
 * all-to-alls, allreduces of 400 KB and small-path broadcasts of 20000 bytes from rank 1
 * (picked by their receiver, rank 0) all pick. After each run of calls, rank 0's own
 * record (white box: lockstep_comm's pick, comm_impl.h) must hold a cost for both ways
 * in every class the calls went through: each way ran and was timed. Every result is
 * checked too.
 *
 * Calls back to back are the case to watch: a peer starts its next call while rank 0
 * is still ending the last, so it may read rank 0's choice for the class before rank 0
 * has stored it. When the peers offered single copy only as they read that choice,
 * every look at single copy found a peer not offering, recorded single copy as a way
 * that could not run, and forgot its costs: here the allgathers' record then held none
 * for single copy, and this test failed.
 *
 * Which way is cheaper is the machine's, so it is not asserted. Skips with one CPU
 * (ranks must fit the CPUs to pick) or where a rank cannot take single copies
 * (lockstep_comm_kernel_copy "off": process_vm_readv not allowed, LOCKSTEP_NO_CMA). */
#include <sys/mman.h>

#include "comm_harness.h"
#include "../../src/comm/comm_impl.h"

#define BLOCK ((size_t)64 * 1024)   /* small-path allgather, PULL */
#define A2A ((size_t)300001)        /* all-to-all blocks, past LS_CMA_MAX_SLOW */
#define AR_COUNT ((size_t)100003)   /* f32 allreduce, 400 KB */
#define BCAST ((size_t)20000)       /* broadcast from rank 1, small path, below 64 KiB */
#define CALLS 80                    /* per collective: past LS_PICK_EVERY_MIN looks */

/* rank 0: every class from first to first + n that had calls has a cost for both ways */
static int both_timed(const lockstep_comm_t *c, int first, int n, const char *what)
{
    int classes = 0;
    for (int cls = first; cls < first + n; cls++) {
        const ls_pick_t *p = &c->pick[cls];
        if (!p->calls)
            continue;
        classes++;
        for (int way = 0; way < 2; way++)
            if (ls_pick_estimate(p, way) == LS_PICK_NONE) {
                fprintf(stderr, "%s: class %d, %u calls: way %d never timed\n", what, cls, p->calls, way);
                return 1;
            }
    }
    if (classes != 1) {
        fprintf(stderr, "%s: %d classes had calls, not 1\n", what, classes);
        return 1;
    }
    return 0;
}

/* Rank 0 gives its recv's pages back before each call, so that its copies fault them
 * in and it ends each call after its peer, as the slower rank does in a real job: the
 * peer then starts the next call while rank 0 is still in the last. The others change
 * one byte per block between calls and check two, so that they start the next at once. */
static void *recv_pages(size_t bytes)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

static void slower(int rank, void *p, size_t bytes)
{
    if (rank == 0)
        CHECK_EQ(madvise(p, bytes, MADV_DONTNEED), 0);
}

static int rank_main(int rank, int size, const char *job)
{
    lockstep_comm_t *c = harness_comm(rank, size, job, 60000);
    if (!c)
        return 1;
    int bad = 0;
    int32_t can = strcmp(lockstep_comm_kernel_copy(c), "off") != 0; /* single copies, every rank? */
    CHECK_EQ(lockstep_comm_allreduce(c, &can, &can, 1, LOCKSTEP_I32, LOCKSTEP_MIN), 0);
    if (!can) {
        harness_page()->value[rank][0] = 1; /* skip */
        lockstep_comm_free(c);
        return 0;
    }

    unsigned char *mine = malloc(BLOCK), *all = recv_pages(2 * BLOCK);
    CHECK(mine && all);
    memset(mine, 100 + rank, BLOCK);
    for (int i = 0; i < CALLS; i++) {
        mine[0] = (unsigned char)(rank * 100 + i);
        slower(rank, all, 2 * BLOCK);
        CHECK_EQ(lockstep_comm_allgather(c, mine, all, BLOCK, LOCKSTEP_ORDER_LINEAR, LOCKSTEP_PULL), 0);
        for (int r = 0; r < size; r++)
            CHECK(all[(size_t)r * BLOCK] == r * 100 + i && all[(size_t)r * BLOCK + BLOCK - 1] == 100 + r);
    }
    free(mine);
    munmap(all, 2 * BLOCK);

    unsigned char *send = malloc(2 * A2A), *recv = recv_pages(2 * A2A);
    CHECK(send && recv);
    for (int to = 0; to < size; to++)
        memset(send + (size_t)to * A2A, 10 * rank + to, A2A);
    for (int i = 0; i < CALLS; i++) {
        for (int to = 0; to < size; to++)
            send[(size_t)to * A2A] = (unsigned char)(100 + 50 * rank + 20 * to + i % 20);
        slower(rank, recv, 2 * A2A);
        CHECK_EQ(lockstep_comm_alltoall(c, send, recv, A2A), 0);
        for (int from = 0; from < size; from++)
            CHECK(recv[(size_t)from * A2A] == 100 + 50 * from + 20 * rank + i % 20 &&
                  recv[(size_t)from * A2A + A2A - 1] == 10 * from + rank);
    }
    free(send);
    munmap(recv, 2 * A2A);

    float *v = malloc(AR_COUNT * sizeof *v), *sum = recv_pages(AR_COUNT * sizeof *sum);
    CHECK(v && sum);
    for (size_t k = 0; k < AR_COUNT; k++)
        v[k] = (float)(rank + 1) * (float)(k % 1000);
    for (int i = 0; i < CALLS; i++) {
        v[0] = (float)((rank + 1) * i);
        slower(rank, sum, AR_COUNT * sizeof *sum);
        CHECK_EQ(lockstep_comm_allreduce(c, v, sum, AR_COUNT, LOCKSTEP_F32, LOCKSTEP_SUM), 0);
        CHECK(sum[0] == 3.0f * (float)i && sum[AR_COUNT - 1] == 3.0f * (float)((AR_COUNT - 1) % 1000));
    }
    free(v);
    munmap(sum, AR_COUNT * sizeof *sum);

    /* the root (rank 1) runs ahead of its receiver: it returns once both have
     * announced, through the slots, so it often reads the receiver's choice before the
     * receiver has stored the new one */
    unsigned char *bc = recv_pages(BCAST);
    CHECK(bc);
    memset(bc, 7, BCAST);
    for (int i = 0; i < CALLS; i++) {
        if (rank == 1)
            bc[0] = (unsigned char)i, bc[BCAST - 1] = (unsigned char)(255 - i);
        slower(rank, bc, BCAST);
        CHECK_EQ(lockstep_comm_broadcast(c, bc, BCAST, 1, LOCKSTEP_ORDER_LINEAR, LOCKSTEP_PULL), 0);
        CHECK(bc[0] == (unsigned char)i && bc[BCAST / 2] == 7 &&
              bc[BCAST - 1] == (unsigned char)(255 - i));
    }
    munmap(bc, BCAST);

    if (rank == 0) {
        bad |= both_timed(c, LS_PICK_BROADCAST_SMALL, LS_PICK_SIZES, "broadcast, small path");
        bad |= both_timed(c, LS_PICK_ALLGATHER_SMALL, 2 * LS_PICK_SIZES, "allgather, small path");
        bad |= both_timed(c, LS_PICK_ALLTOALL, LS_PICK_SIZES, "all-to-all");
        bad |= both_timed(c, LS_PICK_ALLREDUCE, 2 * LS_PICK_SIZES, "allreduce");
    }
    lockstep_comm_free(c);
    return bad;
}

int main(void)
{
    watchdog(300);
    if (lockstep_cpus_available() < 2) {
        fprintf(stderr, "skip: one CPU\n");
        return TEST_SKIP;
    }
    CHECK_EQ(setenv("LOCKSTEP_KERNEL_COPY", "slow", 1), 0);
    harness_run_clean(rank_main, 2, "pickcalls", 240, 0);
    if (harness_page()->value[0][0]) {
        fprintf(stderr, "skip: no single copies between the ranks here\n");
        return TEST_SKIP;
    }
    return 0;
}
