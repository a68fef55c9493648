/* A team's bell, its cold half: setting a team's waits up, and sleeping on the bell
 * (bell.h rings it and counts the tasks pending). */
#include "omp_impl.h"

void ls_omp_init_wait(lockstep_wait_t *w)
{
    if (lockstep_wait_init(w, ls_omp_g.wait_policy, 1, 0) != 0)
        lockstep_wait_init(w, LOCKSTEP_WAIT_AUTO, 1, 0);
    if (ls_omp_g.spincount >= 0)
        w->spin = (uint32_t)(ls_omp_g.spincount > UINT32_MAX ? UINT32_MAX : ls_omp_g.spincount);
}

void ls_omp_sleep(struct ls_omp_team *team, uint32_t seen)
{
    ls_futex_wait(&team->bell.value, seen, NULL, 1);
}
