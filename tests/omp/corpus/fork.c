/* fork after OpenMP was used: the child opens regions of its own (its parent's
 * workers stayed behind), and so does the parent afterwards. */
#include <omp.h>
#include <sys/wait.h>
#include <unistd.h>
#include "check.h"

static long region_sum(void)
{
    long s = 0;
#pragma omp parallel for reduction(+ : s) schedule(dynamic, 16)
    for (int i = 0; i < 100000; i++)
        s += i % 7;
    return s;
}

int main(void)
{
    corpus_start();
    long want = region_sum();
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        for (int r = 0; r < 20; r++)
            if (region_sum() != want)
                _exit(1);
        int n = 0;
#pragma omp parallel
#pragma omp single
        n = omp_get_num_threads();
        _exit(n == omp_get_max_threads() ? 0 : 1);
    }
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK(region_sum() == want);
    printf("ok %ld\n", want);
    return 0;
}
