/* Task dependences between sibling tasks: depend clauses (in, out, inout,
 * mutexinoutset, depobj), taskwait depend, and the depend clauses of target constructs.
 *
 * A parent task lists its live children that have depend clauses. A new child with
 * depend clauses becomes a successor of every listed sibling it conflicts with (same
 * address, and one of the two writes it: out, inout or mutexinoutset, the last treated
 * as inout, which keeps its mutual exclusion); its count of predecessors says how many
 * must complete first. It is queued once the count is 0: at creation, or by the
 * predecessor that completes last. A construct that only waits (taskwait depend, an
 * undeferred task, a target construct) links a waiter of its own on its stack and
 * runs its parent's children until the waiter's count is 0.
 *
 * Everything above happens under the parent's dep_lock: linking, unlinking at
 * completion, and the counts. A team of one (or none) queues nothing: there a
 * construct with depend clauses waits for every earlier sibling instead. */
#include <stdlib.h>

#include "omp_impl.h"

/* gcc's depend kinds (include/gomp-constants.h), as a depobj holds them */
enum { DEP_IN = 1, DEP_OUT = 2, DEP_INOUT = 3, DEP_MUTEXINOUTSET = 4 };

/* The clause list's entries into deps (count them when deps is NULL). The list is
 * {n, n_out, addresses...} or {0, n, n_out, n_mutexinoutset, n_in, addresses...,
 * depobjs...}, the addresses grouped by kind in that order. */
uint32_t ls_omp_deps_parse(void **depend, struct ls_omp_dep *deps)
{
    uintptr_t n = (uintptr_t)depend[0];
    if (n) {
        uintptr_t nout = (uintptr_t)depend[1];
        for (uintptr_t i = 0; deps && i < n; i++)
            deps[i] = (struct ls_omp_dep){(uintptr_t)depend[2 + i], i < nout};
        return (uint32_t)n;
    }
    n = (uintptr_t)depend[1];
    uintptr_t writers = (uintptr_t)depend[2] + (uintptr_t)depend[3];
    uintptr_t plain = writers + (uintptr_t)depend[4];
    for (uintptr_t i = 0; deps && i < n; i++) {
        if (i < plain) {
            deps[i] = (struct ls_omp_dep){(uintptr_t)depend[5 + i], i < writers};
        } else { /* a depobj: {address, kind} */
            void **obj = depend[5 + i];
            deps[i] = (struct ls_omp_dep){(uintptr_t)obj[0], (uintptr_t)obj[1] != DEP_IN};
        }
    }
    return (uint32_t)n;
}

static bool conflict(const struct ls_omp_depnode *a, const struct ls_omp_depnode *b)
{
    for (uint32_t i = 0; i < a->ndeps; i++)
        for (uint32_t j = 0; j < b->ndeps; j++)
            if (a->deps[i].addr == b->deps[j].addr && (a->deps[i].out || b->deps[j].out))
                return true;
    return false;
}

/* the parent's list and its children's counts */
static void lock(struct ls_omp_task *parent)
{
    ls_omp_spin_lock(&parent->dep_lock);
}

static void unlock(struct ls_omp_task *parent)
{
    ls_omp_spin_unlock(&parent->dep_lock);
}

static bool add_successor(struct ls_omp_depnode *s, struct ls_omp_task *x)
{
    if (s->nsucc == s->succ_cap) {
        uint32_t cap = s->succ_cap ? 2 * s->succ_cap : 4;
        void *p = realloc(s->succ, cap * sizeof *s->succ);
        if (!p)
            return false;
        s->succ = p;
        s->succ_cap = cap;
    }
    s->succ[s->nsucc++] = x;
    return true;
}

uint32_t ls_omp_deps_link(struct ls_omp_task *parent, struct ls_omp_task *x, bool listed)
{
    lock(parent);
    uint32_t n = 0;
    for (struct ls_omp_task *s = parent->dep_list; s; s = s->dn->next) {
        if (!conflict(s->dn, x->dn))
            continue;
        if (!add_successor(s->dn, x)) {
            unlock(parent);
            ls_omp_warn("out of memory for a task's dependences");
            abort();
        }
        n++;
    }
    ls_store_relaxed(&x->dn->npred, n);
    if (listed) {
        x->dn->next = parent->dep_list;
        parent->dep_list = x;
    }
    unlock(parent);
    return n;
}

uint32_t ls_omp_deps_done(struct ls_omp_task *task)
{
    struct ls_omp_task *parent = task->parent;
    struct ls_omp_depnode *s = task->dn;
    lock(parent);
    struct ls_omp_task **pp = &parent->dep_list;
    while (*pp && *pp != task)
        pp = &(*pp)->dn->next;
    if (*pp)
        *pp = s->next;
    /* the successors whose last predecessor this was, to the front; once task is off
     * the list no one else adds to or reads its successors */
    uint32_t nready = 0;
    for (uint32_t i = 0; i < s->nsucc; i++) {
        struct ls_omp_task *x = s->succ[i];
        bool waiter = x->dn->waiter; /* read first: a waiter's frame ends once its count is 0 */
        if (ls_fetch_add(&x->dn->npred, (uint32_t)-1, __ATOMIC_RELEASE) == 1u && !waiter)
            s->succ[nready++] = x;
    }
    unlock(parent);
    return nready;
}

void ls_omp_deps_clear(struct ls_omp_task *task)
{
    struct ls_omp_depnode *s = task->dn;
    free(s->succ);
    s->succ = NULL;
    s->nsucc = s->succ_cap = 0;
}
