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

/* Bulk test-side work (inputs, references, digests, pattern checks) on memory the calling
 * thread owns runs without ThreadSanitizer's instrumentation of every access, which made
 * it most of a sanitized run's time. Such a function states the ranges it writes and reads
 * with TEST_WRITES and TEST_READS, so a race between it and the library's threads on those
 * bytes is still reported. Elsewhere all three are nothing. */
#if defined(__SANITIZE_THREAD__) /* gcc, which knows the two range calls as built-ins */
#define TEST_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) /* clang */
#define TEST_TSAN 1
void __tsan_read_range(void *addr, unsigned long size);
void __tsan_write_range(void *addr, unsigned long size);
#endif
#endif
#ifdef TEST_TSAN
#define TEST_UNTRACED __attribute__((no_sanitize("thread")))
#define TEST_READS(p, n) __tsan_read_range((void *)(p), (long)(n))
#define TEST_WRITES(p, n) __tsan_write_range((void *)(p), (long)(n))
#else
#define TEST_UNTRACED
#define TEST_READS(p, n) ((void)(p), (void)(n))
#define TEST_WRITES(p, n) ((void)(p), (void)(n))
#endif

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
