/* Reduction kernels: out = in[0] op in[1] op ... op in[n-1], element-wise, always in
 * that order, so every rank that reduces the same inputs gets the same bits.
 *
 * f32 and i32 are combined in place in the output, one input at a time; f16 and bf16
 * are widened blockwise into an f32 accumulator, combined there, and rounded once to
 * nearest-even. MAX and MIN keep the accumulator when either side is NaN, exactly as
 * the vector max/min instructions do, so vector bodies and scalar tails agree.
 *
 * ISA dispatch: the f32/i32 loops are plain C that vectorises without -ffast-math
 * (no reduction across elements), compiled three times (AVX-512, AVX2, baseline) and
 * picked once per process by __builtin_cpu_supports; so are bf16's conversions. f16's
 * use F16C when available, else an exact scalar path. LOCKSTEP_ISA caps the choice
 * (avx512, avx2 or base), so that every set can be tested on one machine.
 *
 * Left out on purpose:
 *   - f16 on 512-bit vectors (vcvtph2ps zmm): CPUs that split them into two 256-bit
 *     halves (AMD Zen 4) run them no faster than F16C's;
 *   - AVX512-BF16's vcvtneps2bf16 for bf16's rounding: it flushes denormal inputs and
 *     results to zero, so its bits would differ from the other sets' (and between ranks
 *     whose LOCKSTEP_ISA differs). */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

#include "comm_impl.h"
#include "../common/half.h"

/* out may be one of the inputs (the large allreduce reduces its own part straight from
 * the caller's buffer, which is also the output when the call is in place); any other
 * overlap between out and an input is not allowed. */

/* The ops on one element, a the accumulator: MAX and MIN keep a on ties and when
 * either side is NaN, as the vector max/min instructions do; i32 SUM wraps around.
 * Shared by the kernels and ls_reduce_few, so both give the same bits. */
#define LS_OP_SUM(a, b) ((a) + (b))
#define LS_OP_SUM_I32(a, b) ((int32_t)((uint32_t)(a) + (uint32_t)(b)))
#define LS_OP_MAX(a, b) ((b) > (a) ? (b) : (a))
#define LS_OP_MIN(a, b) ((b) < (a) ? (b) : (a))

/* ---- f32 / i32 combine: out = a op b --------------------------------------------- */

/* One body, compiled once per ISA by the target attribute; the loops vectorise
 * because each element is independent (no reduction across i, so no -ffast-math).
 * a is the accumulator (MAX/MIN keep it when either side is NaN). out may be a or b
 * itself (never a partial overlap): each element is read before it is written, so
 * the compiler may drop its overlap check (GCC ivdep, clang assume_safety), which
 * would otherwise send exact aliasing to the scalar loop. */
#if defined(__clang__)
#define LS_NO_OVERLAP_CHECK _Pragma("clang loop vectorize(assume_safety)")
#else
#define LS_NO_OVERLAP_CHECK _Pragma("GCC ivdep")
#endif
#define LS_COMBINE_LOOP(expr)                                                                    \
    LS_NO_OVERLAP_CHECK for (size_t i = 0; i < n; i++) out[i] = (expr)
#define LS_COMBINE_BODIES(suffix, attr)                                                          \
    attr static void f32_combine_##suffix(float *out, const float *a, const float *b, size_t n,  \
                                          lockstep_op_t op)                                      \
    {                                                                                            \
        if (op == LOCKSTEP_OP_SUM)                                                                  \
            LS_COMBINE_LOOP(LS_OP_SUM(a[i], b[i]));                                              \
        else if (op == LOCKSTEP_OP_MAX)                                                             \
            LS_COMBINE_LOOP(LS_OP_MAX(a[i], b[i]));                                              \
        else                                                                                     \
            LS_COMBINE_LOOP(LS_OP_MIN(a[i], b[i]));                                              \
    }                                                                                            \
    attr static void i32_combine_##suffix(int32_t *out, const int32_t *a, const int32_t *b,      \
                                          size_t n, lockstep_op_t op)                            \
    {                                                                                            \
        if (op == LOCKSTEP_OP_SUM) /* wrap-around, as the hardware does; no UB */                   \
            LS_COMBINE_LOOP(LS_OP_SUM_I32(a[i], b[i]));                                          \
        else if (op == LOCKSTEP_OP_MAX)                                                             \
            LS_COMBINE_LOOP(LS_OP_MAX(a[i], b[i]));                                              \
        else                                                                                     \
            LS_COMBINE_LOOP(LS_OP_MIN(a[i], b[i]));                                              \
    }

