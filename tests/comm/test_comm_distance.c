/* The route table's inputs: the ranks' distance (the probe at create, the judgement
 * every rank reads, routes that follow it when it changes in the middle of a job, every
 * call's result exact throughout, also in the calls where the ranks read the change at
 * different times), and the thresholds params and the environment may set. */
#include "comm_harness.h"
#include "failure_helpers.h"

#include <sched.h>
#include <unistd.h>

#define COUNT (64 * 1024 / 4) /* f32: 64 KiB, a block inside every far window */
#define AR_COUNT (512 * 1024 / 4) /* the allreduce's f32: 512 KiB, inside its far window,
                                     past its close one */
#define PROBES 40             /* probe intervals a change may take (a probe whose partner is
                                 preempted is dropped) */

/* One allreduce of AR_COUNT f32 (call i of the job), checked element by element: each
 * rank contributes (rank + 1) * (i % 7 + k % 5), summed exactly in f32 */
static int checked_allreduce(lockstep_comm_t *c, int rank, int size, unsigned i, float *send, float *recv)
{
    for (size_t k = 0; k < AR_COUNT; k++)
        send[k] = (float)((rank + 1) * (int)(i % 7 + k % 5));
    CHECK_EQ(lockstep_comm_allreduce(c, send, recv, AR_COUNT, LOCKSTEP_DTYPE_F32, LOCKSTEP_OP_SUM), 0);
    for (size_t k = 0; k < AR_COUNT; k++)
        CHECK_EQ(recv[k], (float)(size * (size + 1) / 2 * (int)(i % 7 + k % 5)));
    return lockstep_comm_route(c);
}

/* Calls until this rank's route is `want` in `need` calls in a row (or PROBES probe
 * intervals pass: the route did not follow). Returns the calls made. */
static unsigned calls_until(lockstep_comm_t *c, int rank, int size, unsigned *i, float *send, float *recv, int want)
{
    unsigned made = 0, row = 0;
    while (row < 3 && made < PROBES * 1024u) {
        row = checked_allreduce(c, rank, size, (*i)++, send, recv) == want ? row + 1 : 0;
        made++;
    }
    CHECK_EQ(row, 3u);
    return made;
}

static int can_kcopy;

