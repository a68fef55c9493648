/* IEEE binary16 <-> binary32 for the tests' references, kept apart from the library's
 * own conversions so that a bug there cannot hide in the reference. With a compiler
 * that has _Float16 (gcc; clang on x86 from 15) the compiler converts; otherwise the
 * bit-level routines below do, round to nearest even, subnormals, infinities and quiet
 * NaNs included. test_reduce_api checks the two against each other on every binary16
 * value and on a sweep of binary32 ones wherever the compiler has _Float16. */
#ifndef LOCKSTEP_TEST_HALF_H
#define LOCKSTEP_TEST_HALF_H

#include <stdint.h>
#include <string.h>

#include "check.h"

TEST_UNTRACED static inline uint16_t soft_half_from_float(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t exp = (u >> 23) & 0xffu, man = u & 0x7fffffu;
    if (exp == 0xffu) /* infinity, or a NaN made quiet with the top of its payload */
        return (uint16_t)(sign | 0x7c00u | (man ? 0x200u | (man >> 13) : 0u));
    if (exp > 112u) { /* a normal binary16 exponent, unless the rounding overflows */
        uint32_t mag = ((exp - 112u) << 10) | (man >> 13), rest = man & 0x1fffu;
        if (rest > 0x1000u || (rest == 0x1000u && (mag & 1u)))
            mag++; /* may carry into the exponent, up to infinity (0x7c00) */
        return mag >= 0x7c00u ? (uint16_t)(sign | 0x7c00u) : (uint16_t)(sign | mag);
    }
    /* subnormal binary16: m * 2^-24 with m = (2^23 + man) * 2^(exp - 126), rounded */
    uint32_t shift = 126u - exp;
    if (exp == 0u || shift > 24u)
        return sign; /* below half the smallest subnormal: zero */
    uint32_t sig = 0x800000u | man, m = sig >> shift, rest = sig & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    if (rest > half || (rest == half && (m & 1u)))
        m++; /* 0x400 when it rounds up to the smallest normal, which is its encoding */
    return (uint16_t)(sign | m);
}

TEST_UNTRACED static inline float soft_half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, u;
    if (e == 0x1fu)
        u = sign | 0x7f800000u | (m << 13);
    else if (e)
        u = sign | ((e + 112u) << 23) | (m << 13);
    else {
        float f = (float)m * 0x1p-24f; /* exact */
        return sign ? -f : f;
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

#ifdef __FLT16_MANT_DIG__
TEST_UNTRACED static inline uint16_t test_half_from_float(float f)
{
    _Float16 x = (_Float16)f;
    uint16_t h;
    memcpy(&h, &x, 2);
    return h;
}

TEST_UNTRACED static inline float test_half_to_float(uint16_t h)
{
    _Float16 x;
    memcpy(&x, &h, 2);
    return (float)x;
}
#else
#define test_half_from_float soft_half_from_float
#define test_half_to_float soft_half_to_float
#endif

TEST_UNTRACED static inline int test_half_is_nan(uint16_t h)
{
    return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu);
}

#endif
