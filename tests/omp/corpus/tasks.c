/* tasks: a fan from single, recursive fib with taskwait, taskgroup, depend chains,
 * if(0) and final, taskloop with grainsize and num_tasks, taskyield. */
#include <omp.h>
#include "check.h"

static long fib(int n)
{
    if (n < 2)
        return n;
    long x, y;
#pragma omp task shared(x) if (n > 12)
    x = fib(n - 1);
#pragma omp task shared(y) if (n > 12)
    y = fib(n - 2);
#pragma omp taskwait
    return x + y;
}

static long seq_fib(int n)
{
    return n < 2 ? n : seq_fib(n - 1) + seq_fib(n - 2);
}

int main(void)
{
    corpus_start();
    long checksum = 0;
    enum { FAN = 10000 };
    static int done[FAN];
    long count = 0;
#pragma omp parallel
#pragma omp single
    for (int i = 0; i < FAN; i++) {
#pragma omp task firstprivate(i)
        {
            done[i]++;
#pragma omp atomic
            count++;
        }
    }
    CHECK(count == FAN);
    for (int i = 0; i < FAN; i++)
        CHECK(done[i] == 1);
    checksum += count;

    long f = 0;
#pragma omp parallel
#pragma omp single
    f = fib(22);
    CHECK(f == seq_fib(22));
    checksum += f;

    /* taskgroup waits for descendants too */
    long grp = 0;
#pragma omp parallel
#pragma omp single
    {
#pragma omp taskgroup
        {
            for (int i = 0; i < 50; i++) {
#pragma omp task
                {
#pragma omp task
                    {
#pragma omp atomic
                        grp++;
                    }
#pragma omp atomic
                    grp++;
                }
            }
        }
        CHECK(grp == 100);
    }
    checksum += grp;

    /* depend: a chain of tasks each reading the previous one's value */
    long chain = 0;
#pragma omp parallel
#pragma omp single
    for (int i = 0; i < 200; i++) {
#pragma omp task depend(inout : chain) firstprivate(i)
        chain = chain * 3 % 1000003 + i;
    }
    long want = 0;
    for (int i = 0; i < 200; i++)
        want = want * 3 % 1000003 + i;
    CHECK(chain == want);
    checksum += chain;

    /* if(0) runs at once; inside a final task every task is final */
    int finals = 0, order_ok = 1;
#pragma omp parallel
#pragma omp single
    {
        int step = 0;
#pragma omp task if (0) shared(step)
        step = 1;
        order_ok = step == 1;
#pragma omp task final(1) shared(finals)
        {
            finals += omp_in_final();
#pragma omp task shared(finals)
            finals += omp_in_final();
        }
#pragma omp taskwait
    }
    CHECK(order_ok && finals == 2);

    /* taskloop */
    static int hits[5000];
    long tl = 0;
#pragma omp parallel
#pragma omp single
    {
#pragma omp taskloop grainsize(64)
        for (int i = 0; i < 5000; i++)
            hits[i]++;
#pragma omp taskloop num_tasks(7)
        for (int i = 0; i < 5000; i++)
            hits[i]++;
#pragma omp taskloop
        for (unsigned long long u = 0; u < 5000; u++) {
            hits[u]++;
#pragma omp taskyield
        }
    }
    for (int i = 0; i < 5000; i++) {
        CHECK(hits[i] == 3);
        tl += hits[i];
    }
    checksum += tl;

    /* tasks created by every thread, finished by the region's end */
    long all = 0;
#pragma omp parallel
    for (int i = 0; i < 100; i++) {
#pragma omp task
        {
#pragma omp atomic
            all++;
        }
    }
    CHECK(all == 100L * omp_get_max_threads());
    printf("ok %ld\n", checksum);
    return 0;
}