static int change_body(int rank, int size, const char *job)
{
    if (rank == 0)
        CHECK_EQ(setenv("LOCKSTEP_COMM_DISTANCE", "close", 1), 0);
    lockstep_comm_t *c = harness_comm(rank, size, job, 60000);
    CHECK(c != NULL);
    uint32_t rt = 0;
    CHECK_EQ(lockstep_comm_distance(c, &rt), LOCKSTEP_DISTANCE_CLOSE);
    float *send = malloc(AR_COUNT * 4), *recv = malloc(AR_COUNT * 4);
    CHECK(send && recv);
    unsigned i = 0;
    calls_until(c, rank, size, &i, send, recv, LOCKSTEP_ROUTE_CHUNKED);
    /* the host moves the ranks apart: rank 0's next probe says so */
    if (rank == 0)
        CHECK_EQ(setenv("LOCKSTEP_COMM_DISTANCE", "far", 1), 0);
    int far_route = can_kcopy ? LOCKSTEP_ROUTE_KERNEL_COPY : LOCKSTEP_ROUTE_CHUNKED;
    calls_until(c, rank, size, &i, send, recv, far_route);
    CHECK_EQ(lockstep_comm_distance(c, &rt), LOCKSTEP_DISTANCE_FAR); /* rt: 0 if every probe was
                                                                      dropped (a loaded machine) */
    /* every collective's far route, at a block of 64 KiB */
    size_t b = COUNT * 4;
    unsigned char *in = malloc((size_t)size * b), *out = malloc((size_t)size * b);
    CHECK(in && out);
    for (size_t k = 0; k < (size_t)size * b; k++)
        in[k] = (unsigned char)(k / b * 16 + (size_t)rank * 4 + k % 3);
    CHECK_EQ(lockstep_comm_alltoall(c, in, out, b), 0);
    CHECK_EQ(lockstep_comm_route(c), far_route);
    for (size_t k = 0; k < (size_t)size * b; k++) /* block r: rank r's block `rank` */
        CHECK_EQ(out[k], (unsigned char)((size_t)rank * 16 + k / b * 4 + (k % b + (size_t)rank * b) % 3));
    /* allgathers on the small path (64 KiB) and past it (320 KiB) */
    for (int x = 0; x < 2; x++) {
        lockstep_xfer_t xfer = x ? LOCKSTEP_XFER_PUSH : LOCKSTEP_XFER_PULL;
        CHECK_EQ(lockstep_comm_allgather(c, in, out, b, LOCKSTEP_ORDER_LINEAR, xfer), 0);
        CHECK_EQ(lockstep_comm_route(c), far_route);
        for (size_t k = 0; k < (size_t)size * b; k++) /* block r: rank r's first block */
            CHECK_EQ(out[k], (unsigned char)(k / b * 4 + k % b % 3));
    }
    size_t g = 320 * 1024;
    unsigned char *gin = malloc(g), *gout = malloc((size_t)size * g);
    CHECK(gin && gout);
    for (size_t k = 0; k < g; k++)
        gin[k] = (unsigned char)((size_t)rank * 4 + k % 3);
    for (int x = 0; x < 2; x++) {
        lockstep_xfer_t xfer = x ? LOCKSTEP_XFER_PUSH : LOCKSTEP_XFER_PULL;
        CHECK_EQ(lockstep_comm_allgather(c, gin, gout, g, LOCKSTEP_ORDER_LINEAR, xfer), 0);
        CHECK_EQ(lockstep_comm_route(c), far_route);
        for (size_t k = 0; k < (size_t)size * g; k++) /* block r: rank r's */
            CHECK_EQ(gout[k], (unsigned char)(k / g * 4 + k % g % 3));
    }
    free(gin);
    free(gout);
    memcpy(out, in, b);
    CHECK_EQ(lockstep_comm_broadcast(c, out, b, 1, LOCKSTEP_ORDER_LINEAR, LOCKSTEP_XFER_PULL), 0);
    CHECK_EQ(lockstep_comm_route(c), size == 2 ? far_route : LOCKSTEP_ROUTE_SMALL);
    for (size_t k = 0; k < b; k++) /* rank 1's first block */
        CHECK_EQ(out[k], (unsigned char)(4 + k % 3));
    float *rs = (float *)(void *)in;
    for (size_t k = 0; k < (size_t)size * COUNT; k++)
        rs[k] = (float)((rank + 1) * (int)(k % 9));
    CHECK_EQ(lockstep_comm_reduce_scatter(c, rs, recv, COUNT, LOCKSTEP_DTYPE_F32, LOCKSTEP_OP_SUM), 0);
    CHECK_EQ(lockstep_comm_route(c), far_route);
    for (size_t k = 0; k < COUNT; k++) /* block `rank` of every send, summed */
        CHECK_EQ(recv[k], (float)(size * (size + 1) / 2 * (int)(((size_t)rank * COUNT + k) % 9)));
    /* and back: the slots again */
    if (rank == 0)
        CHECK_EQ(setenv("LOCKSTEP_COMM_DISTANCE", "close", 1), 0);
    calls_until(c, rank, size, &i, send, recv, LOCKSTEP_ROUTE_CHUNKED);
    CHECK_EQ(lockstep_comm_distance(c, NULL), LOCKSTEP_DISTANCE_CLOSE);
    /* close, the all-to-all's two windows: 1 MiB blocks through the slots, 4 MiB ones
     * by kernel copy again */
    for (size_t mib = 1; mib <= 4; mib += 3) {
        size_t blk = mib << 20;
        unsigned char *ain = malloc((size_t)size * blk), *aout = malloc((size_t)size * blk);
        CHECK(ain && aout);
        for (size_t k = 0; k < (size_t)size * blk; k++)
            ain[k] = (unsigned char)(k / blk * 16 + (size_t)rank * 4 + k % 3);
        CHECK_EQ(lockstep_comm_alltoall(c, ain, aout, blk), 0);
        CHECK_EQ(lockstep_comm_route(c), mib == 4 && can_kcopy ? LOCKSTEP_ROUTE_KERNEL_COPY : LOCKSTEP_ROUTE_CHUNKED);
        for (size_t k = 0; k < (size_t)size * blk; k++) /* block r: rank r's block `rank` */
            CHECK_EQ(aout[k], (unsigned char)((size_t)rank * 16 + k / blk * 4 + (k % blk + (size_t)rank * blk) % 3));
        free(ain);
        free(aout);
    }
    free(in);
    free(out);
    free(send);
    free(recv);
    lockstep_comm_free(c);
    return 0;
}

