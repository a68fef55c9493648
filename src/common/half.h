/* One half-precision element to and from f32, exactly: f16 and bf16 widen without
 * loss; narrowing rounds to nearest, ties to even (f16: as F16C's conversion, inf
 * past 65504, subnormals kept; a NaN stays a NaN, made quiet, with its sign and
 * top payload bits). The reduction kernels and the loader's conversions both use
 * these, so a value converted by either has the same bits. Not installed. */
#ifndef LOCKSTEP_COMMON_HALF_H
#define LOCKSTEP_COMMON_HALF_H

#include <stdint.h>
#include <string.h>

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

static inline float f16_widen1(uint16_t h)
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

/* to nearest, ties to even, as F16C's conversion */
static inline uint16_t f16_narrow1(float f)
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

static inline float bf16_widen1(uint16_t h)
{
    return bits_f32((uint32_t)h << 16);
}

/* to nearest, ties to even; a NaN stays a NaN, made quiet. Both results are computed
 * and one is picked, so that loops over it vectorise. */
static inline uint16_t bf16_narrow1(float f)
{
    uint32_t u = f32_bits(f);
    uint32_t even = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16, quiet = (u >> 16) | 0x40u;
    return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? quiet : even);
}

#endif
