/* cancel parallel, for and taskgroup (run with OMP_CANCELLATION=true): a cancelled
 * construct ends early, each iteration and task runs at most once, and the regions
 * after a cancelled one run whole (its join re-counts the barrier). */
#include <omp.h>
#include "check.h"

int main(void)
{
    corpus_start();
    CHECK(omp_get_cancellation() == 1);
    int nth = omp_get_max_threads();
    long checksum = 0;
    for (int rep = 0; rep < 200; rep++) {
        int passed = 0;
#pragma omp parallel
        {
            if (omp_get_thread_num() == 0) {
#pragma omp cancel parallel
            }
#pragma omp barrier
#pragma omp atomic
            passed++;
        }
        CHECK(passed < nth); /* thread 0 left at its cancel */

        int m = 0; /* a whole region after it: every thread passes 3 barriers */
#pragma omp parallel reduction(+ : m)
        for (int b = 0; b < 3; b++) {
#pragma omp barrier
            m++;
        }
        CHECK(m == 3 * nth);
        checksum += m / nth;

        int hits[100] = {0};
#pragma omp parallel
#pragma omp for schedule(dynamic, 1)
        for (int i = 0; i < 100; i++) {
#pragma omp atomic
            hits[i]++;
            if (i == 10) {
#pragma omp cancel for
            }
#pragma omp cancellation point for
        }
        for (int i = 0; i < 100; i++)
            CHECK(hits[i] <= 1);
        CHECK(hits[10] == 1);

        int ran = 0;
#pragma omp parallel
#pragma omp single
#pragma omp taskgroup
        for (int i = 0; i < 50; i++) {
#pragma omp task firstprivate(i)
            {
#pragma omp atomic
                ran++;
                if (i == 0) {
#pragma omp cancel taskgroup
                }
            }
        }
        CHECK(ran >= 1 && ran <= 50);
        checksum += 1;
    }
    printf("ok %ld\n", checksum);
    return 0;
}
