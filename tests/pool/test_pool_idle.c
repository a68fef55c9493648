/* An idle pool parks: after a region, every worker thread reaches the kernel's
 * sleeping state (S in /proc/self/task/TID/stat) under the auto and passive policies.
 * This checks a state, not a duration; the watchdog bounds the wait. */
#define _GNU_SOURCE
#include <dirent.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "lockstep/lockstep.h"
#include "../common/check.h"

static void nothing(void *p, int ith, int nth) { (void)p; (void)ith; (void)nth; }

/* threads of this process other than the caller that are not sleeping */
static int awake_others(void)
{
    pid_t me = (pid_t)syscall(SYS_gettid);
    DIR *d = opendir("/proc/self/task");
    CHECK(d != NULL);
    struct dirent *e;
    int awake = 0;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.' || atoi(e->d_name) == me)
            continue;
        char path[300], buf[512];
        snprintf(path, sizeof path, "/proc/self/task/%s/stat", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        size_t got = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[got] = 0;
        char *paren = strrchr(buf, ')');
        if (paren && paren[1] == ' ' && paren[2] != 'S')
            awake++;
    }
    closedir(d);
    return awake;
}

int main(void)
{
    watchdog(60);
    lockstep_wait_policy_t pols[] = {LOCKSTEP_WAIT_AUTO, LOCKSTEP_WAIT_PASSIVE};
    int sizes[] = {2, 4, 9};
    for (unsigned pi = 0; pi < 2; pi++)
        for (unsigned si = 0; si < 3; si++) {
            lockstep_pool_params_t p = lockstep_pool_params_default();
            p.n_threads = sizes[si];
            p.wait_policy = pols[pi];
            lockstep_pool_t *pool = lockstep_pool_create(&p);
            CHECK(pool != NULL);
            CHECK_EQ(lockstep_pool_run(pool, nothing, NULL), 0);
            /* poll until all workers sleep; a pool that never parks trips the watchdog */
            while (awake_others() != 0)
                usleep(1000);
            lockstep_pool_free(pool);
        }
    return 0;
}
