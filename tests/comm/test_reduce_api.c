/* lockstep_reduce: exact values per dtype and op, aliasing, and the refused arguments. */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lockstep/comm.h"
#include "../common/check.h"
#include "../common/half.h"

/* Every f16 and bf16 bit pattern through lockstep_reduce, against references built
 * here: the compiler's _Float16 conversion for f16 (or, without one, tests/common/half.h's
 * own), and for bf16 a rounding that picks the nearer of the two neighbouring bf16
 * values by their distances in double. The count is not a multiple of any vector
 * width, so vector bodies and tails both run. */
enum { NHALF = 65536 + 5 };

static int bf16_nan(uint16_t h)
{
    return (h & 0x7f80) == 0x7f80 && (h & 0x7f);
}

static float bf16_value(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint16_t bf16_nearest(float f) /* f is not NaN */
{
    uint32_t u;
    memcpy(&u, &f, 4);
    uint16_t lo = (uint16_t)(u >> 16), hi = (uint16_t)(lo + 1); /* toward and away from zero */
    if ((u & 0xffff) == 0)
        return lo;
    double dlo = fabs((double)f - (double)bf16_value(lo));
    /* past the largest finite value, hi is infinity: measure to 2^128 instead */
    double vhi = (hi & 0x7fff) == 0x7f80 ? ldexp(f < 0 ? -1.0 : 1.0, 128) : (double)bf16_value(hi);
    double dhi = fabs((double)f - vhi);
    return dlo < dhi ? lo : dhi < dlo ? hi : (lo & 1) ? hi : lo;
}

/* tests/common/half.h's own conversions, which stand in for _Float16 where the compiler
 * has none, against the compiler's: every binary16 value widened, and binary32 values
 * narrowed around every binary16 value and halfway point (ties to even), through
 * subnormals, overflow, infinities and NaNs. Only where the compiler has _Float16. */
static void check_soft_halves(void)
{
#ifdef __FLT16_MANT_DIG__
    for (uint32_t i = 0; i < 65536; i++) {
        float w = test_half_to_float((uint16_t)i), v = soft_half_to_float((uint16_t)i);
        CHECK(memcmp(&w, &v, 4) == 0 || (w != w && v != v));
    }
    /* binary32 values around the binary16 grid: every setting of the top 19 bits (sign,
     * exponent, 10 mantissa bits), with the 13 low bits at or next to 0, a quarter, the
     * halfway point 0x1000, three quarters and the top; subnormal halves' halfway points
     * have all 13 low bits clear, so they are among them */
    static const uint32_t low[] = {0, 1, 0xfff, 0x1000, 0x1001, 0x1fff, 0x0800, 0x17ff};
    for (uint32_t hi = 0; hi < (1u << 19); hi++)
        for (size_t k = 0; k < sizeof low / sizeof low[0]; k++) {
            uint32_t u = (hi << 13) | low[k];
            float f;
            memcpy(&f, &u, 4);
            uint16_t want = test_half_from_float(f), got = soft_half_from_float(f);
            if (test_half_is_nan(want))
                CHECK(test_half_is_nan(got));
            else if (got != want) {
                fprintf(stderr, "soft_half_from_float(%a = %#x) = %#x, the compiler's %#x\n", (double)f, u, got, want);
                exit(1);
            }
        }
#endif
}

static void check_halves(void)
{
    static uint16_t a[NHALF], b[NHALF], out[NHALF];
    for (size_t i = 0; i < NHALF; i++)
        a[i] = (uint16_t)i;
    /* bf16: x + -0 is x, and MAX/MIN against NaN keep x (NaNs made quiet) */
    for (size_t i = 0; i < NHALF; i++)
        b[i] = 0x8000;
    CHECK_EQ(lockstep_reduce(LOCKSTEP_DTYPE_BF16, LOCKSTEP_OP_SUM, out, a, b, NHALF), 0);
    for (size_t i = 0; i < NHALF; i++)
        CHECK_EQ(out[i], bf16_nan(a[i]) ? a[i] | 0x40 : a[i]);
    for (size_t i = 0; i < NHALF; i++)
        b[i] = 0x7fc0;
    for (int op = LOCKSTEP_OP_MAX; op <= LOCKSTEP_OP_MIN; op++) {
        CHECK_EQ(lockstep_reduce(LOCKSTEP_DTYPE_BF16, (lockstep_op_t)op, out, a, b, NHALF), 0);
        for (size_t i = 0; i < NHALF; i++)
            CHECK_EQ(out[i], bf16_nan(a[i]) ? a[i] | 0x40 : a[i]);
    }
    /* sums that round: every pattern against a spread of others */
    for (size_t i = 0; i < NHALF; i++)
        b[i] = (uint16_t)(i * 40503u + 12345u);
    CHECK_EQ(lockstep_reduce(LOCKSTEP_DTYPE_BF16, LOCKSTEP_OP_SUM, out, a, b, NHALF), 0);
    for (size_t i = 0; i < NHALF; i++) {
        float s = bf16_value(a[i]) + bf16_value(b[i]);
        if (isnan(s))
            CHECK(bf16_nan(out[i]));
        else
            CHECK_EQ(out[i], bf16_nearest(s));
    }
    /* f16: MAX/MIN against NaN keep x, then the same sums, in place (out is a) */
    for (size_t i = 0; i < NHALF; i++)
        b[i] = 0x7e00;
    for (int op = LOCKSTEP_OP_MAX; op <= LOCKSTEP_OP_MIN; op++) {
        CHECK_EQ(lockstep_reduce(LOCKSTEP_DTYPE_F16, (lockstep_op_t)op, out, a, b, NHALF), 0);
        for (size_t i = 0; i < NHALF; i++)
            CHECK_EQ(out[i], (a[i] & 0x7c00) == 0x7c00 && (a[i] & 0x3ff) ? a[i] | 0x200 : a[i]);
    }
    for (size_t i = 0; i < NHALF; i++)
        b[i] = (uint16_t)(i * 40503u + 12345u);
    CHECK_EQ(lockstep_reduce(LOCKSTEP_DTYPE_F16, LOCKSTEP_OP_SUM, a, a, b, NHALF), 0);
    for (size_t i = 0; i < NHALF; i++) {
        uint16_t want = test_half_from_float(test_half_to_float((uint16_t)i) + test_half_to_float(b[i]));
        if (test_half_is_nan(want))
            CHECK(test_half_is_nan(a[i]));
        else
            CHECK_EQ(a[i], want);
    }
}

/* The kernels lockstep_reduce_isa names: the widest this CPU has, capped by
 * LOCKSTEP_ISA when the test runs under it (tests/CMakeLists.txt runs this program
 * under every cap, so every kernel set runs here, not just the widest). */
static void check_isa(void)
{
    const char *cap = getenv("LOCKSTEP_ISA");
    int want = 0; /* 0 base, 1 avx2, 2 avx512 */
#if defined(__x86_64__)
    want = __builtin_cpu_supports("avx512f") ? 2 : __builtin_cpu_supports("avx2") ? 1 : 0;
#endif
    if (cap && strcmp(cap, "avx2") == 0 && want > 1)
        want = 1;
    if (cap && strcmp(cap, "base") == 0)
        want = 0;
    static const lockstep_isa_t isas[] = {LOCKSTEP_ISA_BASE, LOCKSTEP_ISA_AVX2, LOCKSTEP_ISA_AVX512};
    static const char *const names[] = {"base", "avx2", "avx512"};
    CHECK_EQ(lockstep_reduce_isa(), (int)isas[want]);
    CHECK(strcmp(lockstep_isa_name(isas[want]), names[want]) == 0);
    CHECK(lockstep_isa_name((lockstep_isa_t)3) == NULL && lockstep_isa_name((lockstep_isa_t)-1) == NULL);
}

/* Run under LOCKSTEP_ISA=sse9: every entry point refuses, and the message names the
 * variable. */
static int check_bad_isa(void)
{
    float a = 1, b = 2, out = 0;
    CHECK_EQ(lockstep_reduce_isa(), -EINVAL);
    CHECK_EQ(lockstep_reduce(LOCKSTEP_DTYPE_F32, LOCKSTEP_OP_SUM, &out, &a, &b, 1), -EINVAL);
    CHECK(out == 0);
    lockstep_comm_params_t p = lockstep_comm_params_default();
    snprintf(p.job, sizeof p.job, "isa%d", (int)getpid());
    char msg[200];
    CHECK_EQ(lockstep_comm_params_check(&p, msg, sizeof msg), -EINVAL);
    CHECK(strstr(msg, "LOCKSTEP_ISA") != NULL && strstr(msg, "sse9") != NULL);
    errno = 0;
    CHECK(lockstep_comm_create(&p) == NULL);
    CHECK_EQ(errno, EINVAL);
    /* the refusals chose nothing: once the variable is fixed, the next call chooses */
    CHECK_EQ(setenv("LOCKSTEP_ISA", "base", 1), 0);
    CHECK_EQ(lockstep_reduce_isa(), (int)LOCKSTEP_ISA_BASE);
    CHECK_EQ(lockstep_reduce(LOCKSTEP_DTYPE_F32, LOCKSTEP_OP_SUM, &out, &a, &b, 1), 0);
    CHECK(out == 3);
    CHECK_EQ(setenv("LOCKSTEP_ISA", "sse9", 1), 0); /* and then it stays */
    CHECK_EQ(lockstep_reduce_isa(), (int)LOCKSTEP_ISA_BASE);
    return 0;
}

int main(int argc, char **argv)
{
    watchdog(30);
    if (argc > 1 && strcmp(argv[1], "bad-isa") == 0)
        return check_bad_isa();
    check_isa();
    enum { n = 37 }; /* a vector body and a tail */
    float a[n], b[n], out[n];
    int32_t ia[n], ib[n], iout[n];
    for (int i = 0; i < n; i++) {
        a[i] = (float)(i - 18) * 0.5f;
        b[i] = (float)(7 - i) * 0.25f;
        ia[i] = i * 1000 - 17000;
        ib[i] = 5 - i * 3;
    }
    a[3] = NAN; /* max/min give a where either side is NaN */
    b[5] = NAN;
    CHECK_EQ(lockstep_reduce(LOCKSTEP_DTYPE_F32, LOCKSTEP_OP_SUM, out, a, b, n), 0);
    for (int i = 0; i < n; i++)
        if (i != 3 && i != 5)
            CHECK(out[i] == a[i] + b[i]);
    CHECK(isnan(out[3]) && isnan(out[5]));
    CHECK_EQ(lockstep_reduce(LOCKSTEP_DTYPE_F32, LOCKSTEP_OP_MAX, out, a, b, n), 0);
    for (int i = 0; i < n; i++)
        if (i != 3 && i != 5)
            CHECK(out[i] == (a[i] > b[i] ? a[i] : b[i]));
    CHECK(isnan(out[3]) && out[5] == a[5]);
    CHECK_EQ(lockstep_reduce(LOCKSTEP_DTYPE_I32, LOCKSTEP_OP_MIN, iout, ia, ib, n), 0);
    for (int i = 0; i < n; i++)
        CHECK_EQ(iout[i], ia[i] < ib[i] ? ia[i] : ib[i]);

    /* up to 32 f32/i32 elements go through plain loops instead of the vector kernels:
     * the same bits, NaNs (a[3], b[5]) and wrap-around (w[1] + ib[1]) included */
    int32_t w[n];
    memcpy(w, ia, sizeof w);
    w[1] = INT32_MAX;
    for (int op = LOCKSTEP_OP_SUM; op <= LOCKSTEP_OP_MIN; op++) {
        enum { few = 7 };
        float fmany[n], ffew[few];
        int32_t imany[n], ifew[few];
        CHECK_EQ(lockstep_reduce(LOCKSTEP_DTYPE_F32, (lockstep_op_t)op, fmany, a, b, n), 0);
        CHECK_EQ(lockstep_reduce(LOCKSTEP_DTYPE_F32, (lockstep_op_t)op, ffew, a, b, few), 0);
        CHECK(memcmp(ffew, fmany, sizeof ffew) == 0);
        CHECK_EQ(lockstep_reduce(LOCKSTEP_DTYPE_I32, (lockstep_op_t)op, imany, w, ib, n), 0);
        CHECK_EQ(lockstep_reduce(LOCKSTEP_DTYPE_I32, (lockstep_op_t)op, ifew, w, ib, few), 0);
        CHECK(memcmp(ifew, imany, sizeof ifew) == 0);
        float fa[few], fb[few]; /* in place, out being either input */
        memcpy(fa, a, sizeof fa);
        memcpy(fb, b, sizeof fb);
        CHECK_EQ(lockstep_reduce(LOCKSTEP_DTYPE_F32, (lockstep_op_t)op, fa, fa, b, few), 0);
        CHECK_EQ(lockstep_reduce(LOCKSTEP_DTYPE_F32, (lockstep_op_t)op, fb, a, fb, few), 0);
        CHECK(memcmp(fa, ffew, sizeof fa) == 0 && memcmp(fb, ffew, sizeof fb) == 0);
        if (op == LOCKSTEP_OP_SUM)
            CHECK_EQ(ifew[1], INT32_MIN + 1); /* INT32_MAX + 2 wraps */
        if (op == LOCKSTEP_OP_MAX)
            CHECK(isnan(ffew[3]) && ffew[5] == a[5]);
    }

    /* out may be a or b: in place either way gives the same bits */
    int32_t x[n], y[n];
    memcpy(x, ia, sizeof x);
    CHECK_EQ(lockstep_reduce(LOCKSTEP_DTYPE_I32, LOCKSTEP_OP_SUM, x, x, ib, n), 0);
    memcpy(y, ib, sizeof y);
    CHECK_EQ(lockstep_reduce(LOCKSTEP_DTYPE_I32, LOCKSTEP_OP_SUM, y, ia, y, n), 0);
    for (int i = 0; i < n; i++) {
        CHECK_EQ(x[i], ia[i] + ib[i]);
        CHECK_EQ(y[i], ia[i] + ib[i]);
    }

    /* f16 and bf16: computed in f32, rounded once (1 + 2^-11 is a half-way case in f16:
     * rounds to even, 1.0; bf16 2 + 2^-7 rounds to 2.0) */
    uint16_t h1 = test_half_from_float(1.0f), h2 = test_half_from_float(0.00048828125f), hout; /* 2^-11 */
    CHECK_EQ(lockstep_reduce(LOCKSTEP_DTYPE_F16, LOCKSTEP_OP_SUM, &hout, &h1, &h2, 1), 0);
    CHECK(test_half_to_float(hout) == 1.0f);
    uint16_t b1 = 0x4000 /* 2.0 */, b2 = 0x3c00 /* 2^-7 */, bout;
    CHECK_EQ(lockstep_reduce(LOCKSTEP_DTYPE_BF16, LOCKSTEP_OP_SUM, &bout, &b1, &b2, 1), 0);
    CHECK_EQ(bout, 0x4000);
    b2 = 0x3f80; /* 1.0: 2 + 1 = 3 exactly */
    CHECK_EQ(lockstep_reduce(LOCKSTEP_DTYPE_BF16, LOCKSTEP_OP_SUM, &bout, &b1, &b2, 1), 0);
    CHECK_EQ(bout, 0x4040);

    check_halves();
    check_soft_halves();

    /* refused */
    CHECK_EQ(lockstep_reduce((lockstep_dtype_t)7, LOCKSTEP_OP_SUM, out, a, b, n), -EINVAL);
    CHECK_EQ(lockstep_reduce(LOCKSTEP_DTYPE_F32, (lockstep_op_t)3, out, a, b, n), -EINVAL);
    CHECK_EQ(lockstep_reduce(LOCKSTEP_DTYPE_F32, LOCKSTEP_OP_SUM, NULL, a, b, n), -EINVAL);
    CHECK_EQ(lockstep_reduce(LOCKSTEP_DTYPE_F32, LOCKSTEP_OP_SUM, out, a, NULL, n), -EINVAL);
    CHECK_EQ(lockstep_reduce(LOCKSTEP_DTYPE_F32, LOCKSTEP_OP_SUM, a + 1, a, b, n - 1), -EINVAL); /* partial overlap */
    CHECK_EQ(lockstep_reduce(LOCKSTEP_DTYPE_F32, LOCKSTEP_OP_SUM, out, b + 2, a, n - 2), 0);
    CHECK_EQ(lockstep_reduce(LOCKSTEP_DTYPE_F32, LOCKSTEP_OP_SUM, b + 2, a, b + 1, n - 2), -EINVAL);
    CHECK_EQ(lockstep_reduce(LOCKSTEP_DTYPE_F32, LOCKSTEP_OP_SUM, NULL, NULL, NULL, 0), 0);
    CHECK_EQ(lockstep_reduce(LOCKSTEP_DTYPE_F32, LOCKSTEP_OP_SUM, out, a, b, SIZE_MAX / 2), -EINVAL);
    return 0;
}
