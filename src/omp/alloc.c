/* Memory allocators: the predefined ones, omp_init_allocator's, and the allocate
 * directive's and clause's entry points.
 *
 * There is one memory space here, the heap: every memory space allocates from it,
 * except that pinned memory and high-bandwidth memory cannot be had, so an allocator
 * asking for them is omp_null_allocator (the spec's answer for traits that cannot be
 * met). A block starts with a header: the malloc'd base, the bytes charged to the
 * allocator's pool, the allocator, and the caller's size (omp_realloc copies that).
 *
 * A request that fails (size overflow, the pool full, malloc failing) follows the
 * allocator's fallback trait: default_mem_fb retries with omp_default_mem_alloc,
 * null_fb answers NULL, abort_fb ends the program, allocator_fb retries with fb_data.
 * Predefined allocators answer NULL. For the allocate directive and clause (GOMP_alloc)
 * NULL is not an answer: there, null_fb acts as abort_fb. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "omp_impl.h"

/* omp.h's numbers (the ABI) */
enum { MS_DEFAULT = 0, MS_LARGE_CAP, MS_CONST, MS_HIGH_BW, MS_LOW_LAT };
enum { A_NULL = 0, A_DEFAULT = 1, A_LAST_PREDEFINED = 8 /* omp_thread_mem_alloc */ };
enum { K_SYNC_HINT = 1, K_ALIGNMENT, K_ACCESS, K_POOL_SIZE, K_FALLBACK, K_FB_DATA, K_PINNED,
       K_PARTITION };
#define V_DEFAULT ((uintptr_t)-1)
enum { V_FALSE = 0, V_TRUE = 1, V_CONTENDED = 3, V_UNCONTENDED, V_SERIALIZED, V_PRIVATE, V_ALL,
       V_THREAD, V_PTEAM, V_CGROUP, V_DEFAULT_MEM_FB, V_NULL_FB, V_ABORT_FB, V_ALLOCATOR_FB,
       V_ENVIRONMENT, V_NEAREST, V_BLOCKED, V_INTERLEAVED };

struct trait {
    int key;
    uintptr_t value;
};

struct allocator {
    uintptr_t memspace;
    size_t alignment;       /* at least sizeof(void *) */
    uintptr_t pool_size;    /* UINTPTR_MAX: no pool */
    uintptr_t used;         /* bytes charged to the pool (atomic) */
    uintptr_t fallback;
    uintptr_t fb_data;
};

static bool recorded_as(void *ptr, bool forget);

struct header {
    void *base;
    size_t charged;
    uintptr_t allocator;
    size_t size;
};

/* hops through allocator_fb chains before a request gives up (a chain may loop) */
#define MAX_FALLBACKS 64

static bool one_of(uintptr_t v, const uintptr_t *set, int n)
{
    for (int i = 0; i < n; i++)
        if (v == set[i])
            return true;
    return false;
}

uintptr_t ls_omp_allocator_make(uintptr_t memspace, int ntraits, const void *traits_)
{
    static const uintptr_t hints[] = {V_CONTENDED, V_UNCONTENDED, V_SERIALIZED, V_PRIVATE};
    static const uintptr_t access[] = {V_ALL, V_CGROUP, V_PTEAM, V_THREAD};
    static const uintptr_t fbs[] = {V_DEFAULT_MEM_FB, V_NULL_FB, V_ABORT_FB, V_ALLOCATOR_FB};
    static const uintptr_t parts[] = {V_ENVIRONMENT, V_NEAREST, V_BLOCKED, V_INTERLEAVED};
    const struct trait *traits = traits_;
    struct allocator d = {memspace, sizeof(void *), UINTPTR_MAX, 0, V_DEFAULT_MEM_FB, A_NULL};
    if (memspace > MS_LOW_LAT || ntraits < 0 || (ntraits > 0 && !traits))
        return A_NULL;
    for (int i = 0; i < ntraits; i++) {
        uintptr_t v = traits[i].value;
        bool dflt = v == V_DEFAULT;
        switch (traits[i].key) {
        case K_SYNC_HINT:
            if (!dflt && !one_of(v, hints, 4))
                return A_NULL;
            break;
        case K_ALIGNMENT:
            if (!dflt && (v == 0 || (v & (v - 1))))
                return A_NULL;
            d.alignment = dflt || v < sizeof(void *) ? sizeof(void *) : v;
            break;
        case K_ACCESS:
            if (!dflt && !one_of(v, access, 4))
                return A_NULL;
            break;
        case K_POOL_SIZE:
            d.pool_size = dflt ? UINTPTR_MAX : v;
            break;
        case K_FALLBACK:
            if (!dflt && !one_of(v, fbs, 4))
                return A_NULL;
            d.fallback = dflt ? V_DEFAULT_MEM_FB : v;
            break;
        case K_FB_DATA:
            d.fb_data = v;
            break;
        case K_PINNED:
            if (v == V_TRUE)
                return A_NULL; /* pinned memory cannot be had here */
            if (!dflt && v != V_FALSE)
                return A_NULL;
            break;
        case K_PARTITION:
            if (!dflt && !one_of(v, parts, 4))
                return A_NULL;
            break;
        default:
            return A_NULL;
        }
    }
    if (memspace == MS_HIGH_BW)
        return A_NULL; /* no high-bandwidth memory here */
    struct allocator *a = malloc(sizeof *a);
    if (!a)
        return A_NULL;
    *a = d;
    return (uintptr_t)a;
}