LS_COMBINE_BODIES(base, )
#if defined(__x86_64__)
LS_COMBINE_BODIES(avx2, __attribute__((target("avx2"))))
LS_COMBINE_BODIES(avx512, __attribute__((target("avx512f"))))
#endif

/* ---- half precision: f16 and bf16, accumulated in f32 ------------------------------ */

/* A block of halves is reduced in an f32 accumulator and rounded once, in rank order:
 * the first two inputs are widened and combined into it (first), each further one is
 * combined into it as it is widened (accumulate), and the last one is combined and
 * the result rounded straight into out (last); with two inputs there is no
 * accumulator at all (pair). Loops without calls, so that bf16's vectorise like the
 * combines; f16 uses F16C where the CPU has it. Both beat converting one element per
 * call, or widening every input into a second buffer first. out may be any input:
 * every input of an element is read before it is written. */
struct half_kernels {
    void (*first)(float *acc, const uint16_t *x, const uint16_t *y, size_t n, lockstep_op_t op);
    void (*accumulate)(float *acc, const uint16_t *x, size_t n, lockstep_op_t op);
    void (*last)(uint16_t *out, const float *acc, const uint16_t *x, size_t n, lockstep_op_t op);
    void (*pair)(uint16_t *out, const uint16_t *x, const uint16_t *y, size_t n, lockstep_op_t op);
};

/* vec: LS_NO_OVERLAP_CHECK where the loop vectorises (clang fails the build where it
 * was asked to and cannot), else nothing */
#define LS_HALF_TO_ACC(narrow1, vec, expr)                                                       \
    for (size_t i = 0; i < n; i++)                                                               \
    acc[i] = (expr)
#define LS_HALF_TO_OUT(narrow1, vec, expr)                                                       \
    vec for (size_t i = 0; i < n; i++) out[i] = narrow1(expr)
#define LS_HALF_BY_OP(to, narrow1, vec, a, b)                                                    \
    do {                                                                                         \
        if (op == LOCKSTEP_OP_SUM)                                                                  \
            to(narrow1, vec, LS_OP_SUM(a, b));                                                   \
        else if (op == LOCKSTEP_OP_MAX)                                                             \
            to(narrow1, vec, LS_OP_MAX(a, b));                                                   \
        else                                                                                     \
            to(narrow1, vec, LS_OP_MIN(a, b));                                                   \
    } while (0)
#define LS_HALF_BODIES(name, attr, widen1, narrow1, vec)                                         \
    attr static void name##_first(float *acc, const uint16_t *x, const uint16_t *y, size_t n,    \
                                  lockstep_op_t op)                                              \
    {                                                                                            \
        LS_HALF_BY_OP(LS_HALF_TO_ACC, narrow1, vec, widen1(x[i]), widen1(y[i]));                 \
    }                                                                                            \
    attr static void name##_accumulate(float *acc, const uint16_t *x, size_t n, lockstep_op_t op) \
    {                                                                                            \
        LS_HALF_BY_OP(LS_HALF_TO_ACC, narrow1, vec, acc[i], widen1(x[i]));                       \
    }                                                                                            \
    attr static void name##_last(uint16_t *out, const float *acc, const uint16_t *x, size_t n,   \
                                 lockstep_op_t op)                                               \
    {                                                                                            \
        LS_HALF_BY_OP(LS_HALF_TO_OUT, narrow1, vec, acc[i], widen1(x[i]));                       \
    }                                                                                            \
    attr static void name##_pair(uint16_t *out, const uint16_t *x, const uint16_t *y, size_t n,  \
                                 lockstep_op_t op)                                               \
    {                                                                                            \
        LS_HALF_BY_OP(LS_HALF_TO_OUT, narrow1, vec, widen1(x[i]), widen1(y[i]));                 \
    }

