/* Eager broadcasts (params.broadcast_eager_bytes), each a subtest named on the command
 * line:
 *   values N   — N ranks: runs of eager broadcasts longer than the ring, from changing
 *                roots, of 0 to broadcast_eager_bytes bytes, with a slow receiver so
 *                the root runs ahead, mixed with every other call (allreduce small and
 *                large, regular broadcast, allgather, barrier); every byte checked
 *   mismatch   — a receiver that disagrees with the root fails with EMISMATCH in the
 *                call (the root and agreeing receivers in their next call), for every
 *                kind of disagreement, never by the deadline
 *   death      — a root killed before its broadcast: the receivers fail with
 *                EPEERDIED; a receiver killed: the root's next call that waits does
 *   params     — the size's limit, and ranks that disagree on it */
#include <string.h>

#include "comm_harness.h"

#define EAGER 1024 /* broadcast_eager_bytes in these tests */

static lockstep_comm_t *eager_comm(int rank, int size, const char *job, uint32_t timeout_ms)
{
    lockstep_comm_params_t p = harness_params(rank, size, job);
    p.timeout_ms = timeout_ms;
    p.broadcast_eager_bytes = EAGER;
    lockstep_comm_t *c = lockstep_comm_create(&p);
    if (!c)
        fprintf(stderr, "rank %d: comm_create: %s\n", rank, lockstep_strerror(-errno));
    return c;
}

/* what call i's root sends: depends on the call and the byte */
static unsigned char pattern(int i, size_t k) { return (unsigned char)(i * 31 + (int)k * 7 + 1); }

/* ---- values --------------------------------------------------------------------------- */

static const size_t sizes[] = {0, 1, 3, 64, 100, 255, EAGER};

static int check_bytes(const unsigned char *b, int i, size_t n, int rank, const char *what)
{
    for (size_t k = 0; k < n; k++)
        if (b[k] != pattern(i, k)) {
            fprintf(stderr, "rank %d call %d (%s): byte %zu of %zu is %u, want %u\n", rank, i, what, k, n, b[k],
                    pattern(i, k));
            return 1;
        }
    return 0;
}

static int values_body(int rank, int size, const char *job)
{
    lockstep_comm_t *c = eager_comm(rank, size, job, 30000);
    if (!c)
        return 1;
    enum { BIG = 3 * 1024 * 1024 };
    unsigned char *b = malloc(BIG), *g = malloc((size_t)size * 256);
    int32_t *v = malloc(BIG);
    CHECK(b && g && v);
    for (int i = 0; i < 400; i++) {
        /* calls 40-139 and 200-299: eager broadcasts only; elsewhere one call in three */
        int run = (i >= 40 && i < 140) || (i >= 200 && i < 300);
        int kind = run ? 0 : i % 6;
        /* in the runs one root throughout, which nothing then holds back but the ring */
        int root = run ? (i < 140 ? 0 : 1 % size) : (i / 3) % size, rc = 0;
        if (rank == size - 1 && i % 8 == 0)
            usleep(300); /* the slow receiver: roots run ahead into the ring's wrap */
        switch (kind) {
        case 0: case 3: { /* eager broadcast */
            size_t n = sizes[(size_t)i % (sizeof sizes / sizeof sizes[0])];
            memset(b, 0xEE, n + 1);
            if (rank == root)
                for (size_t k = 0; k < n; k++)
                    b[k] = pattern(i, k);
            rc = lockstep_comm_broadcast(c, b, n, root, (lockstep_order_t)(i % 4), (lockstep_xfer_t)(i / 7 % 2));
            CHECK_EQ(rc, 0);
            if (check_bytes(b, i, n, rank, "eager"))
                return 1;
            CHECK_EQ(b[n], 0xEE); /* nothing past the payload */
            break;
        }
        case 1: { /* allreduce, small or large (the large writes chunks before announcing) */
            size_t n = i % 12 == 1 ? BIG / 4 : 5;
            for (size_t k = 0; k < n; k++)
                v[k] = rank + (int32_t)k;
            CHECK_EQ(lockstep_comm_allreduce(c, v, v, n, LOCKSTEP_DTYPE_I32, LOCKSTEP_OP_SUM), 0);
            int32_t ranks = size * (size - 1) / 2;
            for (size_t k = 0; k < n; k += n / 5 + 1)
                CHECK_EQ(v[k], ranks + size * (int32_t)k);
            break;
        }
        case 2: { /* a regular broadcast, past the eager size: small slots or the pipeline */
            size_t n = i % 12 == 2 ? BIG : EAGER + 1 + (size_t)i;
            if (rank == root)
                for (size_t k = 0; k < n; k++)
                    b[k] = pattern(i, k);
            else
                memset(b, 0, n);
            CHECK_EQ(lockstep_comm_broadcast(c, b, n, root, LOCKSTEP_ORDER_LINEAR, LOCKSTEP_XFER_PULL), 0);
            if (check_bytes(b, i, n, rank, "regular"))
                return 1;
            break;
        }
        case 4: { /* allgather */
            memset(b, rank + i, 256);
            CHECK_EQ(lockstep_comm_allgather(c, b, g, 256, LOCKSTEP_ORDER_LINEAR, LOCKSTEP_XFER_PUSH), 0);
            for (int r = 0; r < size; r++)
                for (size_t k = 0; k < 256; k++)
                    CHECK_EQ(g[(size_t)r * 256 + k], (unsigned char)(r + i));
            break;
        }
        default: CHECK_EQ(lockstep_comm_barrier(c), 0);
        }
    }
    lockstep_comm_free(c);
    free(b);
    free(g);
    free(v);
    return 0;
}

