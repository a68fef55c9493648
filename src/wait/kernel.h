/* The kernel calls lockstep makes to wait, and the one place it makes them: futex(2)
 * and sched_yield(2). Whoever parks re-checks its condition after registering as a
 * sleeper, and whoever makes the condition true wakes after reading the sleepers
 * (wait.c's protocol); these only make the calls. `process_private`: the word is in
 * this process's memory alone (faster), not in memory shared with other processes. */
#ifndef LOCKSTEP_WAIT_KERNEL_H
#define LOCKSTEP_WAIT_KERNEL_H

#include <linux/futex.h>
#include <sched.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* Sleep while *word == seen, until woken or (ts != NULL) ts, a relative time, passes;
 * a wake-up may also be spurious: the caller re-checks. */
static inline void ls_futex_wait(uint32_t *word, uint32_t seen, const struct timespec *ts, int process_private)
{
    syscall(SYS_futex, word, FUTEX_WAIT | (process_private ? FUTEX_PRIVATE_FLAG : 0), seen, ts, NULL, 0);
}

/* Wake up to n threads sleeping on word */
static inline void ls_futex_wake(uint32_t *word, int n, int process_private)
{
    syscall(SYS_futex, word, FUTEX_WAKE | (process_private ? FUTEX_PRIVATE_FLAG : 0), n, NULL, NULL, 0);
}

/* Give this CPU to another runnable thread, if there is one */
static inline void ls_yield(void)
{
    sched_yield();
}

#endif
