/* Conversion while loading (to_type): F32, F16 and BF16 tensors arrive in each of the
 * three types with the bits of the tests' own reference conversions (round to nearest
 * even; infinities, overflow, subnormals; a NaN stays a NaN), whatever the mode,
 * destination, chunk size or shard plan (a column split converts run by run); other
 * types arrive untouched; packed types, bad names, alias and CUDA are refused. Run
 * again under LOCKSTEP_ISA=avx2 and base for the kernels this CPU would not pick. */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <stdint.h>

#include "lockstep/lockstep.h"
#include "../common/check.h"
#include "../common/half.h"

#define FAIL(...) do { fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); CHECK(!"see above"); } while (0)

#define ROWS 37
#define COLS 61 /* odd: vector bodies and scalar tails both run */

static const char *const types[] = {"F32", "F16", "BF16"};
static const unsigned sizes[] = {4, 2, 2};

/* the tests' own bf16 rounding: to nearest, ties to even; NaN quiet, sign kept */
static uint16_t ref_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40u);
    uint32_t lower = u & 0xffffu, upper = u >> 16;
    if (lower > 0x8000u || (lower == 0x8000u && (upper & 1u)))
        upper++;
    return (uint16_t)upper;
}

static float bf16_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* element k of type ty as f32 (every F16 and BF16 value is one) */
static float value_of(int ty, const unsigned char *p, size_t k)
{
    if (ty == 0) {
        float f;
        memcpy(&f, p + 4 * k, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, p + 2 * k, 2);
    return ty == 1 ? test_half_to_float(h) : bf16_f32(h);
}

/* f as type ty's bits, into out[k] */
static void store_as(int ty, unsigned char *out, size_t k, float f)
{
    if (ty == 0) {
        memcpy(out + 4 * k, &f, 4);
    } else {
        uint16_t h = ty == 1 ? test_half_from_float(f) : ref_bf16(f);
        memcpy(out + 2 * k, &h, 2);
    }
}

static unsigned char *file_bytes;
static size_t file_len;
static uint64_t offs[4];

/* tensors "t0" F32, "t1" F16, "t2" BF16 of ROWS x COLS, and "n" I32 */
static void write_file(const char *path)
{
    static const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1e-40f, -1e-42f, 65504.0f,
                                     65519.0f, 65520.0f, 1e6f, 6e-8f, 3e-8f, 1.0000001f, 2.5e-5f, -3.3895e38f};
    char hdr[1024];
    int n = snprintf(hdr, sizeof hdr, "{");
    uint64_t at = 0, count = (uint64_t)ROWS * COLS;
    for (int t = 0; t < 3; t++) {
        n += snprintf(hdr + n, sizeof hdr - (size_t)n, "\"t%d\":{\"dtype\":\"%s\",\"shape\":[%d,%d],"
                      "\"data_offsets\":[%llu,%llu]},", t, types[t], ROWS, COLS, (unsigned long long)at,
                      (unsigned long long)(at + count * sizes[t]));
        offs[t] = at;
        at += count * sizes[t];
    }
    n += snprintf(hdr + n, sizeof hdr - (size_t)n, "\"n\":{\"dtype\":\"I32\",\"shape\":[5],\"data_offsets\":"
                  "[%llu,%llu]}}", (unsigned long long)at, (unsigned long long)(at + 20));
    offs[3] = at;
    at += 20;
    while (n % 8)
        hdr[n++] = ' ';
    file_len = 8 + (size_t)n + at;
    file_bytes = calloc(1, file_len);
    CHECK(file_bytes != NULL);
    uint64_t hl = (uint64_t)n;
    memcpy(file_bytes, &hl, 8);
    memcpy(file_bytes + 8, hdr, (size_t)n);
    for (int t = 0; t < 4; t++)
        offs[t] += 8 + (uint64_t)n;
    uint32_t x = 12345;
    for (int t = 0; t < 3; t++)
        for (uint64_t k = 0; k < count; k++) {
            x = x * 1103515245u + 12345u;
            float f = k < sizeof specials / sizeof specials[0] ? specials[k]
                    : ((float)(x >> 8) / 16777216.0f - 0.5f) * (k % 3 ? 2e3f : 2e-3f);
            store_as(t, file_bytes + offs[t], k, f);
        }
    for (int k = 0; k < 5; k++)
        memcpy(file_bytes + offs[3] + 4 * k, &(int32_t){k * 7 - 3}, 4);
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    CHECK(fwrite(file_bytes, 1, file_len, f) == file_len);
    CHECK(fclose(f) == 0);
}

static void *heap[4];

static void *to_heap(void *arg, const lockstep_tensor_info_t *t)
{
    (void)arg;
    int i = t->name[0] == 'n' ? 3 : t->name[1] - '0';
    return heap[i] = malloc(t->size);
}

/* Every element of column part [c0, c0 + nc) of tensor t, converted to type to */
static void check_tensor(const lockstep_loaded_t *l, const lockstep_model_t *m, int t, int to, uint64_t c0,
                         uint64_t nc)
{
    char name[4];
    snprintf(name, sizeof name, "t%d", t);
    const lockstep_tensor_info_t *info = lockstep_model_tensor_find(m, name);
    size_t idx = (size_t)(info - lockstep_model_tensor(m, 0));
    const lockstep_tensor_info_t *got = lockstep_loaded_tensor(l, idx);
    CHECK(got != NULL);
    CHECK(strcmp(got->type_name, types[to]) == 0);
    CHECK_EQ(got->size, (uint64_t)ROWS * nc * sizes[to]);
    CHECK_EQ(got->dims[1], nc);
    const unsigned char *data = lockstep_loaded_data(l, idx);
    unsigned char want[8];
    for (uint64_t r = 0; r < ROWS; r++)
        for (uint64_t c = 0; c < nc; c++) {
            float f = value_of(t, file_bytes + offs[t], r * COLS + c0 + c);
            store_as(to, want, 0, f);
            const unsigned char *g = data + (r * nc + c) * sizes[to];
            if (isnan(f))
                CHECK(isnan(value_of(to, g, 0)));
            else if (memcmp(g, want, sizes[to]) != 0)
                FAIL("t%d -> %s at (%llu, %llu): %g", t, types[to], (unsigned long long)r,
                     (unsigned long long)(c0 + c), (double)f);
        }
}

