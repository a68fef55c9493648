/* tasks: a fan from single, recursive fib with taskwait, taskgroup, depend chains,
 * if(0) and final, taskloop with grainsize and num_tasks, taskyield, and the tied-task
 * scheduling constraint while every thread makes and steals tasks. */
#include <omp.h>
#include <string.h>

#include "check.h"

/* The implicit task (by thread number) whose taskwait this thread is in, or -1: a
 * thread in a taskwait may run only that task's descendants. (volatile: the compiler
 * would drop the store before a taskwait, which it cannot see read it.) */
static volatile int waiting_root = -1;
#pragma omp threadprivate(waiting_root)
static long misplaced, tree_tasks;

/* A tree of tasks under thread root's implicit task; each task checks where it runs. */
static void tree(int root, int depth)
{
    if (waiting_root != -1 && waiting_root != root) {
#pragma omp atomic
        misplaced++;
    }
#pragma omp atomic
    tree_tasks++;
    if (depth == 0) {
        for (volatile int spin = 0; spin < 2000; spin++) /* long enough to be stolen from */
            ;
        return;
    }
    for (int k = 0; k < 3; k++) {
#pragma omp task firstprivate(root, depth)
        tree(root, depth - 1);
    }
    int outer = waiting_root;
    waiting_root = root;
#pragma omp taskwait
    waiting_root = outer;
}

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
    /* fans, each task run exactly once: several, so that thieves taking batches meet
     * a creator whose deque is full */
    enum { FAN = 10000, FANS = 24 };
    static int done[FAN];
    long count = 0;
    for (int rep = 0; rep < FANS; rep++) {
        memset(done, 0, sizeof done);
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
        for (int i = 0; i < FAN; i++)
            CHECK(done[i] == 1);
    }
    CHECK(count == (long)FAN * FANS);
    checksum += count / FANS;

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

    /* every thread grows trees and waits for them while the others take parts of them */
#pragma omp parallel
    {
        int me = omp_get_thread_num();
        for (int k = 0; k < 3; k++) {
#pragma omp task firstprivate(me)
            tree(me, 4);
        }
        waiting_root = me;
#pragma omp taskwait
        waiting_root = -1;
    }
    CHECK(tree_tasks == 363L * omp_get_max_threads()); /* 3 + 9 + ... + 243 each */

    /* The same constraint, arranged: thread 1 waits in a taskwait for its task A, which
     * runs elsewhere for 20 ms, while thread 2's task B (another implicit task's child)
     * is queued all that time. Thread 1 must not run B. */
    static int a_started, a_done;
#pragma omp parallel
    {
        int me = omp_get_thread_num();
        if (omp_get_num_threads() >= 3 && me == 1) {
#pragma omp task
            {
                __atomic_store_n(&a_started, 1, __ATOMIC_SEQ_CST);
                double until = omp_get_wtime() + 0.02;
                while (omp_get_wtime() < until)
                    ;
                __atomic_store_n(&a_done, 1, __ATOMIC_SEQ_CST);
            }
            while (!__atomic_load_n(&a_started, __ATOMIC_SEQ_CST)) /* A runs on another thread */
                ;
            waiting_root = 1;
#pragma omp taskwait
            waiting_root = -1;
        } else if (omp_get_num_threads() >= 3 && me == 2) {
            while (!__atomic_load_n(&a_started, __ATOMIC_SEQ_CST))
                ;
#pragma omp task
            tree(2, 0);
            while (!__atomic_load_n(&a_done, __ATOMIC_SEQ_CST)) /* B stays queued meanwhile */
                ;
        }
    }
    CHECK(misplaced == 0);
    printf("ok %ld\n", checksum);
    return 0;
}
