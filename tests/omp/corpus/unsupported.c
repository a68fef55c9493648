/* Entry points the runtime does not implement, one per argument: OpenACC and the
 * Fortran bindings. Each must end the program with "lockstep-omp: <entry> is not
 * supported" (the test checks the message and the exit status), never run part of it
 * elsewhere. */
#include <omp.h>
#include <string.h>
#include "check.h"

int acc_get_num_devices(int device_type); /* openacc.h's, declared here: no -fopenacc */
int omp_get_thread_num_(void);            /* the Fortran binding */

int main(int argc, char **argv)
{
    corpus_start();
    CHECK(argc == 2);
    const char *what = argv[1];
    int x = 0;
#pragma omp parallel
#pragma omp atomic write
    x = omp_get_num_threads(); /* the runtime is in use before the call */
    if (strcmp(what, "openacc") == 0)
        x = acc_get_num_devices(0);
    else if (strcmp(what, "fortran") == 0)
        x = omp_get_thread_num_();
    else
        return 2;
    printf("ran %d\n", x); /* never reached under lockstep */
    return 0;
}