static void matrix(const char *path)
{
    lockstep_load_mode_t modes[] = {LOCKSTEP_LOAD_COPY, LOCKSTEP_LOAD_BUFFERED};
    size_t chunks[] = {0, 1024, 8192};
    for (int to = 0; to < 3; to++)
        for (unsigned mi = 0; mi < 2; mi++)
            for (unsigned ci = 0; ci < 3; ci++)
                for (int how = 0; how < 3; how++) { /* whole, caller memory, columns of rank 1 of 3 */
                    lockstep_load_params_t p = lockstep_load_params_default();
                    p.mode = modes[mi];
                    p.chunk_bytes = chunks[ci];
                    p.to_type = types[to];
                    lockstep_shard_rule_t rule = {"t*", 1};
                    lockstep_shard_t plan = {1, 3, &rule, 1};
                    if (how == 1)
                        p.dest = to_heap;
                    if (how == 2)
                        p.shard = &plan;
                    lockstep_load_error_t err;
                    lockstep_loaded_t *l = lockstep_load(path, &p, &err);
                    if (!l)
                        FAIL("to %s: %s", types[to], err.message);
                    const lockstep_model_t *m = lockstep_loaded_model(l);
                    uint64_t c0 = how == 2 ? 21 : 0, nc = how == 2 ? 21 : COLS; /* ceil(61 / 3) */
                    for (int t = 0; t < 3; t++)
                        check_tensor(l, m, t, to, c0, nc);
                    size_t ni = (size_t)(lockstep_model_tensor_find(m, "n") - lockstep_model_tensor(m, 0));
                    CHECK(strcmp(lockstep_loaded_tensor(l, ni)->type_name, "I32") == 0); /* untouched */
                    CHECK(memcmp(lockstep_loaded_data(l, ni), file_bytes + offs[3], 20) == 0);
                    lockstep_load_stats_t st;
                    CHECK_EQ(lockstep_loaded_stats(l, &st), 0);
                    CHECK_EQ(st.bytes, (uint64_t)ROWS * nc * sizes[to] * 3 + 20);
                    lockstep_loaded_free(l);
                    for (int i = 0; i < 4; i++) {
                        free(heap[i]);
                        heap[i] = NULL;
                    }
                }
}

static void refused(const char *path, const char *dir)
{
    lockstep_load_error_t err;
    lockstep_load_params_t p = lockstep_load_params_default();
    const char *bad[] = {"F64", "f32", "Q4_0", ""};
    for (unsigned k = 0; k < 4; k++) {
        p.to_type = bad[k];
        CHECK(lockstep_load(path, &p, &err) == NULL);
        CHECK_EQ(errno, EINVAL);
        CHECK(strstr(err.message, "to_type") != NULL);
    }
    p.to_type = "F32";
    p.mode = LOCKSTEP_LOAD_ALIAS;
    CHECK(lockstep_load(path, &p, &err) == NULL);
    CHECK_EQ(errno, EINVAL);
    p.mode = LOCKSTEP_LOAD_AUTO;
    p.sink = LOCKSTEP_SINK_CUDA;
    CHECK(lockstep_load(path, &p, &err) == NULL);
    CHECK_EQ(errno, EINVAL);
    /* quantized blocks: named, nothing loaded */
    char gg[600];
    snprintf(gg, sizeof gg, "%s/test_convert_%d.gguf", dir, (int)getpid());
    unsigned char g[256] = {0};
    size_t at = 0;
    memcpy(g, "GGUF", 4);
    at = 4;
    uint32_t v3 = 3, nd = 1, type = 2; /* Q4_0 */
    uint64_t one = 1, zero = 0, len = 1, ne = 32, rel = 0;
    memcpy(g + at, &v3, 4), at += 4;
    memcpy(g + at, &one, 8), at += 8;
    memcpy(g + at, &zero, 8), at += 8;
    memcpy(g + at, &len, 8), at += 8;
    g[at++] = 'q';
    memcpy(g + at, &nd, 4), at += 4;
    memcpy(g + at, &ne, 8), at += 8;
    memcpy(g + at, &type, 4), at += 4;
    memcpy(g + at, &rel, 8), at += 8;
    at = (at + 31) / 32 * 32 + 18;
    FILE *f = fopen(gg, "wb");
    CHECK(f != NULL);
    CHECK(fwrite(g, 1, at, f) == at);
    CHECK(fclose(f) == 0);
    p = lockstep_load_params_default();
    CHECK((lockstep_loaded_free(lockstep_load(gg, &p, &err)), 1)); /* loads without to_type */
    p.to_type = "F32";
    CHECK(lockstep_load(gg, &p, &err) == NULL);
    CHECK_EQ(errno, EINVAL);
    CHECK(strstr(err.message, "\"q\"") != NULL && strstr(err.message, "Q4_0") != NULL);
    unlink(gg);
    CHECK(lockstep_loaded_tensor(NULL, 0) == NULL);
}

int main(void)
{
    watchdog(120);
    char path[128];
    snprintf(path, sizeof path, "test_convert_%d.safetensors", (int)getpid());
    write_file(path);
    matrix(path);
    refused(path, ".");
    unlink(path);
    free(file_bytes);
    return 0;
}