/* Large calls far apart in time: the judgement follows within two calls of a change,
 * long before the 1024th call (LS_PROBE_INTERVAL_NS) */
static int interval_body(int rank, int size, const char *job)
{
    if (rank == 0)
        CHECK_EQ(setenv("LOCKSTEP_COMM_DISTANCE", "close", 1), 0);
    lockstep_comm_t *c = harness_comm(rank, size, job, 60000);
    CHECK(c != NULL);
    float *send = malloc(AR_COUNT * 4), *recv = malloc(AR_COUNT * 4);
    CHECK(send && recv);
    unsigned i = 0;
    CHECK_EQ(checked_allreduce(c, rank, size, i++, send, recv), LOCKSTEP_ROUTE_CHUNKED);
    if (rank == 0)
        CHECK_EQ(setenv("LOCKSTEP_COMM_DISTANCE", "far", 1), 0);
    /* the first call names the next for a probe, which judges; every rank makes as many */
    for (int k = 0; k < 3; k++) {
        CHECK_EQ(usleep(60 * 1000), 0);
        checked_allreduce(c, rank, size, i++, send, recv);
    }
    CHECK_EQ(lockstep_comm_barrier(c), 0);
    CHECK_EQ(lockstep_comm_distance(c, NULL), LOCKSTEP_DISTANCE_FAR);
    CHECK_EQ(checked_allreduce(c, rank, size, i++, send, recv),
             can_kcopy ? LOCKSTEP_ROUTE_KERNEL_COPY : LOCKSTEP_ROUTE_CHUNKED);
    free(send);
    free(recv);
    lockstep_comm_free(c);
    return 0;
}

static void test_change(void)
{
    can_kcopy = siblings_can_read();
    harness_run_clean(change_body, 2, "distance", 120, 0);
    harness_run_clean(interval_body, 2, "interval", 120, 0);
}

static lockstep_distance_t param_distance = LOCKSTEP_DISTANCE_AUTO;

static int probe_body(int rank, int size, const char *job)
{
    lockstep_comm_params_t p = harness_params(rank, size, job);
    p.distance = param_distance;
    lockstep_comm_t *c = lockstep_comm_create(&p);
    CHECK(c != NULL);
    CHECK_EQ(lockstep_comm_barrier(c), 0); /* rank 0 has judged before it entered */
    CHECK_EQ(lockstep_comm_route(c), LOCKSTEP_ROUTE_NONE);
    uint32_t rt = 12345;
    int d = lockstep_comm_distance(c, &rt);
    CHECK(d == LOCKSTEP_DISTANCE_CLOSE || d == LOCKSTEP_DISTANCE_FAR);
    harness_page()->value[rank][0] = rt;
    harness_page()->value[rank][1] = d;
    lockstep_comm_free(c);
    return 0;
}

