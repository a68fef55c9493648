/* barrier: each episode's plain writes are visible after it, nobody runs ahead. */
#include <omp.h>
#include "check.h"

int main(void)
{
    corpus_start();
    enum { EPISODES = 3000 };
    static int slot[64];
    long bad = 0;
#pragma omp parallel reduction(+ : bad)
    {
        int me = omp_get_thread_num(), n = omp_get_num_threads();
        for (int e = 1; e <= EPISODES; e++) {
            slot[me] = e;
#pragma omp barrier
            for (int i = 0; i < n; i++)
                bad += slot[i] != e;
#pragma omp barrier
        }
    }
    CHECK(bad == 0);
    printf("ok %d\n", EPISODES);
    return 0;
}
