/* Calls that disagree: mismatched calls fail on every rank with -LOCKSTEP_EMISMATCH; bad
 * arguments give -EINVAL; one rank's invalid arguments end the call at once on the
 * others (a refused call) and the communicator goes on. */
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
            CHECK_EQ(lockstep_comm_allreduce(c, v, v, 1, LOCKSTEP_DTYPE_F32, LOCKSTEP_OP_SUM), 0);
            CHECK(v[0] == 3.0f);
        }
        CHECK_EQ(lockstep_comm_tag(c, odd ? 201 : 200), 0);
    }
    switch (mismatch_case) {
    case 0: rc = lockstep_comm_allreduce(c, v, v, odd ? 11 : 10, LOCKSTEP_DTYPE_F32, LOCKSTEP_OP_SUM); break;
    case 1: rc = lockstep_comm_allreduce(c, v, v, 8, odd ? LOCKSTEP_DTYPE_I32 : LOCKSTEP_DTYPE_F32, LOCKSTEP_OP_SUM); break;
    case 2: rc = lockstep_comm_allreduce(c, v, v, 8, LOCKSTEP_DTYPE_F32, odd ? LOCKSTEP_OP_MAX : LOCKSTEP_OP_SUM); break;
    case 3: rc = lockstep_comm_broadcast(c, v, 16, odd ? 1 : 0, LOCKSTEP_ORDER_LINEAR, LOCKSTEP_XFER_PULL); break;
    case 4: rc = odd ? lockstep_comm_barrier(c) : lockstep_comm_allreduce(c, v, v, 4, LOCKSTEP_DTYPE_F32, LOCKSTEP_OP_SUM); break;
    case 5: rc = odd ? lockstep_comm_allgather(c, v, v + 16, 8, 0, 0) : lockstep_comm_broadcast(c, v, 8, 0, 0, 0); break;
    case 6: /* large on one side, small on the other */
    {
        size_t n = odd ? 1u << 20 : 100;
        float *big = calloc(n, sizeof(float));
        rc = lockstep_comm_allreduce(c, big, big, n, LOCKSTEP_DTYPE_F32, LOCKSTEP_OP_SUM);
        free(big);
        break;
    }
    case 7: rc = lockstep_comm_broadcast(c, v, 16, 0, LOCKSTEP_ORDER_LINEAR, odd ? LOCKSTEP_XFER_PUSH : LOCKSTEP_XFER_PULL); break;
    case 8: rc = lockstep_comm_allgather(c, v, v + 16, 8, LOCKSTEP_ORDER_LINEAR, odd ? LOCKSTEP_XFER_PULL : LOCKSTEP_XFER_PUSH); break;
    case 9: /* reduce-scatter against an allreduce of as many elements */
        rc = odd ? lockstep_comm_reduce_scatter(c, v, v + 32, 8, LOCKSTEP_DTYPE_F32, LOCKSTEP_OP_SUM)
                 : lockstep_comm_allreduce(c, v, v, 8, LOCKSTEP_DTYPE_F32, LOCKSTEP_OP_SUM);
        break;
    case 10: /* all-to-all against an allgather of as many bytes */
        rc = odd ? lockstep_comm_alltoall(c, v, v + 32, 16) : lockstep_comm_allgather(c, v, v + 32, 16, 0, 0);
        break;
    case 11: rc = lockstep_comm_allreduce(c, v, v, 4, LOCKSTEP_DTYPE_F32, LOCKSTEP_OP_SUM); break;
    case 12: rc = lockstep_comm_barrier(c); break;
    case 13:
        rc = lockstep_comm_broadcast(c, v, 16, 0, LOCKSTEP_ORDER_LINEAR, LOCKSTEP_XFER_PULL);
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
    CHECK_EQ(lockstep_comm_allreduce(c, v, v, 1, LOCKSTEP_DTYPE_F32, LOCKSTEP_OP_SUM), -LOCKSTEP_EMISMATCH);
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
    CHECK_EQ(lockstep_comm_allreduce(NULL, v, v, 1, LOCKSTEP_DTYPE_F32, LOCKSTEP_OP_SUM), -EINVAL);
    CHECK_EQ(lockstep_comm_allreduce(c, v, v, 1, (lockstep_dtype_t)7, LOCKSTEP_OP_SUM), -EINVAL);
    CHECK_EQ(lockstep_comm_allreduce(c, v, v, 1, LOCKSTEP_DTYPE_F32, (lockstep_op_t)5), -EINVAL);
    CHECK_EQ(lockstep_comm_allreduce(c, NULL, v, 1, LOCKSTEP_DTYPE_F32, LOCKSTEP_OP_SUM), -EINVAL);
    CHECK_EQ(lockstep_comm_allreduce(c, v, v + 1, 4, LOCKSTEP_DTYPE_F32, LOCKSTEP_OP_SUM), -EINVAL);
    CHECK_EQ(lockstep_comm_allreduce(c, v, v, SIZE_MAX / 2, LOCKSTEP_DTYPE_F32, LOCKSTEP_OP_SUM), -EINVAL);
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
    CHECK_EQ(lockstep_comm_allreduce(c, v, v, 1, LOCKSTEP_DTYPE_F32, LOCKSTEP_OP_SUM), 0);
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
    case 0: return lockstep_comm_allreduce(c, bad ? NULL : v, v, 4, LOCKSTEP_DTYPE_F32, LOCKSTEP_OP_SUM);
    case 1: return lockstep_comm_broadcast(c, v, 16, bad ? size : 0, LOCKSTEP_ORDER_LINEAR, LOCKSTEP_XFER_PULL);
    case 2: return lockstep_comm_allgather(c, bad ? v + 1 : v + 64, v, 8, 0, 0); /* bad: overlapping */
    case 3: return lockstep_comm_alltoall(c, v, bad ? v + 1 : v + 64, 4);      /* bad: overlapping */
    case 4: return lockstep_comm_reduce_scatter(c, v, v + 64, 2, LOCKSTEP_DTYPE_F32, bad ? (lockstep_op_t)9 : LOCKSTEP_OP_SUM);
    case 5: /* the others are in a barrier: the refuser joins its episode */
        return bad ? lockstep_comm_allreduce(c, v, v, 1, (lockstep_dtype_t)7, LOCKSTEP_OP_SUM) : lockstep_comm_barrier(c);
    case 6: /* every rank's arguments are invalid */
        return lockstep_comm_allreduce(c, v, v + 1, 4, LOCKSTEP_DTYPE_F32, LOCKSTEP_OP_SUM);
    case 7: /* the others copy a large message's first chunk in before announcing */
        return bad ? lockstep_comm_refuse(c) : lockstep_comm_allreduce(c, big, big, nbig, LOCKSTEP_DTYPE_F32, LOCKSTEP_OP_SUM);
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
    CHECK_EQ(lockstep_comm_allreduce(c, big, big, nbig, LOCKSTEP_DTYPE_F32, LOCKSTEP_OP_SUM), 0);
    for (size_t i = 0; i < nbig; i += 4099) {
        float want_i = 0;
        for (int r = 0; r < size; r++)
            want_i += (float)((i + (size_t)r) % 5);
        CHECK(big[i] == want_i);
    }
    v[0] = (float)rank;
    CHECK_EQ(lockstep_comm_allreduce(c, v, v, 1, LOCKSTEP_DTYPE_F32, LOCKSTEP_OP_SUM), 0);
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
             : rank == 1 ? lockstep_comm_allreduce(c, NULL, v, 4, LOCKSTEP_DTYPE_F32, LOCKSTEP_OP_SUM)
                         : lockstep_comm_allreduce(c, v, v, 4, LOCKSTEP_DTYPE_F32, LOCKSTEP_OP_SUM);
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
    CHECK_EQ(lockstep_comm_allreduce(c, v, v, 1, LOCKSTEP_DTYPE_F32, LOCKSTEP_OP_SUM), -LOCKSTEP_EMISMATCH);
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

int main(int argc, char **argv)
{
    watchdog(300);
    const char *t = argc > 1 ? argv[1] : "";
    char job[96];
    if (strcmp(t, "mismatch") == 0) {
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
    } else {
        fprintf(stderr, "usage: %s mismatch|args|refuse\n", argv[0]);
        return 1;
    }
    return 0;
}
