/* The safetensors reader on a valid file and on hostile ones: every prefix (truncation
 * at every byte), forged header lengths, malformed JSON, bad UTF-8, escapes and
 * surrogates, unknown dtypes and fields, bad integers, sizes that disagree with shapes,
 * gaps and overlaps in the data section, duplicate names. Each must fail with
 * -LOCKSTEP_EBADFILE, a message naming the problem, and an offset inside the file.
 * Runs under ASan and UBSan in the test command. */
#include <errno.h>
#include <stdint.h>

#include "lockstep/lockstep.h"
#include "../common/check.h"

/* header JSON + data bytes -> a file image (caller frees) */
static unsigned char *image(const char *json, size_t data, size_t *len)
{
    size_t n = strlen(json);
    *len = 8 + n + data;
    unsigned char *p = malloc(*len + 1);
    CHECK(p != NULL);
    uint64_t hl = n;
    memcpy(p, &hl, 8);
    memcpy(p + 8, json, n);
    for (size_t i = 0; i < data; i++)
        p[8 + n + i] = (unsigned char)i;
    return p;
}

#define VALID "{\"__metadata__\":{\"format\":\"pt\",\"note\":\"caf\\u00e9 \\ud83d\\ude00\"}," \
              "\"b\":{\"dtype\":\"BF16\",\"shape\":[2,3],\"data_offsets\":[16,28]}," \
              "\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}," \
              "\"s\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[28,36]}," \
              "\"e\":{\"dtype\":\"F16\",\"shape\":[0,5],\"data_offsets\":[36,36]}}    "

static const struct { const char *json; size_t data; const char *msg; } bad[] = {
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}", 4, "expected ','"},
    {"[1,2]", 0, "neither GGUF"},
    {"{\"a\" {}}", 0, "expected ':'"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},}", 4, "expected a string"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}} x", 4, "bytes after"},
    {"{\"\xc3\x28\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "UTF-8"},
    {"{\"a\\q\":{}}", 0, "bad escape"},
    {"{\"a\\udc00\":{}}", 0, "lone low surrogate"},
    {"{\"a\\ud800x\":{}}", 0, "high surrogate"},
    {"{\"a\":{\"dtype\":\"F33\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "unknown dtype"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, "non-negative integer"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", 4, "without fraction"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[01],\"data_offsets\":[0,4]}}", 4, "leading zero"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[99999999999999999999],\"data_offsets\":[0,4]}}", 4, "64 bits"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[[[[1]]]],\"data_offsets\":[0,4]}}", 4, "non-negative integer"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,16],\"data_offsets\":[0,4]}}", 4, "2^64"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4, "span 4"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "tile"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "tile"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 9, "cover 4 bytes"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "twice"},
    {"{\"__metadata__\":{},\"__metadata__\":{}}", 0, "twice"},
    {"{\"__metadata__\":{\"k\":1}}", 0, "must be strings"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":1}}", 4, "unexpected or repeated field"},
    {"{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4, "lacks its shape"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4, "more than 8"},
    {"{\"a\":{\"dtype\":\"F4\",\"shape\":[3],\"data_offsets\":[0,2]}}", 2, "whole bytes"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,4]}}", 4, "before it begins"},
};

int main(void)
{
    watchdog(120);
    size_t len;
    unsigned char *ok = image(VALID, 36, &len);
    lockstep_load_error_t err;
    lockstep_model_t *m = lockstep_model_parse(ok, len, &err);
    if (!m) {
        fprintf(stderr, "valid file rejected at %llu: %s\n", (unsigned long long)err.offset, err.message);
        return 1;
    }
    CHECK_EQ(lockstep_model_format(m), LOCKSTEP_FORMAT_SAFETENSORS);
    CHECK_EQ(lockstep_model_tensor_count(m), 4);
    CHECK_EQ(lockstep_model_meta_count(m), 2);
    CHECK(strcmp(lockstep_model_meta_find(m, "note")->value.v.s, "caf\xc3\xa9 \xf0\x9f\x98\x80") == 0);
    uint64_t data = len - 36;
    CHECK_EQ(lockstep_model_data_offset(m), data);
    const lockstep_tensor_info_t *b = lockstep_model_tensor_find(m, "b");
    CHECK(b && strcmp(b->type_name, "BF16") == 0 && b->n_dims == 2 && b->dims[1] == 3);
    CHECK_EQ(b->offset, data + 16);
    CHECK_EQ(b->size, 12);
    const lockstep_tensor_info_t *s = lockstep_model_tensor_find(m, "s");
    CHECK(s && s->n_dims == 0 && s->size == 8);
    const lockstep_tensor_info_t *e = lockstep_model_tensor_find(m, "e");
    CHECK(e && e->size == 0 && e->dims[0] == 0);
    lockstep_model_free(m);

    for (size_t n = 0; n < len; n++) {
        unsigned char *copy = malloc(n + 1);
        memcpy(copy, ok, n);
        m = lockstep_model_parse(copy, n, &err);
        if (m) {
            fprintf(stderr, "a file truncated to %zu of %zu bytes was accepted\n", n, len);
            return 1;
        }
        CHECK_EQ(err.code, -LOCKSTEP_EBADFILE);
        CHECK(err.offset <= n);
        free(copy);
    }

    for (unsigned i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        size_t blen;
        unsigned char *p = image(bad[i].json, bad[i].data, &blen);
        m = lockstep_model_parse(p, blen, &err);
        if (m || err.code != -LOCKSTEP_EBADFILE || !strstr(err.message, bad[i].msg) || err.offset > blen) {
            fprintf(stderr, "forgery %u: %s (code %d at %llu: \"%s\"; expected \"%s\")\n", i,
                    m ? "accepted" : "wrong error", err.code, (unsigned long long)err.offset, err.message, bad[i].msg);
            return 1;
        }
        free(p);
    }
    /* header lengths: over the format's limit, and past the end of the file */
    uint64_t huge = 200000000;
    memcpy(ok, &huge, 8);
    CHECK(lockstep_model_parse(ok, len, &err) == NULL && strstr(err.message, "100 MB"));
    huge = len;
    memcpy(ok, &huge, 8);
    CHECK(lockstep_model_parse(ok, len, &err) == NULL && strstr(err.message, "only") && err.offset == 0);
    free(ok);
    return 0;
}
