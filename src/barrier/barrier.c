/* Barrier objects: sizing, initialisation, argument checks and dispatch to the
 * algorithm files (central.c, flat.c, tree.c, dissem.c). */
#include <errno.h>
#include <string.h>
#include <strings.h>

#include "barrier_impl.h"

static const char *const kind_names[] = {"auto", "central", "flat", "tree", "dissem", "counter"};

const char *lockstep_barrier_kind_name(lockstep_barrier_kind_t kind)
{
    if ((unsigned)kind >= sizeof kind_names / sizeof kind_names[0])
        return NULL;
    return kind_names[kind];
}

int lockstep_barrier_kind_parse(const char *name)
{
    if (!name)
        return -EINVAL;
    for (unsigned i = 0; i < sizeof kind_names / sizeof kind_names[0]; i++)
        if (strcasecmp(name, kind_names[i]) == 0)
            return (int)i;
    return -EINVAL;
}

lockstep_barrier_params_t lockstep_barrier_params_default(void)
{
    lockstep_barrier_params_t p;
    memset(&p, 0, sizeof p);
    p.kind = LOCKSTEP_BARRIER_AUTO;
    p.fanin = LOCKSTEP_BARRIER_DEFAULT_FANIN;
    p.wait_policy = LOCKSTEP_WAIT_DEFAULT;
    return p;
}

static lockstep_barrier_kind_t resolve_auto(unsigned n, int need_gather)
{
    /* Chosen with `lockstep bench threads` (figures: docs/performance.md):
     * - participants outnumber CPUs: CENTRAL. One futex wake on a word that changes
     *   once per episode releases everybody; COUNTER's word changes on every arrival,
     *   so parked waiters keep re-parking, and a tree or dissemination wakes in rounds
     *   that each need a time slice;
     * - up to 8 that fit: COUNTER. The last arrival is the release; dissemination
     *   loses between graph nodes, where arrivals are staggered and the last arriver
     *   must also fetch its own flag;
     * - beyond 8, one counter line becomes the bottleneck: dissemination for full
     *   barriers, the combining tree where a primary must gather. */
    if (n > (unsigned)lockstep_cpus_available())
        return LOCKSTEP_BARRIER_CENTRAL;
    if (n <= 8)
        return LOCKSTEP_BARRIER_COUNTER;
    return need_gather ? LOCKSTEP_BARRIER_TREE : LOCKSTEP_BARRIER_DISSEM;
}

static int valid_args(lockstep_barrier_kind_t kind, unsigned n, unsigned *fanin)
{
    if (n == 0 || n > LOCKSTEP_BARRIER_MAX_PARTICIPANTS)
        return 0;
    if ((unsigned)kind > LOCKSTEP_BARRIER_COUNTER)
        return 0;
    if (*fanin == 0)
        *fanin = LOCKSTEP_BARRIER_DEFAULT_FANIN;
    return *fanin >= 2 && *fanin <= 64;
}

/* Layout for a resolved kind: fills the offsets in cfg (b may be a scratch struct). */
static size_t layout(lockstep_barrier_kind_t kind, unsigned n, unsigned fanin,
                     lockstep_barrier_t *cfg)
{
    unsigned rounds = kind == LOCKSTEP_BARRIER_DISSEM ? ls_dissem_rounds(n) : 0;
    size_t stride = (size_t)LOCKSTEP_CACHELINE * (1 + rounds);
    size_t off_slots = sizeof(lockstep_barrier_t);
    size_t off_nodes = off_slots + stride * n;
    uint32_t nnodes = kind == LOCKSTEP_BARRIER_TREE ? ls_tree_build(NULL, n, fanin) : 0;
    size_t total = off_nodes + (size_t)nnodes * LOCKSTEP_CACHELINE;
    if (cfg) {
        cfg->cfg.rounds = rounds;
        cfg->cfg.slot_stride = (uint32_t)stride;
        cfg->cfg.off_slots = (uint32_t)off_slots;
        cfg->cfg.off_nodes = (uint32_t)off_nodes;
        cfg->cfg.nnodes = nnodes;
    }
    return total;
}

size_t lockstep_barrier_size(lockstep_barrier_kind_t kind, unsigned n, unsigned fanin)
{
    if (!valid_args(kind, n, &fanin))
        return 0;
    if (kind != LOCKSTEP_BARRIER_AUTO)
        return layout(kind, n, fanin, NULL);
    /* AUTO: the largest of what it may resolve to (CENTRAL is never the largest) */
    size_t t = layout(LOCKSTEP_BARRIER_TREE, n, fanin, NULL);
    size_t d = layout(LOCKSTEP_BARRIER_DISSEM, n, fanin, NULL);
    return t > d ? t : d;
}