/* ---- mismatch ------------------------------------------------------------------------- */

/* 3 ranks, root 0 unless said otherwise; rank 2 disagrees:
 * 0 count; 1 transfer; 2 it calls an allreduce; 3 it calls a barrier; 4 the root calls
 * a regular (larger) broadcast; 5 ranks 1 and 2 each take the other for the root; 6 the
 * root calls an allgather */
static int mismatch_case;

static int mismatch_body(int rank, int size, const char *job)
{
    (void)size;
    /* far past any scheduling delay: a mismatch must end the calls, not the clock */
    lockstep_comm_t *c = eager_comm(rank, 3, job, 20000);
    if (!c)
        return 1;
    unsigned char b[4096] = {0};
    int odd = rank == 2, rc;
    /* a few good calls first, so the failing one is not the first */
    for (int i = 0; i < 20; i++)
        CHECK_EQ(lockstep_comm_broadcast(c, b, 16, i % 3, LOCKSTEP_ORDER_LINEAR, LOCKSTEP_XFER_PULL), 0);
    switch (mismatch_case) {
    case 0: rc = lockstep_comm_broadcast(c, b, odd ? 17 : 16, 0, 0, LOCKSTEP_XFER_PULL); break;
    case 1: rc = lockstep_comm_broadcast(c, b, 16, 0, 0, odd ? LOCKSTEP_XFER_PUSH : LOCKSTEP_XFER_PULL); break;
    case 2:
        rc = odd ? lockstep_comm_allreduce(c, b, b, 4, LOCKSTEP_DTYPE_F32, LOCKSTEP_OP_SUM)
                 : lockstep_comm_broadcast(c, b, 16, 0, 0, 0);
        break;
    case 3: rc = odd ? lockstep_comm_barrier(c) : lockstep_comm_broadcast(c, b, 16, 0, 0, 0); break;
    case 4: rc = lockstep_comm_broadcast(c, b, rank == 0 ? 2 * EAGER : 16, 0, 0, 0); break;
    case 5: rc = lockstep_comm_broadcast(c, b, 16, rank == 0 ? 0 : 3 - rank, 0, 0); break;
    default:
        rc = rank == 0 ? lockstep_comm_allgather(c, b, b + 1024, 16, 0, 0) : lockstep_comm_broadcast(c, b, 16, 0, 0, 0);
    }
    /* Who fails in the call: the ranks whose wait shows the disagreement. The others
     * (an eager root, a receiver that agreed with it) may return 0 (or fail, when the
     * failure is recorded before they start), and then their next call that waits
     * for everyone fails (a broadcast right away might not: an eager root need not
     * wait, and so a receiver may get its payload before the failure is seen). */
    int fails_now;
    switch (mismatch_case) {
    case 0: case 1: case 2: case 3: fails_now = odd; break;
    case 5: fails_now = rank != 0; break;
    default: fails_now = 1; /* the root made a regular call: everyone waits on someone */
    }
    if (rc != -LOCKSTEP_EMISMATCH && (fails_now || rc != 0)) {
        fprintf(stderr, "case %d rank %d: got %s in the call\n", mismatch_case, rank, lockstep_strerror(rc));
        return 1;
    }
    CHECK_EQ(lockstep_comm_barrier(c), -LOCKSTEP_EMISMATCH);
    CHECK_EQ(lockstep_comm_broadcast(c, b, 8, 0, 0, 0), -LOCKSTEP_EMISMATCH);
    lockstep_comm_free(c);
    return 0;
}

/* ---- peer death ----------------------------------------------------------------------- */

static int death_of; /* the rank that dies: 0 the root, 2 a receiver */

