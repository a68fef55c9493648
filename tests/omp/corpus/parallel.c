/* parallel: team sizes, thread numbers, if(false), nested levels, per-thread ICVs,
 * threadprivate data kept by the same thread from region to region. */
#include <omp.h>
#include <pthread.h>
#include "check.h"

static int tp = -1;
#pragma omp threadprivate(tp)

static void *app_thread(void *arg)
{
    /* another initial thread: its own ICV, its own team */
    omp_set_num_threads(2);
    long sum = 0;
    for (int r = 0; r < 50; r++) {
#pragma omp parallel reduction(+ : sum)
        sum += omp_get_num_threads();
    }
    *(long *)arg = sum;
    return NULL;
}

int main(void)
{
    corpus_start();
    int nmax = omp_get_max_threads();
    CHECK(nmax >= 1);
    CHECK(!omp_in_parallel());
    CHECK(omp_get_level() == 0);
    long checksum = 0;
    for (int r = 0; r < 200; r++) {
        int seen[64] = {0}, n = 0;
#pragma omp parallel
        {
#pragma omp atomic
            seen[omp_get_thread_num()]++;
#pragma omp single
            n = omp_get_num_threads();
            CHECK(omp_in_parallel() == (omp_get_num_threads() > 1));
            CHECK(omp_get_level() == 1);
        }
        CHECK(n == nmax);
        for (int i = 0; i < n; i++)
            CHECK(seen[i] == 1);
        checksum += 1;
    }
    /* threadprivate survives between regions of the same size */
#pragma omp parallel
    tp = omp_get_thread_num();
    int bad = 0;
    for (int r = 0; r < 20; r++) {
#pragma omp parallel reduction(+ : bad)
        bad += tp != omp_get_thread_num();
    }
    CHECK(bad == 0);
    /* num_threads and if */
    for (int k = 1; k <= 5; k++) {
        int n = 0;
#pragma omp parallel num_threads(k)
#pragma omp master
        n = omp_get_num_threads();
        CHECK(n == k);
        checksum += n;
    }
    int n_if = 0;
#pragma omp parallel if (0)
    n_if = omp_get_num_threads();
    CHECK(n_if == 1);
    /* nested: inner teams of one, with levels and ancestors */
    int nested_bad = 0;
#pragma omp parallel num_threads(3) reduction(+ : nested_bad)
    {
        int outer = omp_get_thread_num();
#pragma omp parallel num_threads(2)
        {
            nested_bad += omp_get_level() != 2;
            nested_bad += omp_get_ancestor_thread_num(1) != outer;
            nested_bad += omp_get_team_size(1) != 3;
            nested_bad += omp_get_ancestor_thread_num(2) != omp_get_thread_num();
            nested_bad += omp_get_team_size(2) != omp_get_num_threads();
            nested_bad += omp_get_ancestor_thread_num(3) != -1;
        }
        nested_bad += omp_get_level() != 1;
        nested_bad += omp_get_active_level() != 1;
    }
    CHECK(nested_bad == 0);
    /* omp_set_num_threads inside a region changes that thread's value only */
    int inner_max = 0;
#pragma omp parallel num_threads(2)
    {
        if (omp_get_thread_num() == 0)
            omp_set_num_threads(3);
#pragma omp barrier
        if (omp_get_thread_num() == 1)
            inner_max = omp_get_max_threads();
    }
    CHECK(inner_max == nmax || omp_get_num_threads() == 1);
    CHECK(omp_get_max_threads() == nmax);
    /* two application threads opening regions at once */
    pthread_t th[2];
    long sums[2];
    for (int i = 0; i < 2; i++)
        CHECK(pthread_create(&th[i], NULL, app_thread, &sums[i]) == 0);
    for (int i = 0; i < 2; i++) {
        pthread_join(th[i], NULL);
        CHECK(sums[i] == 200); /* 50 regions, each of 2 threads adding 2 */
        checksum += sums[i];
    }
    printf("ok %ld\n", checksum);
    return 0;
}
