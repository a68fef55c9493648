/* single (with nowait and copyprivate), master and masked. */
#include <omp.h>
#include "check.h"

int main(void)
{
    corpus_start();
    long checksum = 0;
    for (int rep = 0; rep < 300; rep++) {
        int singles = 0, masters = 0, bad = 0;
#pragma omp parallel reduction(+ : bad)
        {
            int v;
#pragma omp single copyprivate(v)
            v = rep * 7 + 1;
            bad += v != rep * 7 + 1;
#pragma omp single
            singles++;
#pragma omp single nowait
            singles++;
#pragma omp master
            masters++;
#pragma omp barrier
#pragma omp masked
            masters++;
#pragma omp barrier
            bad += singles != 2 || masters != 2;
        }
        CHECK(bad == 0);
        checksum += singles + masters;
    }
    printf("ok %ld\n", checksum);
    return 0;
}
