/* Which process an object was made in, as fork(2) sees it. A child gets one thread
 * (the one that forked) and a copy of the parent's memory: a pool's workers and a
 * communicator's rank stay behind in the parent. Objects that own threads or a rank
 * record ls_fork_gen() when they are made and compare it on every call; the child
 * handler below bumps it, so a copy in a child sees a different number. */
#include <pthread.h>

#include "../internal.h"

unsigned ls_fork_generation;

static void in_child(void)
{
    /* the child has one thread, so nothing reads this concurrently */
    ls_store_relaxed(&ls_fork_generation, ls_load_relaxed(&ls_fork_generation) + 1u);
}

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int watch_rc;

static void watch(void)
{
    watch_rc = pthread_atfork(NULL, NULL, in_child);
}

int ls_fork_watch(void)
{
    pthread_once(&once, watch);
    return -watch_rc;
}
