/* Reduction kernels: out = in[0] op in[1] op ... op in[n-1], element-wise, always in
 * that order, so every rank that reduces the same inputs gets the same bits.
 *
 * f32 and i32 are combined in place in the output, one input at a time; f16 and bf16
 * are widened blockwise into an f32 accumulator, combined there, and rounded once to
 * nearest-even. MAX and MIN keep the accumulator when either side is NaN, exactly as
 * the vector max/min instructions do, so vector bodies and scalar tails agree.
 *
 * ISA dispatch: the f32/i32 loops are plain C that vectorises without -ffast-math
 * (no reduction across elements), compiled three times by target_clones (AVX-512,
 * AVX2, baseline) and chosen by the loader for this CPU. The f16 conversions use F16C
 * when __builtin_cpu_supports says so, else an exact scalar path. */
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#define LS_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define LS_CLONES
#endif

#include "comm_impl.h"

/* ---- f32 / i32 combine: acc = acc op v ------------------------------------------- */

LS_CLONES static void f32_combine(float *restrict acc, const float *restrict v, size_t n, lockstep_op_t op)
{
    switch (op) {
    case LOCKSTEP_SUM:
        for (size_t i = 0; i < n; i++)
            acc[i] = acc[i] + v[i];
        break;
    case LOCKSTEP_MAX:
        for (size_t i = 0; i < n; i++)
            acc[i] = v[i] > acc[i] ? v[i] : acc[i];
        break;
    case LOCKSTEP_MIN:
        for (size_t i = 0; i < n; i++)
            acc[i] = v[i] < acc[i] ? v[i] : acc[i];
        break;
    }
}

LS_CLONES static void i32_combine(int32_t *restrict acc, const int32_t *restrict v, size_t n, lockstep_op_t op)
{
    switch (op) {
    case LOCKSTEP_SUM: /* wrap-around, as two's complement hardware does; no UB */
        for (size_t i = 0; i < n; i++)
            acc[i] = (int32_t)((uint32_t)acc[i] + (uint32_t)v[i]);
        break;
    case LOCKSTEP_MAX:
        for (size_t i = 0; i < n; i++)
            acc[i] = v[i] > acc[i] ? v[i] : acc[i];
        break;
    case LOCKSTEP_MIN:
        for (size_t i = 0; i < n; i++)
            acc[i] = v[i] < acc[i] ? v[i] : acc[i];
        break;
    }
}

/* ---- half-precision conversions -------------------------------------------------- */

static inline uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

float ls_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0x1f) /* inf / NaN: keep the payload, make NaNs quiet */
        return bits_f32(sign | 0x7f800000u | (man << 13) | (man ? 0x00400000u : 0));
    if (exp == 0) {
        if (man == 0)
            return bits_f32(sign);
        /* subnormal: value = man * 2^-24, exact in f32 */
        float f = (float)man * (1.0f / 16777216.0f);
        return sign ? -f : f;
    }
    return bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

uint16_t ls_f32_to_f16(float f)
{
    uint32_t u = f32_bits(f);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t a = u & 0x7fffffffu;
    if (a >= 0x7f800000u) /* inf or NaN */
        return (uint16_t)(sign | 0x7c00u | (a > 0x7f800000u ? 0x200u | ((a >> 13) & 0x3ffu) : 0));
    if (a >= 0x477ff000u) /* rounds to >= 65520: overflow to inf */
        return (uint16_t)(sign | 0x7c00u);
    if (a < 0x38800000u) { /* below the smallest normal half (2^-14): subnormal or zero */
        if (a < 0x33000000u) /* below half the smallest subnormal (2^-25): +-0 */
            return (uint16_t)sign;
        uint32_t exp = a >> 23, man = (a & 0x7fffffu) | 0x800000u;
        unsigned shift = 126u - exp; /* brings man to units of 2^-24 */
        uint32_t q = man >> shift, rem = man & ((1u << shift) - 1u), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1u)))
            q++;
        return (uint16_t)(sign | q);
    }
    uint32_t r = a + 0xfffu + ((a >> 13) & 1u); /* round to nearest even at bit 13 */
    return (uint16_t)(sign | ((r - 0x38000000u) >> 13));
}

float ls_bf16_to_f32(uint16_t h)
{
    return bits_f32((uint32_t)h << 16);
}

uint16_t ls_f32_to_bf16(float f)
{
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it a quiet NaN */
        return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

#if defined(__x86_64__)
__attribute__((target("avx2,f16c"))) static void f16_widen_f16c(float *out, const uint16_t *in, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(in + i))));
    for (; i < n; i++)
        out[i] = ls_f16_to_f32(in[i]);
}

__attribute__((target("avx2,f16c"))) static void f16_narrow_f16c(uint16_t *out, const float *in, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(out + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++)
        out[i] = ls_f32_to_f16(in[i]);
}

static int have_f16c(void)
{
    static int cached = -1;
    int v = __atomic_load_n(&cached, __ATOMIC_RELAXED);
    if (v < 0) {
        __builtin_cpu_init();
        v = __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx2");
        __atomic_store_n(&cached, v, __ATOMIC_RELAXED);
    }
    return v;
}
#endif

static void widen(lockstep_dtype_t dt, float *out, const uint16_t *in, size_t n)
{
    if (dt == LOCKSTEP_F16) {
#if defined(__x86_64__)
        if (have_f16c()) {
            f16_widen_f16c(out, in, n);
            return;
        }
#endif
        for (size_t i = 0; i < n; i++)
            out[i] = ls_f16_to_f32(in[i]);
    } else {
        for (size_t i = 0; i < n; i++)
            out[i] = ls_bf16_to_f32(in[i]);
    }
}

static void narrow(lockstep_dtype_t dt, uint16_t *out, const float *in, size_t n)
{
    if (dt == LOCKSTEP_F16) {
#if defined(__x86_64__)
        if (have_f16c()) {
            f16_narrow_f16c(out, in, n);
            return;
        }
#endif
        for (size_t i = 0; i < n; i++)
            out[i] = ls_f32_to_f16(in[i]);
    } else {
        for (size_t i = 0; i < n; i++)
            out[i] = ls_f32_to_bf16(in[i]);
    }
}

/* ---- the entry point --------------------------------------------------------------- */

#define HALF_BLOCK 1024

void ls_reduce(lockstep_dtype_t dt, lockstep_op_t op, void *out, const void *const *in,
               int nin, size_t count)
{
    if (count == 0 || nin <= 0)
        return;
    if (dt == LOCKSTEP_F32 || dt == LOCKSTEP_I32) {
        if (out != in[0])
            memmove(out, in[0], count * 4);
        for (int k = 1; k < nin; k++) {
            if (dt == LOCKSTEP_F32)
                f32_combine(out, in[k], count, op);
            else
                i32_combine(out, in[k], count, op);
        }
        return;
    }
    float acc[HALF_BLOCK], tmp[HALF_BLOCK];
    for (size_t off = 0; off < count; off += HALF_BLOCK) {
        size_t n = count - off < HALF_BLOCK ? count - off : HALF_BLOCK;
        widen(dt, acc, (const uint16_t *)in[0] + off, n);
        for (int k = 1; k < nin; k++) {
            widen(dt, tmp, (const uint16_t *)in[k] + off, n);
            f32_combine(acc, tmp, n, op);
        }
        narrow(dt, (uint16_t *)out + off, acc, n);
    }
}
