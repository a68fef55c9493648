/* A program built against the installed lockstep: one region on two threads. */
#include <lockstep/lockstep.h>

static void mark(void *p, int ith, int nth)
{
    (void)nth;
    __atomic_fetch_add((int *)p, 1 << (ith * 4), __ATOMIC_RELAXED);
}

int main(void)
{
    lockstep_pool_params_t p = lockstep_pool_params_default();
    p.n_threads = 2;
    lockstep_pool_t *pool = lockstep_pool_create(&p);
    if (!pool)
        return 1;
    int seen = 0;
    int rc = lockstep_pool_run(pool, mark, &seen);
    lockstep_pool_free(pool);
    return rc != 0 || seen != 0x11;
}
