// The public headers compile as C++ and link from C++.
#include "lockstep/lockstep.h"
#include <cstring>

int main()
{
    lockstep_pool_params_t p = lockstep_pool_params_default();
    p.n_threads = 2;
    lockstep_pool_t *pool = lockstep_pool_create(&p);
    if (!pool)
        return 1;
    int rc = lockstep_pool_size(pool) == 2 ? 0 : 1;
    lockstep_pool_free(pool);
    static_assert(sizeof(lockstep_barrier_t) == 3 * LOCKSTEP_CACHELINE, "barrier header is three lines");
    return rc || std::strcmp(lockstep_version(), LOCKSTEP_VERSION_STRING) != 0;
}
