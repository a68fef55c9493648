/* What the failure tests share beside comm_harness.h */
#ifndef LOCKSTEP_TEST_FAILURE_HELPERS_H
#define LOCKSTEP_TEST_FAILURE_HELPERS_H

#include <signal.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "comm_harness.h"

/* Whether one process may read a sibling's memory, as the ranks' kernel copies need */
static inline int siblings_can_read(void)
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
