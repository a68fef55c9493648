/* the omp_* API: queries outside and inside regions, ICV setters, time, devices. */
#include <omp.h>
#include "check.h"

int main(void)
{
    corpus_start();
    CHECK(omp_get_thread_num() == 0);
    CHECK(omp_get_num_threads() == 1);
    CHECK(omp_get_num_procs() >= 1);
    CHECK(omp_get_level() == 0 && omp_get_active_level() == 0);
    CHECK(omp_get_ancestor_thread_num(0) == 0 && omp_get_team_size(0) == 1);
    CHECK(omp_get_ancestor_thread_num(1) == -1 && omp_get_team_size(1) == -1);
    CHECK(omp_in_final() == 0);
    CHECK(omp_get_cancellation() == 0);
    CHECK(omp_get_num_devices() >= 0);
    CHECK(omp_is_initial_device() == 1);
    CHECK(omp_get_num_teams() == 1 && omp_get_team_num() == 0);
    CHECK(omp_get_thread_limit() >= 1);
    CHECK(omp_get_max_active_levels() >= 0);
    omp_set_dynamic(0);
    CHECK(omp_get_dynamic() == 0);
    omp_set_max_active_levels(1);
    CHECK(omp_get_max_active_levels() == 1);
    double t0 = omp_get_wtime();
    CHECK(omp_get_wtick() > 0 && omp_get_wtick() < 1);
    double t1 = omp_get_wtime();
    CHECK(t1 >= t0);
    omp_set_num_threads(3);
    CHECK(omp_get_max_threads() == 3);
    int n = 0, lvl = 0, act = 0;
#pragma omp parallel
    {
#pragma omp single
        {
            n = omp_get_num_threads();
            lvl = omp_get_level();
            act = omp_get_active_level();
        }
    }
    CHECK(n == 3 && lvl == 1 && act == 1);
    int one_level = 0;
#pragma omp parallel num_threads(1)
    one_level = omp_get_level() * 10 + omp_get_active_level();
    CHECK(one_level == 10);
    void *p = omp_alloc(100, omp_default_mem_alloc);
    CHECK(p != NULL);
    omp_free(p, omp_default_mem_alloc);
    void *q = omp_aligned_alloc(64, 100, omp_default_mem_alloc);
    CHECK(q != NULL && ((unsigned long)q & 63) == 0);
    omp_free(q, omp_default_mem_alloc);
    printf("ok %d\n", n);
    return 0;
}