static int death_body(int rank, int size, const char *job)
{
    (void)size;
    lockstep_comm_t *c = eager_comm(rank, 3, job, 20000);
    if (!c)
        return 1;
    unsigned char b[64] = {0};
    for (int i = 0;; i++) {
        if (rank == death_of && i == 30)
            raise(SIGKILL);
        int rc = lockstep_comm_broadcast(c, b, sizeof b, 0, 0, 0);
        if (rc == 0)
            continue;
        if (rc != -LOCKSTEP_EPEERDIED) {
            fprintf(stderr, "rank %d call %d: got %s, want peer-died\n", rank, i, lockstep_strerror(rc));
            return 1;
        }
        /* A root whose receiver died gets through at most a ring of calls. When the
         * root died, a receiver fails at its call 30, or earlier when it lags: the
         * other receiver may record the death first, and a recorded failure fails
         * every later call at its start (as in the mismatch cases), here by at most a
         * ring, since the root wrote its entry 29 only once both receivers had finished
         * call 13. (The test asked i >= 30 of both, and rank 1 failed that check once,
         * under ThreadSanitizer with the other tests running beside it.) */
        int ring = 16, first = death_of == 0 ? 30 - ring : 30, last = 30 + ring + 1;
        if (i < first || i > last) {
            fprintf(stderr, "rank %d, rank %d killed: peer-died at call %d, want %d to %d\n", rank, death_of, i,
                    first, last);
            return 1;
        }
        break;
    }
    CHECK_EQ(lockstep_comm_allreduce(c, b, b, 1, LOCKSTEP_DTYPE_F32, LOCKSTEP_OP_SUM), -LOCKSTEP_EPEERDIED);
    lockstep_comm_free(c);
    return 0;
}

/* ---- params ---------------------------------------------------------------------------- */

static int disagree_body(int rank, int size, const char *job)
{
    (void)size;
    lockstep_comm_params_t p = harness_params(rank, 2, job);
    p.broadcast_eager_bytes = rank == 0 ? 256 : 512;
    p.timeout_ms = 10000;
    errno = 0;
    lockstep_comm_t *c = lockstep_comm_create(&p);
    CHECK(c == NULL);
    CHECK_EQ(errno, LOCKSTEP_EMISMATCH);
    return 0;
}

static void test_params(void)
{
    lockstep_comm_params_t p = harness_params(0, 1, "eager-params");
    char msg[200];
    p.broadcast_eager_bytes = 65537;
    CHECK_EQ(lockstep_comm_params_check(&p, msg, sizeof msg), -EINVAL);
    CHECK(strstr(msg, "broadcast_eager_bytes") != NULL);
    errno = 0;
    CHECK(lockstep_comm_create(&p) == NULL);
    CHECK_EQ(errno, EINVAL);
    p.broadcast_eager_bytes = 65536;
    CHECK_EQ(lockstep_comm_params_check(&p, msg, sizeof msg), 0);
    /* one rank: a broadcast returns at once, eager or not */
    char job[96];
    harness_job(job, sizeof job, "eager1");
    snprintf(p.job, sizeof p.job, "%s", job);
    lockstep_comm_t *c = lockstep_comm_create(&p);
    CHECK(c != NULL);
    unsigned char b[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    CHECK_EQ(lockstep_comm_broadcast(c, b, 8, 0, 0, 0), 0);
    CHECK_EQ(b[7], 8);
    lockstep_comm_free(c);
    harness_run_clean(disagree_body, 2, "eager-disagree", 60, 0);
}

int main(int argc, char **argv)
{
    watchdog(300);
    const char *t = argc > 1 ? argv[1] : "";
    char job[96];
    if (strcmp(t, "values") == 0 && argc > 2) {
        int n = atoi(argv[2]);
        CHECK(n >= 1 && n <= MAX_TEST_RANKS);
        harness_run_clean(values_body, n, "eager", 200, 0);
    } else if (strcmp(t, "mismatch") == 0) {
        for (mismatch_case = 0; mismatch_case <= 6; mismatch_case++) {
            harness_job(job, sizeof job, "eager-mismatch");
            if (harness_run(mismatch_body, 3, job, 60, 0) != 0) {
                fprintf(stderr, "mismatch case %d failed\n", mismatch_case);
                return 1;
            }
            CHECK_EQ(shm_entries_with(job), 0);
        }
    } else if (strcmp(t, "death") == 0) {
        for (int k = 0; k < 2; k++) {
            death_of = k == 0 ? 0 : 2;
            harness_run_clean(death_body, 3, "eager-death", 60, 1u << death_of);
        }
    } else if (strcmp(t, "params") == 0) {
        test_params();
    } else {
        fprintf(stderr, "usage: %s values N|mismatch|death|params\n", argv[0]);
        return 1;
    }
    return 0;
}