static void test_probe(void)
{
    CHECK_EQ(lockstep_comm_distance(NULL, NULL), -EINVAL);
    CHECK_EQ(lockstep_comm_route(NULL), -EINVAL);
    /* alone: nothing to measure */
    harness_run_clean(probe_body, 1, "distance-1", 60, 0);
    CHECK_EQ(harness_page()->value[0][0], 0);
    CHECK_EQ(harness_page()->value[0][1], LOCKSTEP_DISTANCE_CLOSE);
    /* two ranks read one judgement; forced far, the round trip is still measured (0
     * only if rank 1 never answered at create, which a loaded machine may cause) */
    CHECK_EQ(setenv("LOCKSTEP_COMM_DISTANCE", "FAR", 1), 0);
    harness_run_clean(probe_body, 2, "distance-2", 60, 0);
    CHECK_EQ(unsetenv("LOCKSTEP_COMM_DISTANCE"), 0);
    CHECK_EQ(harness_page()->value[0][0], harness_page()->value[1][0]);
    if (harness_page()->value[0][0] > 0)
        CHECK_EQ(harness_page()->value[0][1], LOCKSTEP_DISTANCE_FAR);
    CHECK_EQ(harness_page()->value[0][1], harness_page()->value[1][1]);
    /* set in the params, the judgement holds whether or not rank 1 answered */
    param_distance = LOCKSTEP_DISTANCE_FAR;
    harness_run_clean(probe_body, 2, "distance-p", 60, 0);
    CHECK_EQ(harness_page()->value[0][1], LOCKSTEP_DISTANCE_FAR);
    CHECK_EQ(harness_page()->value[1][1], LOCKSTEP_DISTANCE_FAR);
    param_distance = LOCKSTEP_DISTANCE_CLOSE;
    CHECK_EQ(setenv("LOCKSTEP_COMM_DISTANCE", "far", 1), 0); /* the environment wins */
    harness_run_clean(probe_body, 2, "distance-e", 60, 0);
    CHECK_EQ(unsetenv("LOCKSTEP_COMM_DISTANCE"), 0);
    CHECK_EQ(harness_page()->value[0][1], LOCKSTEP_DISTANCE_FAR);
    harness_run_clean(probe_body, 2, "distance-c", 60, 0);
    CHECK_EQ(harness_page()->value[1][1], LOCKSTEP_DISTANCE_CLOSE);
    param_distance = LOCKSTEP_DISTANCE_AUTO;

    /* a malformed setting is refused by name */
    lockstep_comm_params_t p = lockstep_comm_params_default();
    char msg[256];
    harness_job(p.job, sizeof p.job, "distance-bad");
    p.size = 2;
    CHECK_EQ(setenv("LOCKSTEP_COMM_DISTANCE", "nearby", 1), 0);
    CHECK_EQ(lockstep_comm_params_check(&p, msg, sizeof msg), -EINVAL);
    CHECK(strstr(msg, "LOCKSTEP_COMM_DISTANCE") != NULL && strstr(msg, "nearby") != NULL);
    CHECK_EQ(unsetenv("LOCKSTEP_COMM_DISTANCE"), 0);
    CHECK_EQ(lockstep_comm_params_check(&p, msg, sizeof msg), 0);
    p.distance = (lockstep_distance_t)3;
    CHECK_EQ(lockstep_comm_params_check(&p, msg, sizeof msg), -EINVAL);
    CHECK(strstr(msg, "distance must be") != NULL);
}

/* Ranks outnumbering the CPUs (cpu_sharers says so): the probe still judges, from round
 * trips that timed no process switch, and far apart the allreduce of 256 KiB or more of
 * 4-byte elements moves by kernel copy, smaller ones and f16 through the slots;
 * close, all through the slots. Every result exact. */
static const char *over_distance;