int ls_barrier_init_among(lockstep_barrier_t *b, size_t size, unsigned n,
                          const lockstep_barrier_params_t *params, unsigned others)
{
    lockstep_barrier_params_t p = params ? *params : lockstep_barrier_params_default();
    if (!b || ((uintptr_t)b & 7u) != 0 || !valid_args(p.kind, n, &p.fanin))
        return -EINVAL;
    lockstep_barrier_kind_t kind = p.kind == LOCKSTEP_BARRIER_AUTO ? resolve_auto(n, p.need_gather) : p.kind;
    lockstep_barrier_t hdr;
    memset(&hdr, 0, sizeof hdr);
    size_t need = layout(kind, n, p.fanin, &hdr);
    if (size < need)
        return -ENOSPC;
    int rc = lockstep_wait_init(&hdr.cfg.wait, p.wait_policy, n + others, p.process_shared);
    if (rc)
        return rc;
    memset(b, 0, need);
    hdr.cfg.kind = kind;
    hdr.cfg.n = n;
    hdr.cfg.fanin = p.fanin;
    memcpy(&b->cfg, &hdr.cfg, sizeof hdr.cfg);
    if (kind == LOCKSTEP_BARRIER_TREE)
        ls_tree_build(b, n, p.fanin);
    /* publish the initialised object to whoever receives b after this (a thread
     * started later, or a process mapping the same memory) */
    __atomic_store_n(&b->cfg.magic, LS_BARRIER_MAGIC, __ATOMIC_RELEASE);
    return 0;
}

int lockstep_barrier_init(lockstep_barrier_t *b, size_t size, unsigned n,
                          const lockstep_barrier_params_t *params)
{
    return ls_barrier_init_among(b, size, n, params, 0);
}

void lockstep_barrier_destroy(lockstep_barrier_t *b)
{
    if (b)
        __atomic_store_n(&b->cfg.magic, 0u, __ATOMIC_RELAXED);
}

static inline int check(const lockstep_barrier_t *b, unsigned tid)
{
    return LS_LIKELY(b && ls_load_relaxed(&b->cfg.magic) == LS_BARRIER_MAGIC && tid < b->cfg.n);
}

int lockstep_barrier_arrive(lockstep_barrier_t *b, unsigned tid)
{
    if (!check(b, tid))
        return -EINVAL;
    if (b->cfg.n == 1) { /* alone: the episode is complete on arrival */
        ls_slot(b, 0)->ep++;
        return 0;
    }
    switch (b->cfg.kind) {
    case LOCKSTEP_BARRIER_CENTRAL: ls_central_arrive(b, tid); break;
    case LOCKSTEP_BARRIER_COUNTER: ls_counter_arrive(b, tid); break;
    case LOCKSTEP_BARRIER_FLAT: ls_flat_arrive(b, tid); break;
    case LOCKSTEP_BARRIER_TREE: ls_tree_arrive(b, tid); break;
    case LOCKSTEP_BARRIER_DISSEM: ls_dissem_arrive(b, tid); break;
    default: return -EINVAL;
    }
    return 0;
}

int lockstep_barrier_wait_until(lockstep_barrier_t *b, unsigned tid, uint64_t deadline_ns)
{
    if (!check(b, tid))
        return -EINVAL;
    if (b->cfg.n == 1)
        return 0;
    switch (b->cfg.kind) {
    case LOCKSTEP_BARRIER_CENTRAL: return ls_central_wait(b, tid, deadline_ns);
    case LOCKSTEP_BARRIER_COUNTER: return ls_counter_wait(b, tid, deadline_ns);
    case LOCKSTEP_BARRIER_FLAT: return ls_flat_wait(b, tid, deadline_ns);
    case LOCKSTEP_BARRIER_TREE: return ls_tree_wait(b, tid, deadline_ns);
    case LOCKSTEP_BARRIER_DISSEM: return ls_dissem_wait(b, tid, deadline_ns);
    default: return -EINVAL;
    }
}

int lockstep_barrier_wait(lockstep_barrier_t *b, unsigned tid)
{
    return lockstep_barrier_wait_until(b, tid, 0);
}

int lockstep_barrier_arrive_and_wait(lockstep_barrier_t *b, unsigned tid)
{
    int rc = lockstep_barrier_arrive(b, tid);
    return rc ? rc : lockstep_barrier_wait(b, tid);
}

int lockstep_barrier_gather(lockstep_barrier_t *b, uint64_t deadline_ns)
{
    if (!check(b, 0))
        return -EINVAL;
    if (b->cfg.n == 1 && b->cfg.kind != LOCKSTEP_BARRIER_DISSEM)
        return 0; /* nobody else to wait for */
    switch (b->cfg.kind) {
    case LOCKSTEP_BARRIER_CENTRAL: return ls_central_gather(b, deadline_ns);
    case LOCKSTEP_BARRIER_COUNTER: return ls_counter_gather(b, deadline_ns);
    case LOCKSTEP_BARRIER_FLAT: return ls_flat_gather(b, deadline_ns);
    case LOCKSTEP_BARRIER_TREE: return ls_tree_gather(b, deadline_ns);
    case LOCKSTEP_BARRIER_DISSEM: return -ENOTSUP;
    default: return -EINVAL;
    }
}

int lockstep_barrier_kind(const lockstep_barrier_t *b)
{
    if (!check(b, 0))
        return -EINVAL;
    return (int)b->cfg.kind;
}