LS_HALF_BODIES(f16_base, , f16_widen1, f16_narrow1, )
LS_HALF_BODIES(bf16_base, , bf16_widen1, bf16_narrow1, LS_NO_OVERLAP_CHECK)
#if defined(__x86_64__)
LS_HALF_BODIES(bf16_avx2, __attribute__((target("avx2"))), bf16_widen1, bf16_narrow1, LS_NO_OVERLAP_CHECK)
/* BW and VL: 16-bit lanes and EVEX on 256-bit vectors (a narrowing move instead of
 * pack and permute), faster than avx512f alone for the bf16 pair */
#define LS_AVX512BW __attribute__((target("avx512f,avx512bw,avx512vl")))
LS_HALF_BODIES(bf16_avx512, LS_AVX512BW, bf16_widen1, bf16_narrow1, LS_NO_OVERLAP_CHECK)

/* f16 with F16C, 8 elements at a time; the tails go to the scalar bodies */
#define LS_F16C __attribute__((target("avx2,f16c")))
LS_F16C static inline __m256 f16c_load(const uint16_t *x)
{
    return _mm256_cvtph_ps(_mm_loadu_si128((const void *)x));
}

LS_F16C static inline void f16c_store(uint16_t *out, __m256 v)
{
    _mm_storeu_si128((void *)out, _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
}

/* a op v; max_ps and min_ps return their second operand on ties and when either is
 * NaN, so with a second they are LS_OP_MAX and LS_OP_MIN */
LS_F16C static inline __m256 f16c_op(__m256 a, __m256 v, lockstep_op_t op)
{
    return op == LOCKSTEP_OP_SUM ? _mm256_add_ps(a, v) : op == LOCKSTEP_OP_MAX ? _mm256_max_ps(v, a) : _mm256_min_ps(v, a);
}

LS_F16C static void f16_f16c_first(float *acc, const uint16_t *x, const uint16_t *y, size_t n, lockstep_op_t op)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(acc + i, f16c_op(f16c_load(x + i), f16c_load(y + i), op));
    f16_base_first(acc + i, x + i, y + i, n - i, op);
}

LS_F16C static void f16_f16c_accumulate(float *acc, const uint16_t *x, size_t n, lockstep_op_t op)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(acc + i, f16c_op(_mm256_loadu_ps(acc + i), f16c_load(x + i), op));
    f16_base_accumulate(acc + i, x + i, n - i, op);
}

LS_F16C static void f16_f16c_last(uint16_t *out, const float *acc, const uint16_t *x, size_t n, lockstep_op_t op)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        f16c_store(out + i, f16c_op(_mm256_loadu_ps(acc + i), f16c_load(x + i), op));
    f16_base_last(out + i, acc + i, x + i, n - i, op);
}

LS_F16C static void f16_f16c_pair(uint16_t *out, const uint16_t *x, const uint16_t *y, size_t n, lockstep_op_t op)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        f16c_store(out + i, f16c_op(f16c_load(x + i), f16c_load(y + i), op));
    f16_base_pair(out + i, x + i, y + i, n - i, op);
}
#endif

/* ---- dispatch ------------------------------------------------------------------------ */

typedef void (*f32_combine_fn)(float *, const float *, const float *, size_t, lockstep_op_t);
typedef void (*i32_combine_fn)(int32_t *, const int32_t *, const int32_t *, size_t, lockstep_op_t);

struct kernels {
    f32_combine_fn f32;
    i32_combine_fn i32;
    struct half_kernels f16, bf16;
};

#define LS_HALF_KERNELS(name) {name##_first, name##_accumulate, name##_last, name##_pair}

/* The widest kernels LOCKSTEP_ISA allows: ISA_AVX512 when it is unset or empty, -1
 * (and *bad = the value) for anything but the three names, in any case. */
