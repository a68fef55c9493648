/* The runtime's state that every part reads: the settings read at load (ls_omp_g),
 * the statistics, each thread's own state (ls_omp_self), and the warning line. The
 * bottom of src/omp: it calls nothing of the runtime's. */
#include <stdarg.h>
#include <stdio.h>

#include "omp_impl.h"

struct ls_omp_global ls_omp_g;
struct ls_omp_stats ls_omp_stats;
int ls_omp_used;
__thread struct ls_omp_thread ls_omp_self __attribute__((tls_model("initial-exec")));

void ls_omp_warn(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("lockstep-omp: warning: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}
