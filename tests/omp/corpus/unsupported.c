/* Constructs the runtime does not support, one per argument; each must end the program
 * with "lockstep-omp: <entry> is not supported" (the test checks the message and the
 * exit status), never run part of it elsewhere. */
#include <omp.h>
#include <string.h>
#include "check.h"

int main(int argc, char **argv)
{
    corpus_start();
    CHECK(argc == 2);
    const char *what = argv[1];
    int x = 0;
    if (strcmp(what, "target") == 0) {
#pragma omp target map(tofrom : x)
        x = 1;
    } else if (strcmp(what, "teams") == 0) {
#pragma omp teams num_teams(2)
        x = 1;
    } else if (strcmp(what, "doacross") == 0) {
        int a[16] = {0};
#pragma omp parallel for ordered(1)
        for (int i = 1; i < 16; i++) {
#pragma omp ordered depend(sink : i - 1)
            a[i] = a[i - 1] + 1;
#pragma omp ordered depend(source)
        }
        x = a[15];
    } else if (strcmp(what, "task_reduction") == 0) {
#pragma omp parallel
#pragma omp single
#pragma omp taskgroup task_reduction(+ : x)
        {
#pragma omp task in_reduction(+ : x)
            x++;
        }
    } else if (strcmp(what, "detach") == 0) {
        omp_event_handle_t ev;
#pragma omp parallel
#pragma omp single
        {
#pragma omp task detach(ev)
            x = 1;
            omp_fulfill_event(ev);
        }
    } else {
        return 2;
    }
    printf("ran %d\n", x); /* never reached under lockstep */
    return 0;
}
