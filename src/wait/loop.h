/* The one shape of a wait, for waiters whose condition is more than one word reaching
 * a value (lockstep_wait_until's case): check, do useful work, spin, spin on while the
 * peers still missing run on other CPUs, yield, park. The caller supplies the parts
 * that are its own as hooks; the phases, their order and their budgets are here.
 *
 * Inline, with the hooks in a constant table of the caller's: the compiler calls them
 * directly, so a hot wait (the OpenMP barrier) pays nothing for the indirection. */
#ifndef LOCKSTEP_WAIT_LOOP_H
#define LOCKSTEP_WAIT_LOOP_H

#include <stdbool.h>
#include <stdint.h>

#include "lockstep/wait.h"
#include "../internal.h"
#include "kernel.h"

struct ls_wait_hooks {
    /* the condition: true ends the wait */
    bool (*done)(void *arg);
    /* work the waiter may do meanwhile (run a task): true when it did some, and the
     * wait starts its budgets over; NULL: none */
    bool (*work)(void *arg);
    /* the participants outnumber the CPUs (spin budget 0): is every peer still missing
     * on another CPU (ls_wait_elsewhere_spins)? NULL: never asked */
    bool (*elsewhere)(void *arg);
    /* register as a sleeper, re-check the condition and any work, sleep until woken,
     * deregister */
    void (*park)(void *arg);
};

/* PAUSE rounds between two checks while spinning on peers that run elsewhere: each
 * check reads the peers' lines */
#define LS_WAIT_ELSEWHERE_STEP 16u

static inline void ls_wait_loop(const lockstep_wait_t *w, uint32_t spins, uint32_t yields,
                                const struct ls_wait_hooks *h, void *arg)
{
    uint32_t elsewhere = h->elsewhere ? ls_wait_elsewhere_spins() : 0;
    uint32_t i = 0, spun_elsewhere = 0;
    for (;;) {
        if (h->done(arg))
            return;
        if (h->work && h->work(arg)) {
            i = 0;
            continue;
        }
        if (i < spins) {
            ls_cpu_relax();
        } else if (spun_elsewhere < elsewhere && h->elsewhere(arg)) {
            for (unsigned k = 0; k < LS_WAIT_ELSEWHERE_STEP; k++)
                ls_cpu_relax();
            spun_elsewhere += LS_WAIT_ELSEWHERE_STEP;
            continue;
        } else if (i < spins + yields || (w->flags & LOCKSTEP_WAIT_F_NOPARK)) {
            ls_yield();
        } else {
            h->park(arg);
            i = spins; /* woken: yield a round before parking again */
            continue;
        }
        i++;
    }
}

#endif