static struct allocator *custom(uintptr_t a)
{
    return a > A_LAST_PREDEFINED ? (struct allocator *)a : NULL;
}

static bool pool_charge(struct allocator *d, size_t bytes)
{
    if (d->pool_size == UINTPTR_MAX)
        return true;
    uintptr_t used = ls_load_relaxed(&d->used), next;
    do {
        if (__builtin_add_overflow(used, bytes, &next) || next > d->pool_size)
            return false;
    } while (!__atomic_compare_exchange_n(&d->used, &used, next, true, __ATOMIC_RELAXED,
                                          __ATOMIC_RELAXED));
    return true;
}

static void pool_refund(struct allocator *d, size_t bytes)
{
    if (d && d->pool_size != UINTPTR_MAX)
        ls_fetch_add(&d->used, (uintptr_t)0 - bytes, __ATOMIC_RELAXED);
}

/* One try with one allocator; NULL when it cannot give the block. */
static void *try_alloc(size_t align, size_t size, uintptr_t a)
{
    struct allocator *d = custom(a);
    if (d && d->alignment > align)
        align = d->alignment;
    if (align < sizeof(void *))
        align = sizeof(void *);
    size_t total;
    if (__builtin_add_overflow(size, sizeof(struct header) + align, &total))
        return NULL;
    if (d && !pool_charge(d, total))
        return NULL;
    char *base = malloc(total);
    if (!base) {
        pool_refund(d, total);
        return NULL;
    }
    uintptr_t at = ((uintptr_t)base + sizeof(struct header) + align - 1) & ~(uintptr_t)(align - 1);
    struct header *h = (struct header *)at - 1;
    h->base = base;
    h->charged = total;
    h->allocator = a;
    h->size = size;
    return (void *)at;
}

static uintptr_t resolve(uintptr_t a)
{
    return a == A_NULL ? ls_omp_thr()->c.icv.def_allocator : a;
}

static void *alloc(size_t align, size_t size, uintptr_t a, bool directive)
{
    if (size == 0 || (align & (align - 1)))
        return NULL;
    for (int hop = 0; hop < MAX_FALLBACKS; hop++) {
        a = resolve(a);
        void *p = try_alloc(align, size, a);
        if (p)
            return p;
        struct allocator *d = custom(a);
        uintptr_t fb = d ? d->fallback : V_NULL_FB;
        if (fb == V_DEFAULT_MEM_FB && a != A_DEFAULT)
            a = A_DEFAULT;
        else if (fb == V_ALLOCATOR_FB)
            a = d->fb_data;
        else if (fb == V_ABORT_FB || directive)
            break;
        else
            return NULL;
    }
    fprintf(stderr, "\nlibgomp: Out of memory allocating %zu bytes\n", size);
    exit(EXIT_FAILURE);
}

LS_OMP_EXPORT void *omp_aligned_alloc(size_t align, size_t size, uintptr_t allocator)
{
    return alloc(align, size, allocator, false);
}

LS_OMP_EXPORT void *omp_alloc(size_t size, uintptr_t allocator)
{
    return alloc(1, size, allocator, false);
}

static void *alloc_zeroed(size_t align, size_t n, size_t size, uintptr_t allocator)
{
    size_t bytes;
    if (__builtin_mul_overflow(n, size, &bytes))
        bytes = SIZE_MAX; /* cannot be had: the allocator's fallback decides */
    void *p = alloc(align, bytes, allocator, false);
    if (p)
        memset(p, 0, bytes);
    return p;
}

LS_OMP_EXPORT void *omp_calloc(size_t n, size_t size, uintptr_t allocator)
{
    return alloc_zeroed(1, n, size, allocator);
}

LS_OMP_EXPORT void *omp_aligned_calloc(size_t align, size_t n, size_t size, uintptr_t allocator)
{
    return alloc_zeroed(align, n, size, allocator);
}

LS_OMP_EXPORT void omp_free(void *ptr, uintptr_t allocator)
{
    (void)allocator; /* the block knows its allocator */
    if (!ptr)
        return;
    recorded_as(ptr, true);
    struct header *h = (struct header *)ptr - 1;
    pool_refund(custom(h->allocator), h->charged);
    free(h->base);
}

