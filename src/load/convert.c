/* The loader's conversions between F32, F16 and BF16, fused into the copy out of the
 * staging buffers (lockstep_load_params_t.to_type). The element conversions are the
 * reduction kernels' (src/common/half.h), so a value has the same bits whichever of
 * the two converted it. F16 and BF16 go to each other through F32, a block at a time.
 *
 * ISA dispatch as the reduction kernels': bf16's loops are plain C compiled for
 * AVX-512, AVX2 and the baseline (they vectorise), f16's use F16C where the CPU has
 * it; chosen once per process, capped by LOCKSTEP_ISA. */
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

#include "../common/half.h"
#include "../internal.h"
#include "load_impl.h"

static const char *const kind_names[] = {"F32", "F16", "BF16"}; /* ls_float_kind */
static const unsigned kind_bytes[] = {4, 2, 2};

int ls_float_kind(const char *type_name)
{
    for (int k = 0; k < 3; k++)
        if (strcmp(type_name, kind_names[k]) == 0)
            return k;
    return -1;
}

const char *ls_float_kind_name(int kind) { return kind_names[kind]; }
unsigned ls_float_kind_bytes(int kind) { return kind_bytes[kind]; }

typedef void (*to_f32_fn)(float *out, const uint16_t *in, size_t n);
typedef void (*from_f32_fn)(uint16_t *out, const float *in, size_t n);

#define LS_BF16_BODIES(suffix, attr)                                                             \
    attr static void bf16_to_f32_##suffix(float *out, const uint16_t *in, size_t n)              \
    {                                                                                            \
        for (size_t i = 0; i < n; i++)                                                           \
            out[i] = bf16_widen1(in[i]);                                                         \
    }                                                                                            \
    attr static void f32_to_bf16_##suffix(uint16_t *out, const float *in, size_t n)              \
    {                                                                                            \
        for (size_t i = 0; i < n; i++)                                                           \
            out[i] = bf16_narrow1(in[i]);                                                        \
    }

LS_BF16_BODIES(base, )

static void f16_to_f32_base(float *out, const uint16_t *in, size_t n)
{
    for (size_t i = 0; i < n; i++)
        out[i] = f16_widen1(in[i]);
}

static void f32_to_f16_base(uint16_t *out, const float *in, size_t n)
{
    for (size_t i = 0; i < n; i++)
        out[i] = f16_narrow1(in[i]);
}

#if defined(__x86_64__)
LS_BF16_BODIES(avx2, __attribute__((target("avx2"))))
LS_BF16_BODIES(avx512, __attribute__((target("avx512f,avx512bw,avx512vl"))))

/* 8 elements at a time; the tails go to the scalar conversions, which agree */
__attribute__((target("avx2,f16c"))) static void f16_to_f32_f16c(float *out, const uint16_t *in, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128((const void *)(in + i))));
    f16_to_f32_base(out + i, in + i, n - i);
}

__attribute__((target("avx2,f16c"))) static void f32_to_f16_f16c(uint16_t *out, const float *in, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((void *)(out + i), _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT));
    f32_to_f16_base(out + i, in + i, n - i);
}
#endif

static struct { to_f32_fn to[3]; from_f32_fn from[3]; } table; /* by kind; F32's unused */
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void choose(void)
{
    int cap = ls_isa_cap(NULL); /* an unknown cap: the baseline, which every CPU runs */
    table.to[1] = f16_to_f32_base;
    table.from[1] = f32_to_f16_base;
    table.to[2] = bf16_to_f32_base;
    table.from[2] = f32_to_bf16_base;
#if defined(__x86_64__)
    __builtin_cpu_init();
    int avx2 = cap >= 1 && __builtin_cpu_supports("avx2");
    if (cap >= 2 && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl")) {
        table.to[2] = bf16_to_f32_avx512;
        table.from[2] = f32_to_bf16_avx512;
    } else if (avx2) {
        table.to[2] = bf16_to_f32_avx2;
        table.from[2] = f32_to_bf16_avx2;
    }
    unsigned a, b, c, d;
    if (avx2 && __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C)) {
        table.to[1] = f16_to_f32_f16c;
        table.from[1] = f32_to_f16_f16c;
    }
#endif
}

void ls_convert(int from, int to, void *dst, const void *src, size_t n)
{
    pthread_once(&once, choose);
    if (from == to) {
        memcpy(dst, src, n * kind_bytes[from]);
    } else if (from == 0) {
        table.from[to](dst, src, n);
    } else if (to == 0) {
        table.to[from](dst, src, n);
    } else { /* F16 <-> BF16, through F32 in blocks that stay in the L1 cache */
        float tmp[1024];
        for (size_t i = 0; i < n; i += 1024) {
            size_t m = n - i < 1024 ? n - i : 1024;
            table.to[from](tmp, (const uint16_t *)src + i, m);
            table.from[to]((uint16_t *)dst + i, tmp, m);
        }
    }
}