static int over_allreduce(lockstep_comm_t *c, int rank, int size, size_t count, lockstep_dtype_t dt)
{
    size_t es = dt == LOCKSTEP_DTYPE_F16 ? 2 : 4;
    unsigned char *send = malloc(count * es), *recv = malloc(count * es);
    CHECK(send && recv);
    for (size_t k = 0; k < count; k++) {
        if (es == 4)
            ((int32_t *)(void *)send)[k] = (rank + 1) * (int)(k % 11);
        else /* f16 1.0 from rank 0, 2.0 from rank 1 */
            ((uint16_t *)(void *)send)[k] = (uint16_t)(rank == 0 ? 0x3c00 : 0x4000);
    }
    CHECK_EQ(lockstep_comm_allreduce(c, send, recv, count, dt, LOCKSTEP_OP_SUM), 0);
    int route = lockstep_comm_route(c);
    for (size_t k = 0; k < count; k++) {
        if (es == 4)
            CHECK_EQ(((int32_t *)(void *)recv)[k], size * (size + 1) / 2 * (int)(k % 11));
        else
            CHECK_EQ(((uint16_t *)(void *)recv)[k], 0x4200); /* 3.0 */
    }
    free(send);
    free(recv);
    return route;
}

static int over_body(int rank, int size, const char *job)
{
    if (rank == 0 && over_distance)
        CHECK_EQ(setenv("LOCKSTEP_COMM_DISTANCE", over_distance, 1), 0);
    lockstep_comm_params_t p = harness_params(rank, size, job);
    p.cpu_sharers = 2 * lockstep_cpus_available() + size;
    lockstep_comm_t *c = lockstep_comm_create(&p);
    CHECK(c != NULL);
    CHECK_EQ(lockstep_comm_barrier(c), 0); /* rank 0 has judged before it entered */
    uint32_t rt = 0;
    int d = lockstep_comm_distance(c, &rt);
    harness_page()->value[rank][0] = rt;
    harness_page()->value[rank][1] = d;
    int far = over_distance && !strcmp(over_distance, "far");
    int kc = far && can_kcopy ? LOCKSTEP_ROUTE_KERNEL_COPY : LOCKSTEP_ROUTE_CHUNKED;
    if (over_distance) {
        int want = far ? LOCKSTEP_DISTANCE_FAR : LOCKSTEP_DISTANCE_CLOSE;
        CHECK_EQ(d, want);
        CHECK_EQ(over_allreduce(c, rank, size, (64 << 10) / 4, LOCKSTEP_DTYPE_I32), LOCKSTEP_ROUTE_CHUNKED);
        CHECK_EQ(over_allreduce(c, rank, size, (256 << 10) / 4, LOCKSTEP_DTYPE_I32), kc);
        CHECK_EQ(over_allreduce(c, rank, size, (1 << 20) / 4, LOCKSTEP_DTYPE_I32), kc);
        CHECK_EQ(over_allreduce(c, rank, size, (4 << 20) / 4, LOCKSTEP_DTYPE_I32), kc);
        CHECK_EQ(over_allreduce(c, rank, size, (8 << 20) / 4, LOCKSTEP_DTYPE_I32), kc);
        CHECK_EQ(over_allreduce(c, rank, size, (1 << 20) / 2, LOCKSTEP_DTYPE_F16), LOCKSTEP_ROUTE_CHUNKED);
    }
    lockstep_comm_free(c);
    return 0;
}

/* Four ranks on two CPUs, rank 0 sharing its CPU with rank 1: the probes in the calls
 * time rank 0 against a rank on the other CPU (rank 2), so a round trip is measured
 * that timed no process switch. With rank 1 as the partner every probe timed a switch
 * and was dropped, and the judgement stayed where create left it. */
static int pair_cpu[2];

