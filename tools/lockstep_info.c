/* lockstep-info FILE [--json]: a model file's (GGUF or safetensors) header, metadata and tensor table, as
 * read by lockstep's hardened reader. A bad file prints the reader's error with its
 * byte offset and exits 1. `lockstep info FILE` runs this. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "lockstep/lockstep.h"

static void json_str(const char *s, uint64_t n)
{
    putchar('"');
    for (uint64_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '"' || ch == '\\')
            printf("\\%c", ch);
        else if (ch < 0x20 || ch == 0x7f)
            printf("\\u%04x", ch);
        else
            putchar(ch); /* bytes >= 0x80 pass through: keys and names are valid UTF-8 */
    }
    putchar('"');
}

static void scalar_at(uint32_t t, const unsigned char *p)
{
    switch (t) {
    case LOCKSTEP_GGUF_U8: printf("%u", p[0]); break;
    case LOCKSTEP_GGUF_I8: printf("%d", (int8_t)p[0]); break;
    case LOCKSTEP_GGUF_BOOL: printf(p[0] ? "true" : "false"); break;
    case LOCKSTEP_GGUF_U16: { uint16_t x; memcpy(&x, p, 2); printf("%u", x); break; }
    case LOCKSTEP_GGUF_I16: { int16_t x; memcpy(&x, p, 2); printf("%d", x); break; }
    case LOCKSTEP_GGUF_U32: { uint32_t x; memcpy(&x, p, 4); printf("%" PRIu32, x); break; }
    case LOCKSTEP_GGUF_I32: { int32_t x; memcpy(&x, p, 4); printf("%" PRId32, x); break; }
    case LOCKSTEP_GGUF_F32: { float x; memcpy(&x, p, 4); printf("%.9g", x); break; }
    case LOCKSTEP_GGUF_U64: { uint64_t x; memcpy(&x, p, 8); printf("%" PRIu64, x); break; }
    case LOCKSTEP_GGUF_I64: { int64_t x; memcpy(&x, p, 8); printf("%" PRId64, x); break; }
    case LOCKSTEP_GGUF_F64: { double x; memcpy(&x, p, 8); printf("%.17g", x); break; }
    }
}

/* JSON for a value; in text mode arrays longer than `limit` are cut. */
static void value(const lockstep_value_t *v, uint64_t limit)
{
    if (v->type == LOCKSTEP_GGUF_STRING) {
        json_str(v->v.s, v->count);
        return;
    }
    if (v->type != LOCKSTEP_GGUF_ARRAY) {
        switch (v->type) {
        case LOCKSTEP_GGUF_U8: case LOCKSTEP_GGUF_U16: case LOCKSTEP_GGUF_U32: case LOCKSTEP_GGUF_U64:
            printf("%" PRIu64, v->v.u); break;
        case LOCKSTEP_GGUF_BOOL: printf(v->v.u ? "true" : "false"); break;
        case LOCKSTEP_GGUF_F32: printf("%.9g", v->v.f); break;
        case LOCKSTEP_GGUF_F64: printf("%.17g", v->v.f); break;
        default: printf("%" PRId64, v->v.i); break;
        }
        return;
    }
    putchar('[');
    uint64_t shown = v->count < limit ? v->count : limit;
    for (uint64_t k = 0; k < shown; k++) {
        if (k)
            printf(", ");
        if (v->elem_type == LOCKSTEP_GGUF_STRING || v->elem_type == LOCKSTEP_GGUF_ARRAY)
            value(&v->v.items[k], limit);
        else
            scalar_at(v->elem_type, (const unsigned char *)v->v.raw + k * lockstep_gguf_scalar_size(v->elem_type));
    }
    if (shown < v->count)
        printf(", ... (%" PRIu64 " more)", v->count - shown);
    putchar(']');
}

int main(int argc, char **argv)
{
    const char *path = NULL;
    int json = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0)
            json = 1;
        else
            path = argv[i];
    }
    if (!path) {
        fprintf(stderr, "usage: %s FILE [--json]\n", argv[0]);
        return 2;
    }
    lockstep_load_error_t err;
    lockstep_model_t *m = lockstep_model_open(path, &err);
    if (!m) {
        if (err.code == -LOCKSTEP_EBADFILE)
            fprintf(stderr, "%s: bad model file at byte %" PRIu64 ": %s\n", path, err.offset, err.message);
        else
            fprintf(stderr, "%s: %s\n", path, err.message[0] ? err.message : lockstep_strerror(err.code));
        return 1;
    }
    size_t nm = lockstep_model_meta_count(m), nt = lockstep_model_tensor_count(m);
    const char *fmt = lockstep_model_format(m) == LOCKSTEP_FORMAT_GGUF ? "gguf" : "safetensors";
    if (json) {
        printf("{\"format\": \"%s\", \"version\": %u, \"alignment\": %" PRIu64 ", \"data_offset\": %" PRIu64 ", \"metadata\": {",
               fmt, lockstep_model_version(m), lockstep_model_alignment(m), lockstep_model_data_offset(m));
        for (size_t i = 0; i < nm; i++) {
            const lockstep_meta_t *e = lockstep_model_meta(m, i);
            printf("%s", i ? ", " : "");
            json_str(e->key, strlen(e->key));
            printf(": {\"type\": %u, \"value\": ", e->value.type);
            value(&e->value, UINT64_MAX);
            putchar('}');
        }
        printf("}, \"tensors\": [");
        for (size_t i = 0; i < nt; i++) {
            const lockstep_tensor_info_t *t = lockstep_model_tensor(m, i);
            printf("%s{\"name\": ", i ? ", " : "");
            json_str(t->name, strlen(t->name));
            printf(", \"type\": \"%s\", \"dims\": [", t->type_name);
            for (uint32_t d = 0; d < t->n_dims; d++)
                printf("%s%" PRIu64, d ? ", " : "", t->dims[d]);
            printf("], \"offset\": %" PRIu64 ", \"size\": %" PRIu64 "}", t->offset, t->size);
        }
        printf("]}\n");
    } else {
        printf("%s v%u, alignment %" PRIu64 ", data at byte %" PRIu64 ", %zu metadata entries, %zu tensors\n\n",
               fmt, lockstep_model_version(m), lockstep_model_alignment(m), lockstep_model_data_offset(m), nm, nt);
        for (size_t i = 0; i < nm; i++) {
            const lockstep_meta_t *e = lockstep_model_meta(m, i);
            printf("  %-40s ", e->key);
            value(&e->value, 8);
            putchar('\n');
        }
        printf("\n  %-40s %-8s %-24s %14s %12s\n", "tensor", "type", "shape", "offset", "bytes");
        for (size_t i = 0; i < nt; i++) {
            const lockstep_tensor_info_t *t = lockstep_model_tensor(m, i);
            char shape[64] = "[]";
            int n = 0;
            for (uint32_t d = 0; d < t->n_dims && n < 60; d++)
                n += snprintf(shape + n, sizeof shape - (size_t)n, "%s%" PRIu64, d ? "x" : "", t->dims[d]);
            printf("  %-40s %-8s %-24s %14" PRIu64 " %12" PRIu64 "\n", t->name, t->type_name, shape, t->offset, t->size);
        }
    }
    lockstep_model_free(m);
    return 0;
}
