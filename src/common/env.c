/* The library's environment switches (LOCKSTEP_NO_SPREAD, LOCKSTEP_NO_MEMBARRIER, ...). */
#include <stdlib.h>
#include <string.h>

#include "../internal.h"

int ls_env_set(const char *name)
{
    const char *v = getenv(name);
    return v && *v && strcmp(v, "0") != 0;
}
