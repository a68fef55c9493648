/* ordered: the ordered blocks of a loop run in iteration order, for every schedule. */
#include <omp.h>
#include "check.h"

enum { N = 2000 };
static int order[N];

int main(void)
{
    corpus_start();
    long checksum = 0;
#define PRAGMA(x) _Pragma(#x)
#define ORDERED(...)                                                     \
    {                                                                    \
        int pos = 0;                                                     \
        PRAGMA(omp parallel for ordered schedule(__VA_ARGS__))           \
        for (int i = 0; i < N; i++) {                                    \
            volatile int work = i * 3;                                   \
            (void)work;                                                  \
            _Pragma("omp ordered") order[pos++] = i;                     \
        }                                                                \
        for (int i = 0; i < N; i++)                                      \
            CHECK(order[i] == i);                                        \
        checksum += pos;                                                 \
    }
    ORDERED(static) ORDERED(static, 3) ORDERED(dynamic) ORDERED(dynamic, 16)
    ORDERED(guided) ORDERED(guided, 4) ORDERED(runtime)
    /* ordered with iterations that skip the ordered block */
    int pos = 0;
#pragma omp parallel for ordered schedule(dynamic, 2)
    for (int i = 0; i < N; i++) {
        if (i % 3 == 0) {
#pragma omp ordered
            order[pos++] = i;
        }
    }
    for (int k = 0; k < pos; k++)
        CHECK(order[k] == 3 * k);
    checksum += pos;
    printf("ok %ld\n", checksum);
    return 0;
}
