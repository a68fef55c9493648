/* Wait policies and the spin -> yield -> park protocol: policy resolution (params and
 * LOCKSTEP_WAIT_POLICY), deadlines, and that a parked waiter is woken by publish. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdint.h>

#include "lockstep/lockstep.h"
#include "../common/check.h"

static lockstep_wait_t passive;
static lockstep_waitword_t word;

static void *waiter(void *p)
{
    (void)p;
    CHECK_EQ(lockstep_wait_until(&passive, &word, 5, 0), 0);
    CHECK(__atomic_load_n(&word.value, __ATOMIC_RELAXED) >= 5);
    return NULL;
}

int main(void)
{
    watchdog(60);
    lockstep_wait_t w;
    int cpus = lockstep_cpus_available();
    CHECK(cpus >= 1);

    CHECK_EQ(lockstep_wait_init(NULL, LOCKSTEP_WAIT_AUTO, 1, 0), -EINVAL);
    CHECK_EQ(lockstep_wait_init(&w, (lockstep_wait_policy_t)9, 1, 0), -EINVAL);

    /* auto: spins when the participants fit the CPUs, not when they outnumber them */
    CHECK_EQ(lockstep_wait_init(&w, LOCKSTEP_WAIT_AUTO, (unsigned)cpus, 0), 0);
    CHECK(w.spin > 0);
    CHECK(!(w.flags & LOCKSTEP_WAIT_F_NOPARK));
    CHECK_EQ(lockstep_wait_init(&w, LOCKSTEP_WAIT_AUTO, (unsigned)cpus + 1, 0), 0);
    CHECK_EQ(w.spin, 0);
    CHECK_EQ(lockstep_wait_init(&w, LOCKSTEP_WAIT_ACTIVE, 64, 1), 0);
    CHECK(w.flags & LOCKSTEP_WAIT_F_NOPARK);
    CHECK(w.flags & LOCKSTEP_WAIT_F_SHARED);
    CHECK_EQ(lockstep_wait_init(&w, LOCKSTEP_WAIT_PASSIVE, 1, 0), 0);
    CHECK_EQ(w.spin, 0);

    /* the environment chooses when the caller passes DEFAULT, and only then */
    setenv("LOCKSTEP_WAIT_POLICY", "passive", 1);
    CHECK_EQ(lockstep_wait_init(&w, LOCKSTEP_WAIT_DEFAULT, 1, 0), 0);
    CHECK_EQ(w.policy, LOCKSTEP_WAIT_PASSIVE);
    CHECK_EQ(lockstep_wait_init(&w, LOCKSTEP_WAIT_ACTIVE, 1, 0), 0);
    CHECK_EQ(w.policy, LOCKSTEP_WAIT_ACTIVE);
    setenv("LOCKSTEP_WAIT_POLICY", "ACTIVE", 1);
    CHECK_EQ(lockstep_wait_init(&w, LOCKSTEP_WAIT_DEFAULT, 1, 0), 0);
    CHECK_EQ(w.policy, LOCKSTEP_WAIT_ACTIVE);
    setenv("LOCKSTEP_WAIT_POLICY", "sometimes", 1);
    CHECK_EQ(lockstep_wait_init(&w, LOCKSTEP_WAIT_DEFAULT, 1, 0), -EINVAL);
    unsetenv("LOCKSTEP_WAIT_POLICY");
    CHECK_EQ(lockstep_wait_init(&w, LOCKSTEP_WAIT_DEFAULT, 1, 0), 0);
    CHECK_EQ(w.policy, LOCKSTEP_WAIT_AUTO);

    /* reached in wrap-around order */
    lockstep_waitword_t ww = {0xfffffffeu, 0};
    CHECK_EQ(lockstep_wait_until(&w, &ww, 0xfffffffeu, 0), 0);
    ww.value = 3; /* wrapped past 0: 3 is "after" 0xffffffff */
    CHECK_EQ(lockstep_wait_until(&w, &ww, 0xffffffffu, 0), 0);
    CHECK_EQ(lockstep_wait_until(NULL, &ww, 1, 0), -EINVAL);

    /* deadlines, for every policy (active must honour them too) */
    for (int pol = LOCKSTEP_WAIT_AUTO; pol <= LOCKSTEP_WAIT_PASSIVE; pol++) {
        CHECK_EQ(lockstep_wait_init(&w, (lockstep_wait_policy_t)pol, 1, 0), 0);
        lockstep_waitword_t never = {0, 0};
        CHECK_EQ(lockstep_wait_until(&w, &never, 1, lockstep_now_ns() + 5 * 1000 * 1000), -ETIMEDOUT);
        CHECK_EQ(never.sleepers, 0);
    }

    /* a parked waiter is woken by publish: wait until it has announced itself in
     * sleepers (so it is past spinning), then publish */
    CHECK_EQ(lockstep_wait_init(&passive, LOCKSTEP_WAIT_PASSIVE, 2, 0), 0);
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, waiter, NULL), 0);
    while (__atomic_load_n(&word.sleepers, __ATOMIC_SEQ_CST) == 0)
        sched_yield();
    lockstep_wait_publish(&passive, &word, 4); /* not yet reached: it must park again */
    lockstep_wait_publish(&passive, &word, 5);
    pthread_join(t, NULL);
    CHECK_EQ(word.sleepers, 0);
    return 0;
}
