/* sections and parallel sections: every section runs exactly once, in a region and
 * orphaned (outside any region, where the one thread runs them all). */
#include <omp.h>
#include "check.h"

int main(void)
{
    corpus_start();
    long checksum = 0;
    for (int rep = 0; rep < 100; rep++) {
        int a = 0, b = 0, c = 0, d = 0;
#pragma omp parallel sections
        {
#pragma omp section
            a++;
#pragma omp section
            b++;
#pragma omp section
            c++;
        }
#pragma omp parallel
        {
#pragma omp sections nowait
            {
#pragma omp section
                d += 10;
#pragma omp section
                d += 0; /* a section that does nothing */
            }
#pragma omp sections
            {
#pragma omp section
                a++;
#pragma omp section
                b++;
            }
        }
#pragma omp sections
        {
#pragma omp section
            a++;
#pragma omp section
            b++;
#pragma omp section
            c++;
        }
        CHECK(a == 3 && b == 3 && c == 2 && d == 10);
        checksum += a + b + c + d;
    }
    printf("ok %ld\n", checksum);
    return 0;
}
