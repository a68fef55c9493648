/* The teams construct on the host: a league of initial threads.
 *
 * The league's teams run one after another on the thread that met the construct, as
 * libgomp runs them on the host: each is an initial thread of its own contention group
 * (its regions fork teams of their own, within the one CPU budget) and sees its number
 * in omp_get_team_num(). Running them in turn is a conforming schedule: no team may
 * wait for another (teams have no barrier between them). thread_limit sets the
 * thread-limit-var of every team's data environment for the construct's extent. */
#include <limits.h>

#include "omp_impl.h"

/* the default league when neither num_teams nor OMP_NUM_TEAMS gives one */
#define LS_OMP_DEFAULT_TEAMS 3

LS_OMP_EXPORT int omp_get_num_teams(void)
{
    int n = ls_omp_thr()->c.league_size;
    return n > 0 ? n : 1;
}

LS_OMP_EXPORT int omp_get_team_num(void)
{
    return ls_omp_thr()->c.league_num;
}

static int limit_of(unsigned thread_limit)
{
    return thread_limit > INT_MAX ? INT_MAX : (int)thread_limit;
}

LS_OMP_EXPORT void GOMP_teams_reg(void (*fn)(void *), void *data, unsigned num_teams,
                                  unsigned thread_limit, unsigned flags)
{
    (void)flags;
    struct ls_omp_thread *t = ls_omp_thr();
    struct ls_omp_ctx saved = t->c;
    if (thread_limit == 0)
        thread_limit = (unsigned)ls_load_relaxed(&ls_omp_g.teams_thread_limit);
    if (thread_limit)
        ls_omp_icv_write(t)->thread_limit = limit_of(thread_limit);
    if (num_teams == 0) {
        int nv = ls_load_relaxed(&ls_omp_g.nteams);
        num_teams = nv > 0 ? (unsigned)nv : LS_OMP_DEFAULT_TEAMS;
    }
    if (num_teams > INT_MAX)
        num_teams = INT_MAX;
    t->c.league_size = (int)num_teams;
    for (unsigned k = 0; k < num_teams; k++) {
        t->c.league_num = (int)k;
        fn(data);
    }
    t->c = saved;
}

/* OpenMP 4.5's teams inside a target region's host version: only thread_limit acts */
LS_OMP_EXPORT void GOMP_teams(unsigned num_teams, unsigned thread_limit)
{
    (void)num_teams;
    if (thread_limit)
        ls_omp_icv_write(ls_omp_thr())->thread_limit = limit_of(thread_limit);
}

/* The host version of `target teams` loops over the league itself: while this answers
 * true it runs the next team's body (first: start the league at team 0). */
LS_OMP_EXPORT bool GOMP_teams4(unsigned num_teams_low, unsigned num_teams_high,
                               unsigned thread_limit, bool first)
{
    (void)num_teams_high;
    struct ls_omp_thread *t = ls_omp_thr();
    if (first) {
        if (thread_limit)
            ls_omp_icv_write(t)->thread_limit = limit_of(thread_limit);
        t->c.league_size = num_teams_low == 0 ? 1 : (int)(num_teams_low > INT_MAX ? INT_MAX
                                                                                  : num_teams_low);
        t->c.league_num = 0;
        return true;
    }
    if (t->c.league_num + 1 >= t->c.league_size)
        return false;
    t->c.league_num++;
    return true;
}