enum { ISA_BASE, ISA_AVX2, ISA_AVX512 };
static const char *const isa_names[] = {"base", "avx2", "avx512"}; /* lockstep_isa_t */
_Static_assert(LOCKSTEP_ISA_BASE == 0 && LOCKSTEP_ISA_AVX2 == 1 && LOCKSTEP_ISA_AVX512 == 2, "isa_names");

int ls_isa_cap(const char **bad)
{
    const char *s = getenv("LOCKSTEP_ISA");
    if (!s || !*s)
        return ISA_AVX512;
    for (int i = ISA_BASE; i <= ISA_AVX512; i++)
        if (strcasecmp(s, isa_names[i]) == 0)
            return i;
    if (bad)
        *bad = s;
    return -1;
}

/* Chosen once per process from what this CPU supports, up to LOCKSTEP_ISA's cap. A
 * cap it does not know chooses nothing and the call refuses; the next call looks at
 * the variable again, so a process that fixes it can go on (pthread_once would have
 * made that first refusal final). A plain function pointer rather than an ifunc,
 * which would run before sanitizer runtimes are ready. */
static struct kernels k_table;
static int k_isa = -1; /* the widest set k_table uses, published after it; -1: none yet */
static pthread_mutex_t k_lock = PTHREAD_MUTEX_INITIALIZER;

static void choose_kernels(void)
{
    int cap = ls_isa_cap(NULL);
    if (cap < 0)
        return;
    struct kernels t = {f32_combine_base, i32_combine_base, LS_HALF_KERNELS(f16_base), LS_HALF_KERNELS(bf16_base)};
    int isa = ISA_BASE;
#if defined(__x86_64__)
    __builtin_cpu_init();
    int avx2 = cap >= ISA_AVX2 && __builtin_cpu_supports("avx2");
    if (cap >= ISA_AVX512 && __builtin_cpu_supports("avx512f")) {
        t.f32 = f32_combine_avx512;
        t.i32 = i32_combine_avx512;
        isa = ISA_AVX512;
    } else if (avx2) {
        t.f32 = f32_combine_avx2;
        t.i32 = i32_combine_avx2;
        isa = ISA_AVX2;
    }
    if (cap >= ISA_AVX512 && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl"))
        t.bf16 = (struct half_kernels)LS_HALF_KERNELS(bf16_avx512);
    else if (avx2)
        t.bf16 = (struct half_kernels)LS_HALF_KERNELS(bf16_avx2);
    unsigned a, b, c, d; /* F16C from CPUID leaf 1 (clang 14's builtin does not know it) */
    if (avx2 && __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C))
        t.f16 = (struct half_kernels)LS_HALF_KERNELS(f16_f16c);
#endif
    k_table = t;
    ls_store_release(&k_isa, isa);
}

int ls_reduce_ready(void)
{
    if (ls_load_acquire(&k_isa) >= 0)
        return 0; /* chosen: every later call, without the lock */
    pthread_mutex_lock(&k_lock);
    if (ls_load_relaxed(&k_isa) < 0)
        choose_kernels();
    int chosen = ls_load_relaxed(&k_isa) >= 0;
    pthread_mutex_unlock(&k_lock);
    return chosen ? 0 : -EINVAL;
}

/* Only reached through a communicator or lockstep_reduce, which call ls_reduce_ready
 * first and stop if it fails. */
static const struct kernels *kernels(void)
{
    return &k_table;
}

int lockstep_reduce_isa(void)
{
    int rc = ls_reduce_ready();
    return rc ? rc : ls_load_relaxed(&k_isa);
}

const char *lockstep_isa_name(lockstep_isa_t isa)
{
    return (unsigned)isa <= LOCKSTEP_ISA_AVX512 ? isa_names[isa] : NULL;
}

/* out = a op b over n f32 or i32 elements; out may be a or b itself */
static inline void combine_words(const struct kernels *kt, lockstep_dtype_t dt, void *out, const void *a,
                                 const void *b, size_t n, lockstep_op_t op)
{
    if (dt == LOCKSTEP_DTYPE_F32)
        kt->f32(out, a, b, n, op);
    else
        kt->i32(out, a, b, n, op);
}

