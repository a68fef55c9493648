/* Every libgomp entry point this runtime does not implement (offloading, teams,
 * doacross loops, task reductions, OpenACC, Fortran bindings, ...) exists, so that a
 * program never reaches the real libgomp for part of its work: calling one prints
 * its name and exits non-zero. The list is unsupported.def; the symbol versions are
 * libgomp.map's. */
#include <stdio.h>
#include <stdlib.h>

#include "omp_impl.h"

void ls_omp_unsupported(const char *name)
{
    fprintf(stderr, "lockstep-omp: %s is not supported\n", name);
    fflush(stderr);
    _Exit(3);
}

#define LS_UNSUPPORTED(name)                                                                 \
    LS_OMP_EXPORT void name(void);                                                              \
    LS_OMP_EXPORT void name(void) { ls_omp_unsupported(#name); }
/* the Fortran lock functions have an OpenMP 2.5 version beside the default one */
#define LS_UNSUPPORTED_TWICE(name)                                                           \
    LS_OMP_EXPORT void ls_##name##30(void);                                                     \
    LS_OMP_EXPORT void ls_##name##30(void) { ls_omp_unsupported(#name); }                       \
    LS_OMP_EXPORT void ls_##name##25(void);                                                     \
    LS_OMP_EXPORT void ls_##name##25(void) { ls_omp_unsupported(#name); }                       \
    __asm__(".symver ls_" #name "30," #name "@@OMP_3.0");                                       \
    __asm__(".symver ls_" #name "25," #name "@OMP_1.0");
#include "unsupported.def"
#undef LS_UNSUPPORTED
#undef LS_UNSUPPORTED_TWICE

/* The same names for `lockstep omp check`: NUL-separated, ending with an empty name. */
#define LS_UNSUPPORTED(name) #name "\0"
#define LS_UNSUPPORTED_TWICE(name) #name "\0"
static const char unsupported_names[] =
#include "unsupported.def"
    "";

LS_OMP_EXPORT const char *lockstep_omp_unsupported_names(void);
LS_OMP_EXPORT const char *lockstep_omp_unsupported_names(void)
{
    return unsupported_names;
}
