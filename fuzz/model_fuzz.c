/* libFuzzer target for the model readers (GGUF, safetensors: lockstep_model_parse picks
 * by the first bytes; each reader is run with its own seed corpus): parse arbitrary
 * bytes; when they parse, walk every metadata value and tensor so that any wrong
 * pointer or length is touched, and run the loader's value check (check.c) over every
 * tensor's bytes, as lockstep_load's check does.
 * Built and run by scripts/fuzz.sh (clang, ASan + UBSan). */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "lockstep/load.h"
#include "../src/load/load_impl.h"

static uint64_t sink;

static void walk(const lockstep_value_t *v)
{
    sink += v->type + v->count;
    if (v->type == LOCKSTEP_GGUF_STRING) {
        sink += strlen(v->v.s);
    } else if (v->type == LOCKSTEP_GGUF_ARRAY) {
        if (v->elem_type == LOCKSTEP_GGUF_STRING || v->elem_type == LOCKSTEP_GGUF_ARRAY) {
            for (uint64_t k = 0; k < v->count; k++)
                walk(&v->v.items[k]);
        } else if (v->count) {
            const unsigned char *p = v->v.raw;
            sink += p[0] + p[v->count - 1]; /* first and last byte of the first and last element */
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    lockstep_load_error_t err;
    lockstep_model_t *m = lockstep_model_parse(data, size, &err);
    if (!m) {
        if (err.offset > size)
            __builtin_trap(); /* an error must point inside the input */
        return 0;
    }
    for (size_t i = 0; i < lockstep_model_meta_count(m); i++) {
        const lockstep_meta_t *e = lockstep_model_meta(m, i);
        sink += strlen(e->key);
        walk(&e->value);
    }
    for (size_t i = 0; i < lockstep_model_tensor_count(m); i++) {
        const lockstep_tensor_info_t *t = lockstep_model_tensor(m, i);
        if (t->offset > size || t->size > size - t->offset)
            __builtin_trap(); /* a tensor the reader accepted must lie inside the input */
        if (t->size)
            sink += data[t->offset] + data[t->offset + t->size - 1];
        uint64_t where = 0;
        if (ls_check_bytes(t->type_name, data + t->offset, t->size, &where) && where >= t->size)
            __builtin_trap(); /* a bad value is reported inside its tensor */
    }
    lockstep_model_free(m);
    return 0;
}