/* ---- the entry point --------------------------------------------------------------- */

/* ls_reduce_few's body for one element type and op (see comm_impl.h) */
#define LS_FEW(T, OP)                                                                           \
    do {                                                                                        \
        T acc[LS_FEW_WORDS], *o = out;                                                          \
        const T *x = in[0], *y = in[nin - 1];                                                   \
        if (nin > 2) {                                                                          \
            for (size_t i = 0; i < n; i++)                                                      \
                acc[i] = OP(x[i], ((const T *)in[1])[i]);                                       \
            for (int k = 2; k < nin - 1; k++)                                                   \
                for (size_t i = 0; i < n; i++)                                                  \
                    acc[i] = OP(acc[i], ((const T *)in[k])[i]);                                 \
            x = acc;                                                                            \
        }                                                                                       \
        for (size_t i = 0; i < n; i++)                                                          \
            o[i] = OP(x[i], y[i]);                                                              \
        return 0;                                                                               \
    } while (0)
/* ls_reduce_few's body for bf16: widened, combined in f32 in rank order, rounded once,
 * as the half kernels do */
#define LS_FEW_BF16(OP)                                                                         \
    do {                                                                                        \
        float acc[LS_FEW_HALVES];                                                               \
        const uint16_t *x = in[0], *y = in[1];                                                  \
        uint16_t *o = out;                                                                      \
        for (size_t i = 0; i < n; i++)                                                          \
            acc[i] = OP(bf16_widen1(x[i]), bf16_widen1(y[i]));                                  \
        for (int k = 2; k < nin; k++)                                                           \
            for (size_t i = 0; i < n; i++)                                                      \
                acc[i] = OP(acc[i], bf16_widen1(((const uint16_t *)in[k])[i]));                 \
        for (size_t i = 0; i < n; i++)                                                          \
            o[i] = bf16_narrow1(acc[i]);                                                        \
        return 0;                                                                               \
    } while (0)
static int few_bf16(lockstep_op_t op, void *out, const void *const *in, int nin, size_t n)
{
    if (op == LOCKSTEP_OP_SUM)
        LS_FEW_BF16(LS_OP_SUM);
    if (op == LOCKSTEP_OP_MAX)
        LS_FEW_BF16(LS_OP_MAX);
    LS_FEW_BF16(LS_OP_MIN);
}

int ls_reduce_few(lockstep_dtype_t dt, lockstep_op_t op, void *out, const void *const *in, int nin, size_t n)
{
    if (nin < 2)
        return -1; /* one input: ls_reduce's copy */
    if (dt == LOCKSTEP_DTYPE_BF16)
        return n <= LS_FEW_HALVES ? few_bf16(op, out, in, nin, n) : -1;
    if (n > LS_FEW_WORDS || (dt != LOCKSTEP_DTYPE_F32 && dt != LOCKSTEP_DTYPE_I32))
        return -1; /* f16 too: its scalar conversions lose to F16C's vectors */
    if (dt == LOCKSTEP_DTYPE_F32 && op == LOCKSTEP_OP_SUM)
        LS_FEW(float, LS_OP_SUM);
    if (dt == LOCKSTEP_DTYPE_F32 && op == LOCKSTEP_OP_MAX)
        LS_FEW(float, LS_OP_MAX);
    if (dt == LOCKSTEP_DTYPE_F32)
        LS_FEW(float, LS_OP_MIN);
    if (op == LOCKSTEP_OP_SUM)
        LS_FEW(int32_t, LS_OP_SUM_I32);
    if (op == LOCKSTEP_OP_MAX)
        LS_FEW(int32_t, LS_OP_MAX);
    LS_FEW(int32_t, LS_OP_MIN);
}


