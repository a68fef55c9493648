/* Shared by the corpus: a failed check prints where and exits 1; a watchdog ends a
 * program that hangs. Each program prints one line, "ok <checksum>", whose value does
 * not depend on the thread count or the runtime. */
#ifndef CORPUS_CHECK_H
#define CORPUS_CHECK_H
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define CHECK(cond)                                                                  \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
            exit(1);                                                                 \
        }                                                                            \
    } while (0)

static void corpus_timeout(int sig)
{
    (void)sig;
    static const char msg[] = "corpus: watchdog: no progress in 60 s\n";
    (void)!write(2, msg, sizeof msg - 1);
    _exit(2);
}

/* Arm the watchdog (60 s, times LOCKSTEP_TEST_SLOWDOWN for sanitizer builds). */
static inline void corpus_start(void)
{
    const char *s = getenv("LOCKSTEP_TEST_SLOWDOWN");
    unsigned slow = s && atoi(s) > 0 ? (unsigned)atoi(s) : 1u;
    signal(SIGALRM, corpus_timeout);
    alarm(60u * slow);
}
#endif
