/* Joining a job: rendezvous errors (a stale segment, another build, disagreeing params,
 * a rank given twice) and the environment's rank variables. */
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
    CHECK_EQ(lockstep_comm_allreduce(c, &v, &v, 1, LOCKSTEP_DTYPE_I32, LOCKSTEP_OP_SUM), 0);
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
        CHECK_EQ(lockstep_comm_allreduce(c, v, v, n, LOCKSTEP_DTYPE_F32, LOCKSTEP_OP_SUM), 0);
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
    int32_t hdr[4] = {(int32_t)LS_COMM_MAGIC, 1, (int32_t)dead, (int32_t)(uint32_t)ns.st_ino};
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
    int32_t other_build[4] = {(int32_t)LS_COMM_MAGIC + 1, 2, (int32_t)getpid(), hdr[3]};
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
    if (strcmp(t, "rendezvous") == 0) {
        test_rendezvous();
    } else if (strcmp(t, "env") == 0) {
        test_env();
    } else {
        fprintf(stderr, "usage: %s rendezvous|env\n", argv[0]);
        return 1;
    }
    return 0;
}
