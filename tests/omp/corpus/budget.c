/* One budget of running threads per process (src/workers/budget.c): a live lockstep
 * pool counts against the CPUs that OpenMP's dynamic adjustment hands out, although the
 * pool lives in liblockstep and the regions in liblockstep-omp. Run under lockstep's
 * runtime only: libgomp knows nothing of the pool. */
#include <lockstep/pool.h>
#include <lockstep/wait.h>
#include <omp.h>
#include "check.h"

static int team_size(int want)
{
    int n = 0;
#pragma omp parallel num_threads(want)
#pragma omp single
    n = omp_get_num_threads();
    return n;
}

int main(void)
{
    corpus_start();
    int cpus = lockstep_cpus_available();
    if (cpus < 2)
        return 77; /* one CPU: every team is one thread with or without the pool */
    omp_set_dynamic(1);
    int before = team_size(cpus);
    lockstep_pool_params_t p = lockstep_pool_params_default();
    p.n_threads = cpus;
    lockstep_pool_t *pool = lockstep_pool_create(&p);
    CHECK(pool != NULL);
    int during = team_size(cpus);
    lockstep_pool_free(pool);
    int after = team_size(cpus);
    CHECK(before == cpus);
    CHECK(during == 1); /* the pool's threads fill the CPUs */
    CHECK(after == cpus);
    printf("ok %d %d %d\n", before, during, after);
    return 0;
}