void ls_reduce(lockstep_dtype_t dt, lockstep_op_t op, void *out, void *const *also, int nalso,
               const void *const *in, int nin, size_t count)
{
    if (count == 0 || nin <= 0 || (nalso == 0 && ls_reduce_few(dt, op, out, in, nin, count) == 0))
        return;
    if (nin == 1) { /* a copy, whatever the dtype */
        size_t bytes = count * lockstep_dtype_size(dt);
        if (out != in[0])
            memmove(out, in[0], bytes);
        for (int k = 0; k < nalso; k++)
            if (also[k] != out)
                memcpy(also[k], out, bytes);
        return;
    }
    if (dt == LOCKSTEP_DTYPE_F32 || dt == LOCKSTEP_DTYPE_I32) {
        /* Blockwise, so that the block of out stays in L1 while every input is combined
         * into it: memory sees each input read once and out written once, instead of
         * out being re-read and re-written once per input. */
        const struct kernels *kt = kernels();
        int alias = 0; /* an input k >= 1 that is out itself */
        for (int k = 1; k < nin; k++)
            if (in[k] == out)
                alias = k;
        uint32_t part[LS_WORD_BLOCK]; /* inputs 0 .. alias - 1 combined, when alias >= 2 */
        for (size_t off = 0; off < count; off += LS_WORD_BLOCK) {
            size_t n = count - off < LS_WORD_BLOCK ? count - off : LS_WORD_BLOCK;
            char *o = (char *)out + off * 4;
            const char *blk[LOCKSTEP_COMM_MAX_RANKS];
            for (int k = 0; k < nin; k++)
                blk[k] = (const char *)in[k] + off * 4;
            int k = 2;
            if (alias >= 2) { /* the inputs before out's own go to part first */
                combine_words(kt, dt, part, blk[0], blk[1], n, op);
                for (; k < alias; k++)
                    combine_words(kt, dt, part, part, blk[k], n, op);
                combine_words(kt, dt, o, part, o, n, op);
                k = alias + 1;
            } else { /* out may be input 0 or 1 itself */
                combine_words(kt, dt, o, blk[0], blk[1], n, op);
            }
            for (; k < nin; k++)
                combine_words(kt, dt, o, o, blk[k], n, op);
            for (int j = 0; j < nalso; j++) /* while the block is still in L1 */
                memcpy((char *)also[j] + off * 4, o, n * 4);
        }
        return;
    }
    /* f16, bf16: every input of a block is read before out's block is written (see
     * half_kernels), so out and also[k] may be inputs too */
    const struct half_kernels *h = dt == LOCKSTEP_DTYPE_F16 ? &kernels()->f16 : &kernels()->bf16;
    float acc[LS_HALF_BLOCK];
    for (size_t off = 0; off < count; off += LS_HALF_BLOCK) {
        size_t n = count - off < LS_HALF_BLOCK ? count - off : LS_HALF_BLOCK;
        const uint16_t *x = (const uint16_t *)in[0] + off, *y = (const uint16_t *)in[1] + off;
        uint16_t *o = (uint16_t *)out + off;
        if (nin == 2) {
            h->pair(o, x, y, n, op);
        } else {
            h->first(acc, x, y, n, op);
            for (int k = 2; k < nin - 1; k++)
                h->accumulate(acc, (const uint16_t *)in[k] + off, n, op);
            h->last(o, acc, (const uint16_t *)in[nin - 1] + off, n, op);
        }
        for (int k = 0; k < nalso; k++)
            memcpy((uint16_t *)also[k] + off, (uint16_t *)out + off, n * 2);
    }
}

int lockstep_reduce(lockstep_dtype_t dtype, lockstep_op_t op, void *out, const void *a, const void *b,
                    size_t count)
{
    size_t es = lockstep_dtype_size(dtype);
    if (!es || (unsigned)op > LOCKSTEP_OP_MIN || count > SIZE_MAX / es || (count && (!out || !a || !b)))
        return -EINVAL;
    size_t n = count * es;
    if ((a != out && ls_overlap(a, out, n)) || (b != out && ls_overlap(b, out, n)))
        return -EINVAL; /* partial overlap */
    int rc = ls_reduce_ready();
    if (rc)
        return rc;
    const void *in[2] = {a, b};
    ls_reduce(dtype, op, out, NULL, 0, in, 2, count);
    return 0;
}