static int paired_body(int rank, int size, const char *job)
{
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(pair_cpu[rank / 2], &one);
    CHECK_EQ(sched_setaffinity(0, sizeof one, &one), 0);
    lockstep_comm_params_t p = harness_params(rank, size, job);
    p.cpu_sharers = 2 * lockstep_cpus_available() + size;
    lockstep_comm_t *c = lockstep_comm_create(&p);
    CHECK(c != NULL);
    uint32_t rt = 0;
    for (int k = 0; k < PROBES; k++) {
        for (unsigned i = 0; i < 1024u; i++) {
            int32_t x = rank + 1;
            CHECK_EQ(lockstep_comm_allreduce(c, &x, &x, 1, LOCKSTEP_DTYPE_I32, LOCKSTEP_OP_SUM), 0);
            CHECK_EQ(x, size * (size + 1) / 2);
        }
        lockstep_comm_distance(c, &rt);
        int32_t measured = rank == 0 && rt > 0; /* rank 0 says, so every rank stops alike */
        CHECK_EQ(lockstep_comm_allreduce(c, &measured, &measured, 1, LOCKSTEP_DTYPE_I32, LOCKSTEP_OP_MAX), 0);
        if (measured)
            break;
    }
    harness_page()->value[rank][0] = rt;
    CHECK_EQ(lockstep_comm_barrier(c), 0);
    lockstep_comm_free(c);
    return 0;
}

static void test_probe_partner(void)
{
    cpu_set_t set;
    CHECK_EQ(sched_getaffinity(0, sizeof set, &set), 0);
    int n = 0;
    for (int cpu = 0; cpu < CPU_SETSIZE && n < 2; cpu++)
        if (CPU_ISSET(cpu, &set))
            pair_cpu[n++] = cpu;
    if (n < 2) {
        fprintf(stderr, "one CPU: no pair to place apart\n");
        return;
    }
    harness_run_clean(paired_body, 4, "partner", 120, 0);
    CHECK(harness_page()->value[0][0] > 0);
    CHECK(harness_page()->value[0][0] < 1000);
}

static void test_oversubscribed(void)
{
    can_kcopy = siblings_can_read();
    /* the probe's own judgement: a round trip is kept only if it timed no switch */
    over_distance = NULL;
    harness_run_clean(over_body, 2, "over-auto", 60, 0);
    for (int r = 0; r < 2; r++)
        CHECK(harness_page()->value[r][0] < 1000);
    CHECK_EQ(harness_page()->value[0][1], harness_page()->value[1][1]);
    over_distance = "far";
    harness_run_clean(over_body, 2, "over-far", 120, 0);
    over_distance = "close";
    harness_run_clean(over_body, 2, "over-close", 120, 0);
    over_distance = NULL;
    CHECK_EQ(unsetenv("LOCKSTEP_COMM_DISTANCE"), 0);
    test_probe_partner();
}

/* zero_copy_min_bytes decides whether an allreduce in the buffers goes zero-copy;
 * relay_bytes whether a zero-copy PUSH broadcast among 3 ranks is relayed (the same
 * bytes either way) */
static size_t zc_min;

static int threshold_body(int rank, int size, const char *job)
{
    lockstep_comm_params_t p = harness_params(rank, size, job);
    p.buffer_bytes = 1 << 20;
    p.zero_copy_min_bytes = zc_min;
    p.relay_bytes = 64 * 1024;
    lockstep_comm_t *c = lockstep_comm_create(&p);
    CHECK(c != NULL);
    float *z = lockstep_comm_buffer(c, NULL);
    CHECK(z != NULL);
    for (int i = 0; i < 256; i++) /* 1 KiB */
        z[i] = (float)(rank + i);
    CHECK_EQ(lockstep_comm_allreduce(c, z, z, 256, LOCKSTEP_DTYPE_F32, LOCKSTEP_OP_SUM), 0);
    harness_page()->value[rank][0] = lockstep_comm_route(c);
    for (int i = 0; i < 256; i++)
        CHECK_EQ(z[i], (float)(size * i + size * (size - 1) / 2));
    unsigned char *b = (unsigned char *)z;
    size_t n = 512 * 1024; /* past small_bytes and relay_bytes: relayed among 3 */
    for (size_t i = 0; size == 3 && i < n; i++)
        b[i] = rank == 2 ? (unsigned char)(i * 7) : 0;
    CHECK_EQ(size == 3 ? lockstep_comm_broadcast(c, b, n, 2, LOCKSTEP_ORDER_LINEAR, LOCKSTEP_XFER_PUSH) : 0, 0);
    for (size_t i = 0; size == 3 && i < n; i++)
        CHECK_EQ(b[i], (unsigned char)(i * 7));
    lockstep_comm_free(c);
    return 0;
}