/* Grow or shrink a block in place with its own allocator: the pool is charged only
 * the difference. NULL when the block stays as it was. */
static void *realloc_same(struct header *h, size_t size)
{
    struct allocator *d = custom(h->allocator);
    size_t align = d && d->alignment > sizeof(void *) ? d->alignment : sizeof(void *);
    size_t total;
    if (__builtin_add_overflow(size, sizeof(struct header) + align, &total))
        return NULL;
    size_t charged = h->charged, old_size = h->size;
    uintptr_t allocator = h->allocator; /* h is gone once realloc moves the block */
    if (d && total > charged && !pool_charge(d, total - charged))
        return NULL;
    size_t offset = (size_t)((char *)(h + 1) - (char *)h->base);
    char *base = realloc(h->base, total);
    if (!base) {
        if (total > charged)
            pool_refund(d, total - charged);
        return NULL;
    }
    if (total < charged)
        pool_refund(d, charged - total);
    uintptr_t at = ((uintptr_t)base + sizeof(struct header) + align - 1) & ~(uintptr_t)(align - 1);
    if ((char *)at != base + offset) /* realloc moved it to another alignment */
        memmove((void *)at, base + offset, old_size < size ? old_size : size);
    struct header *nh = (struct header *)at - 1;
    nh->base = base;
    nh->charged = total;
    nh->allocator = allocator;
    nh->size = size;
    return (void *)at;
}

/* In place when the allocator stays; else a new block from allocator (that of ptr when
 * null), the old contents copied, the old block freed. */
LS_OMP_EXPORT void *omp_realloc(void *ptr, size_t size, uintptr_t allocator,
                                uintptr_t free_allocator)
{
    if (!ptr)
        return alloc(1, size, allocator, false);
    if (size == 0) {
        omp_free(ptr, free_allocator);
        return NULL;
    }
    struct header *h = (struct header *)ptr - 1;
    uintptr_t to = allocator != A_NULL ? allocator : h->allocator;
    void *p;
    if (to == h->allocator && (p = realloc_same(h, size)) != NULL)
        return p;
    p = alloc(1, size, to, false);
    if (!p)
        return NULL; /* the old block stays, as realloc's does */
    memcpy(p, ptr, h->size < size ? h->size : size);
    omp_free(ptr, free_allocator);
    return p;
}

LS_OMP_EXPORT void *GOMP_alloc(size_t align, size_t size, uintptr_t allocator)
{
    return alloc(align, size, allocator, true);
}

LS_OMP_EXPORT void GOMP_free(void *ptr, uintptr_t allocator)
{
    omp_free(ptr, allocator);
}

LS_OMP_EXPORT uintptr_t omp_init_allocator(uintptr_t memspace, int ntraits, const void *traits)
{
    return ls_omp_allocator_make(memspace, ntraits, traits);
}

LS_OMP_EXPORT void omp_destroy_allocator(uintptr_t allocator)
{
    free(custom(allocator));
}

LS_OMP_EXPORT void omp_set_default_allocator(uintptr_t a)
{
    ls_omp_icv_write(ls_omp_thr())->def_allocator = a;
}

LS_OMP_EXPORT uintptr_t omp_get_default_allocator(void)
{
    return ls_omp_thr()->c.icv.def_allocator;
}

/* ---- OMP_ALLOCATOR ------------------------------------------------------------------------- */

static const char *const predefined[] = {
    NULL, "omp_default_mem_alloc", "omp_large_cap_mem_alloc", "omp_const_mem_alloc",
    "omp_high_bw_mem_alloc", "omp_low_lat_mem_alloc", "omp_cgroup_mem_alloc",
    "omp_pteam_mem_alloc", "omp_thread_mem_alloc"};
static const char *const spaces[] = {"omp_default_mem_space", "omp_large_cap_mem_space",
                                     "omp_const_mem_space", "omp_high_bw_mem_space",
                                     "omp_low_lat_mem_space"};
static const char *const keys[] = {NULL, "sync_hint", "alignment", "access", "pool_size",
                                   "fallback", NULL /* fb_data: not from the environment */,
                                   "pinned", "partition"};
static const struct {
    const char *name;
    uintptr_t value;
} values[] = {{"false", V_FALSE}, {"true", V_TRUE}, {"contended", V_CONTENDED},
              {"uncontended", V_UNCONTENDED}, {"serialized", V_SERIALIZED},
              {"private", V_PRIVATE}, {"all", V_ALL}, {"thread", V_THREAD}, {"pteam", V_PTEAM},
              {"cgroup", V_CGROUP}, {"default_mem_fb", V_DEFAULT_MEM_FB}, {"null_fb", V_NULL_FB},
              {"abort_fb", V_ABORT_FB}, {"allocator_fb", V_ALLOCATOR_FB},
              {"environment", V_ENVIRONMENT}, {"nearest", V_NEAREST}, {"blocked", V_BLOCKED},
              {"interleaved", V_INTERLEAVED}};

