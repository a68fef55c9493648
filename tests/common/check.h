/* Test harness: exit 0 pass, 1 fail, 77 skip; a watchdog turns a hang into a failure. */
#ifndef LOCKSTEP_TEST_CHECK_H
#define LOCKSTEP_TEST_CHECK_H

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TEST_SKIP 77

#define CHECK(cond)                                                                   \
    do {                                                                              \
        if (!(cond)) {                                                                \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);  \
            exit(1);                                                                  \
        }                                                                             \
    } while (0)

#define CHECK_EQ(a, b)                                                                \
    do {                                                                              \
        long long va_ = (long long)(a), vb_ = (long long)(b);                         \
        if (va_ != vb_) {                                                             \
            fprintf(stderr, "%s:%d: check failed: %s == %s (%lld != %lld)\n",         \
                    __FILE__, __LINE__, #a, #b, va_, vb_);                            \
            exit(1);                                                                  \
        }                                                                             \
    } while (0)

static void watchdog_fire(int sig)
{
    (void)sig;
    static const char msg[] = "watchdog: test did not finish in time (deadlock?)\n";
    if (write(2, msg, sizeof msg - 1) < 0) { /* nothing more to do */ }
    _exit(1);
}

/* Fail the process (exit 1) if it is still running after `seconds`. Sanitizer builds
 * run slower, so the budget is scaled by LOCKSTEP_TEST_SLOWDOWN when set. Re-arm in
 * every fork()ed child: alarms are not inherited. */
static inline void watchdog(unsigned seconds)
{
    const char *s = getenv("LOCKSTEP_TEST_SLOWDOWN");
    unsigned f = s ? (unsigned)atoi(s) : 1u;
    signal(SIGALRM, watchdog_fire);
    alarm(seconds * (f ? f : 1u));
}

#endif