static void test_thresholds(void)
{
    zc_min = 0; /* the table's: 1 KiB (times the ranks per CPU) */
    harness_run_clean(threshold_body, 2, "threshold-d", 60, 0);
    CHECK_EQ(harness_page()->value[0][0], LOCKSTEP_ROUTE_ZERO_COPY);
    zc_min = 2048; /* 1 KiB is below it: the small slots */
    harness_run_clean(threshold_body, 2, "threshold-p", 60, 0);
    CHECK_EQ(harness_page()->value[0][0], LOCKSTEP_ROUTE_SMALL);
    zc_min = 0;
    CHECK_EQ(setenv("LOCKSTEP_COMM_ZERO_COPY_MIN_BYTES", "4096", 1), 0); /* the environment's */
    harness_run_clean(threshold_body, 2, "threshold-e", 60, 0);
    CHECK_EQ(unsetenv("LOCKSTEP_COMM_ZERO_COPY_MIN_BYTES"), 0);
    CHECK_EQ(harness_page()->value[0][0], LOCKSTEP_ROUTE_SMALL);
    CHECK_EQ(harness_page()->value[1][0], LOCKSTEP_ROUTE_SMALL);
    /* 3 ranks on 2 CPUs: 1 KiB x 2 ranks per CPU is the allreduce's switch; a relayed
     * broadcast from relay_bytes */
    harness_run_clean(threshold_body, 3, "threshold-3", 60, 0);
    for (int r = 0; r < 3; r++)
        CHECK_EQ(harness_page()->value[r][0], lockstep_cpus_available() >= 3 ? LOCKSTEP_ROUTE_ZERO_COPY
                                                                              : LOCKSTEP_ROUTE_SMALL);

    lockstep_comm_params_t p = lockstep_comm_params_default();
    char msg[256];
    harness_job(p.job, sizeof p.job, "threshold-bad");
    p.size = 2;
    p.relay_bytes = ((size_t)1 << 31) + 1;
    CHECK_EQ(lockstep_comm_params_check(&p, msg, sizeof msg), -EINVAL);
    CHECK(strstr(msg, "relay_bytes must be at most 2**31") != NULL);
    p.relay_bytes = 0;
    p.prefetch_max_bytes = ((size_t)1 << 30) + 1;
    CHECK_EQ(lockstep_comm_params_check(&p, msg, sizeof msg), -EINVAL);
    p.prefetch_max_bytes = 0;
    static const char *vars[] = {"LOCKSTEP_COMM_RELAY_BYTES", "LOCKSTEP_COMM_ZERO_COPY_MIN_BYTES",
                                 "LOCKSTEP_COMM_PREFETCH_MAX_BYTES"};
    static const char *bad[] = {"-1", "12k", "4294967296"};
    for (int v = 0; v < 3; v++)
        for (int b = 0; b < 3; b++) {
            CHECK_EQ(setenv(vars[v], bad[b], 1), 0);
            CHECK_EQ(lockstep_comm_params_check(&p, msg, sizeof msg), -EINVAL);
            CHECK(strstr(msg, vars[v]) != NULL && strstr(msg, bad[b]) != NULL);
            CHECK_EQ(unsetenv(vars[v]), 0);
        }
    CHECK_EQ(lockstep_comm_params_check(&p, msg, sizeof msg), 0);
}

int main(int argc, char **argv)
{
    watchdog(300);
    const char *t = argc > 1 ? argv[1] : "";
    if (!strcmp(t, "probe"))
        test_probe();
    else if (!strcmp(t, "change"))
        test_change();
    else if (!strcmp(t, "thresholds"))
        test_thresholds();
    else if (!strcmp(t, "oversubscribed"))
        test_oversubscribed();
    else {
        fprintf(stderr, "usage: %s probe|change|thresholds|oversubscribed\n", argv[0]);
        return 2;
    }
    return 0;
}