static size_t word_len(const char *s)
{
    size_t n = 0;
    while (s[n] && s[n] != ':' && s[n] != ',' && s[n] != '=' && s[n] != ' ')
        n++;
    return n;
}

static int find_name(const char *s, size_t n, const char *const *names, int count)
{
    for (int i = 0; i < count; i++)
        if (names[i] && strlen(names[i]) == n && strncasecmp(s, names[i], n) == 0)
            return i;
    return -1;
}

/* A predefined allocator's name or number, or a memory space's name with optional
 * ":key=value,..." traits (OpenMP 5.1's form). 0 with *out set, or -1. */
int ls_omp_allocator_parse(const char *s, uintptr_t *out)
{
    while (*s == ' ')
        s++;
    size_t n = word_len(s);
    int i = find_name(s, n, predefined, 9);
    char *end;
    if (i < 0 && n > 0 && s[0] >= '0' && s[0] <= '9') {
        unsigned long v = strtoul(s, &end, 10);
        if (end == s + n && v >= A_DEFAULT && v <= A_LAST_PREDEFINED)
            i = (int)v;
    }
    if (i > 0) {
        s += n;
        while (*s == ' ')
            s++;
        if (*s)
            return -1;
        *out = (uintptr_t)i;
        return 0;
    }
    int space = find_name(s, n, spaces, 5);
    if (space < 0)
        return -1;
    s += n;
    struct trait traits[16];
    int nt = 0;
    if (*s == ':') {
        do {
            s++;
            size_t kn = word_len(s);
            int key = find_name(s, kn, keys, 9);
            if (key < 0 || s[kn] != '=' || nt == 16)
                return -1;
            s += kn + 1;
            size_t vn = word_len(s);
            uintptr_t v = 0;
            int vi = -1;
            for (int k = 0; k < (int)(sizeof values / sizeof values[0]); k++)
                if (strlen(values[k].name) == vn && strncasecmp(s, values[k].name, vn) == 0)
                    vi = k;
            if (vi >= 0) {
                v = values[vi].value;
            } else {
                unsigned long long x = strtoull(s, &end, 10);
                if (vn == 0 || end != s + vn || s[0] == '-')
                    return -1;
                v = (uintptr_t)x;
            }
            traits[nt].key = key;
            traits[nt].value = v;
            nt++;
            s += vn;
        } while (*s == ',');
    }
    while (*s == ' ')
        s++;
    if (*s)
        return -1;
    uintptr_t a = ls_omp_allocator_make((uintptr_t)space, nt, traits);
    if (a == A_NULL)
        return -1;
    *out = a;
    return 0;
}

const char *ls_omp_allocator_name(uintptr_t a)
{
    return a >= A_DEFAULT && a <= A_LAST_PREDEFINED ? predefined[a] : "(a memory space)";
}

/* ---- gcc 14's record of GOMP_alloc'ed pointers (Fortran allocatables) ------------------- */

static pthread_mutex_t record_lock = PTHREAD_MUTEX_INITIALIZER;
static void **recorded;
static size_t n_recorded, recorded_cap;

LS_OMP_EXPORT void GOMP_add_alloc(void *ptr)
{
    if (!ptr)
        return;
    pthread_mutex_lock(&record_lock);
    if (n_recorded == recorded_cap) {
        size_t cap = recorded_cap ? 2 * recorded_cap : 16;
        void **p = realloc(recorded, cap * sizeof *p);
        if (p) {
            recorded = p;
            recorded_cap = cap;
        }
    }
    if (n_recorded < recorded_cap) {
        recorded[n_recorded] = ptr;
        ls_store_relaxed(&n_recorded, n_recorded + 1); /* read without the lock */
    }
    pthread_mutex_unlock(&record_lock);
}

/* Whether ptr is recorded (forget: and no longer, as it is being freed). */
static bool recorded_as(void *ptr, bool forget)
{
    if (ls_load_relaxed(&n_recorded) == 0)
        return false;
    bool found = false;
    pthread_mutex_lock(&record_lock);
    for (size_t i = 0; i < n_recorded && !found; i++)
        if (recorded[i] == ptr) {
            if (forget) {
                recorded[i] = recorded[n_recorded - 1];
                ls_store_relaxed(&n_recorded, n_recorded - 1);
            }
            found = true;
        }
    pthread_mutex_unlock(&record_lock);
    return found;
}

LS_OMP_EXPORT bool GOMP_is_alloc(void *ptr)
{
    return recorded_as(ptr, false);
}
