/* worksharing loops: every schedule and chunk, long and unsigned long long, negative
 * steps, nowait chains, combined parallel for; each index runs exactly once. */
#include <omp.h>
#include <string.h>
#include "check.h"

enum { N = 10007 };
static int hits[N];

static void reset(void) { memset(hits, 0, sizeof hits); }
static void expect_once(void)
{
    for (int i = 0; i < N; i++)
        CHECK(hits[i] == 1);
}

int main(void)
{
    corpus_start();
    long checksum = 0;
#define PRAGMA(x) _Pragma(#x)
#define LOOP(...)                                                        \
    reset();                                                             \
    PRAGMA(omp parallel for schedule(__VA_ARGS__))                       \
    for (int i = 0; i < N; i++) {                                        \
        _Pragma("omp atomic") hits[i]++;                                 \
    }                                                                    \
    expect_once();                                                       \
    checksum += N;
    LOOP(static) LOOP(static, 1) LOOP(static, 7) LOOP(dynamic) LOOP(dynamic, 1)
    LOOP(dynamic, 8) LOOP(dynamic, 64) LOOP(guided) LOOP(guided, 8) LOOP(auto) LOOP(runtime)
    LOOP(nonmonotonic : dynamic, 3) LOOP(monotonic : dynamic, 3)
    /* runtime schedule from omp_set_schedule */
    omp_sched_t kinds[] = {omp_sched_static, omp_sched_dynamic, omp_sched_guided, omp_sched_auto};
    for (int k = 0; k < 4; k++) {
        omp_set_schedule(kinds[k], 5);
        omp_sched_t got;
        int chunk;
        omp_get_schedule(&got, &chunk);
        CHECK(got == kinds[k]);
        LOOP(runtime)
    }
    /* orphaned loops in one region, with nowait chains */
    reset();
    long sum = 0;
#pragma omp parallel reduction(+ : sum)
    {
        for (int rep = 0; rep < 20; rep++) {
#pragma omp for schedule(dynamic, 5) nowait
            for (int i = 0; i < N; i++)
                sum += i;
#pragma omp for schedule(guided) nowait
            for (int i = N - 1; i >= 0; i -= 2)
                sum += i;
#pragma omp for schedule(static, 3) nowait
            for (int i = 0; i < N; i++)
                sum += 1;
        }
#pragma omp for
        for (int i = 0; i < N; i++)
            hits[i]++;
    }
    expect_once();
    long want = 0;
    for (int i = 0; i < N; i++)
        want += i;
    for (int i = N - 1; i >= 0; i -= 2)
        want += i;
    want = (want + N) * 20;
    CHECK(sum == want);
    checksum += sum;
    /* unsigned long long iteration with a large base and a negative step */
    unsigned long long usum = 0, base = 1ull << 62;
#pragma omp parallel for schedule(dynamic, 7) reduction(+ : usum)
    for (unsigned long long u = base; u < base + 3000; u += 3)
        usum += u - base;
    unsigned long long uwant = 0;
    for (unsigned long long u = 0; u < 3000; u += 3)
        uwant += u;
    CHECK(usum == uwant);
    long dsum = 0;
#pragma omp parallel for schedule(guided, 2) reduction(+ : dsum)
    for (long i = 5000; i > -5000; i -= 7)
        dsum += i;
    long dwant = 0;
    for (long i = 5000; i > -5000; i -= 7)
        dwant += i;
    CHECK(dsum == dwant);
    /* empty and one-iteration loops */
    int ran = 0;
#pragma omp parallel for schedule(dynamic) reduction(+ : ran)
    for (int i = 0; i < 0; i++)
        ran++;
#pragma omp parallel for schedule(guided) reduction(+ : ran)
    for (int i = 0; i < 1; i++)
        ran++;
    CHECK(ran == 1);
    /* collapse */
    long csum = 0;
#pragma omp parallel for collapse(2) schedule(dynamic, 4) reduction(+ : csum)
    for (int i = 0; i < 70; i++)
        for (int j = 0; j < 30; j++)
            csum += i * 30 + j;
    CHECK(csum == 2100L * 2099 / 2);
    checksum += (long)(usum % 1000003) + dsum + csum;
    printf("ok %ld\n", checksum);
    return 0;
}
