/* critical (unnamed, named), atomic (native and through the runtime's lock),
 * reductions, simple and nestable locks. */
#include <omp.h>
#include "check.h"

int main(void)
{
    corpus_start();
    enum { R = 20000 };
    long a = 0, b = 0, c = 0, r = 0, d = 0, e = 0;
    long double ld = 0;
    __int128 wide = 0;
    omp_lock_t lock;
    omp_nest_lock_t nest;
    omp_init_lock(&lock);
    omp_init_nest_lock(&nest);
    int nth = 1;
#pragma omp parallel reduction(+ : r)
    {
#pragma omp single
        nth = omp_get_num_threads();
        for (int i = 0; i < R; i++) {
#pragma omp critical
            a++;
#pragma omp critical(other)
            b += 2;
#pragma omp atomic
            c += 3;
#pragma omp atomic
            ld += 1.0L;
#pragma omp atomic
            wide += 1;
            r += 1;
        }
        for (int i = 0; i < 1000; i++) {
            omp_set_lock(&lock);
            d++;
            omp_unset_lock(&lock);
            omp_set_nest_lock(&nest);
            omp_set_nest_lock(&nest);
            e++;
            omp_unset_nest_lock(&nest);
            omp_unset_nest_lock(&nest);
        }
        while (!omp_test_lock(&lock))
            ;
        d++;
        omp_unset_lock(&lock);
        int k = omp_test_nest_lock(&nest);
        if (k) { /* held by this thread now: a second test nests */
            CHECK(k == 1);
            CHECK(omp_test_nest_lock(&nest) == 2);
            omp_unset_nest_lock(&nest);
            omp_unset_nest_lock(&nest);
        }
    }
    omp_destroy_lock(&lock);
    omp_destroy_nest_lock(&nest);
    CHECK(a == (long)nth * R);
    CHECK(b == (long)nth * 2L * R);
    CHECK(c == (long)nth * 3L * R);
    CHECK(d == (long)nth * 1001);
    CHECK(e == (long)nth * 1000);
    CHECK(r == (long)nth * R);
    CHECK(ld == (long double)nth * R);
    CHECK(wide == (__int128)nth * R);
    printf("ok %ld\n", (a + b + c + r + d + e) / nth);
    return 0;
}
