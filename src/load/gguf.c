/* GGUF reader (versions 2 and 3), for untrusted files.
 *
 * Layout: "GGUF" | u32 version | u64 n_tensors | u64 n_kv | n_kv x (string key,
 * u32 type, value) | n_tensors x (string name, u32 n_dims, n_dims x u64, u32 type,
 * u64 offset) | padding to general.alignment | tensor data. Strings are u64 length +
 * bytes; arrays are u32 element type + u64 count + elements; little-endian throughout.
 *
 * Hardening: the reader never trusts a count or a length. Before it allocates for n
 * items it checks that the bytes left could hold n of the smallest such item, so a
 * forged count cannot make it allocate more than a small multiple of the file's size;
 * every offset and size is computed with overflow checks; nesting is bounded; keys and
 * tensor names are bounded, valid UTF-8 and unique; tensors lie inside the file, are
 * aligned, and do not overlap. Every failure names the byte offset. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "load_impl.h"

#define GGUF_MAX_DIMS 4 /* GGML_MAX_DIMS */

/* ---- ggml tensor types: elements per block, bytes per block ------------------------ */

static const struct { uint32_t code; const char *name; uint32_t block, bytes; } ggml_types[] = {
    {0, "F32", 1, 4},        {1, "F16", 1, 2},        {2, "Q4_0", 32, 18},     {3, "Q4_1", 32, 20},
    {6, "Q5_0", 32, 22},     {7, "Q5_1", 32, 24},     {8, "Q8_0", 32, 34},     {9, "Q8_1", 32, 40},
    {10, "Q2_K", 256, 84},   {11, "Q3_K", 256, 110},  {12, "Q4_K", 256, 144},  {13, "Q5_K", 256, 176},
    {14, "Q6_K", 256, 210},  {15, "Q8_K", 256, 292},  {16, "IQ2_XXS", 256, 66}, {17, "IQ2_XS", 256, 74},
    {18, "IQ3_XXS", 256, 98}, {19, "IQ1_S", 256, 50}, {20, "IQ4_NL", 32, 18},  {21, "IQ3_S", 256, 110},
    {22, "IQ2_S", 256, 82},  {23, "IQ4_XS", 256, 136}, {24, "I8", 1, 1},       {25, "I16", 1, 2},
    {26, "I32", 1, 4},       {27, "I64", 1, 8},       {28, "F64", 1, 8},       {29, "IQ1_M", 256, 56},
    {30, "BF16", 1, 2},      {34, "TQ1_0", 256, 54},  {35, "TQ2_0", 256, 66},  {39, "MXFP4", 32, 17},
    {40, "NVFP4", 64, 36},   {41, "Q1_0", 128, 18},
};

static int ggml_type(uint32_t code)
{
    for (unsigned i = 0; i < sizeof ggml_types / sizeof ggml_types[0]; i++)
        if (ggml_types[i].code == code)
            return (int)i;
    return -1;
}

int ls_gguf_type_code(const char *name)
{
    for (unsigned i = 0; i < sizeof ggml_types / sizeof ggml_types[0]; i++)
        if (strcmp(ggml_types[i].name, name) == 0)
            return (int)ggml_types[i].code;
    return -1;
}

int ls_gguf_unit(uint32_t code, uint64_t *elems, uint64_t *bytes)
{
    int i = ggml_type(code);
    if (i < 0)
        return -1;
    *elems = ggml_types[i].block;
    *bytes = ggml_types[i].bytes;
    return 0;
}

/* ---- GGUF encodings ------------------------------------------------------------- */

static int u32(struct rd *r, uint32_t *v, const char *what)
{
    if (ls_need(r, 4, what))
        return -1;
    memcpy(v, r->p + r->pos, 4); /* little-endian hosts only (x86-64, aarch64) */
    r->pos += 4;
    return 0;
}

static int u64(struct rd *r, uint64_t *v, const char *what)
{
    if (ls_need(r, 8, what))
        return -1;
    memcpy(v, r->p + r->pos, 8);
    r->pos += 8;
    return 0;
}

/* A string, copied NUL-terminated into the arena. max = 0: only the file bounds it. */
static int str(struct rd *r, const char **out, uint64_t *len_out, uint64_t max, int utf8, const char *what)
{
    uint64_t at = r->pos, n;
    if (u64(r, &n, what) || ls_need(r, n, what))
        return -1;
    if (max && n > max)
        return ls_bad(r, at, "%s is %llu bytes long, more than %llu", what, (unsigned long long)n,
                   (unsigned long long)max);
    if (utf8 && !ls_utf8_valid(r->p + r->pos, n))
        return ls_bad(r, at, "%s is not valid UTF-8", what);
    char *s = ls_arena_alloc(r->m, (size_t)n + 1);
    if (!s) {
        r->nomem = 1;
        return -1;
    }
    memcpy(s, r->p + r->pos, (size_t)n);
    s[n] = 0;
    r->pos += n;
    *out = s;
    if (len_out)
        *len_out = n;
    return 0;
}

size_t lockstep_gguf_scalar_size(uint32_t t)
{
    switch (t) {
    case LOCKSTEP_GGUF_U8: case LOCKSTEP_GGUF_I8: case LOCKSTEP_GGUF_BOOL: return 1;
    case LOCKSTEP_GGUF_U16: case LOCKSTEP_GGUF_I16: return 2;
    case LOCKSTEP_GGUF_U32: case LOCKSTEP_GGUF_I32: case LOCKSTEP_GGUF_F32: return 4;
    case LOCKSTEP_GGUF_U64: case LOCKSTEP_GGUF_I64: case LOCKSTEP_GGUF_F64: return 8;
    default: return 0;
    }
}

static int value(struct rd *r, uint32_t type, int depth, lockstep_value_t *out)
{
    uint64_t at = r->pos;
    memset(out, 0, sizeof *out);
    out->type = type;
    uint64_t sz = lockstep_gguf_scalar_size(type);
    if (sz) {
        if (ls_need(r, sz, "a metadata value"))
            return -1;
        const unsigned char *p = r->p + r->pos;
        switch (type) {
        case LOCKSTEP_GGUF_U8: out->v.u = p[0]; break;
        case LOCKSTEP_GGUF_BOOL:
            if (p[0] > 1)
                return ls_bad(r, at, "a bool is %u, not 0 or 1", p[0]);
            out->v.u = p[0];
            break;
        case LOCKSTEP_GGUF_I8: out->v.i = (int8_t)p[0]; break;
        case LOCKSTEP_GGUF_U16: { uint16_t x; memcpy(&x, p, 2); out->v.u = x; break; }
        case LOCKSTEP_GGUF_I16: { int16_t x; memcpy(&x, p, 2); out->v.i = x; break; }
        case LOCKSTEP_GGUF_U32: { uint32_t x; memcpy(&x, p, 4); out->v.u = x; break; }
        case LOCKSTEP_GGUF_I32: { int32_t x; memcpy(&x, p, 4); out->v.i = x; break; }
        case LOCKSTEP_GGUF_F32: { float x; memcpy(&x, p, 4); out->v.f = x; break; }
        case LOCKSTEP_GGUF_U64: memcpy(&out->v.u, p, 8); break;
        case LOCKSTEP_GGUF_I64: memcpy(&out->v.i, p, 8); break;
        case LOCKSTEP_GGUF_F64: memcpy(&out->v.f, p, 8); break;
        }
        r->pos += sz;
        return 0;
    }
    if (type == LOCKSTEP_GGUF_STRING)
        return str(r, &out->v.s, &out->count, 0, 0, "a string value");
    if (type != LOCKSTEP_GGUF_ARRAY)
        return ls_bad(r, at, "unknown metadata value type %u", type);
    if (depth >= LOCKSTEP_MAX_NESTING)
        return ls_bad(r, at, "arrays nested deeper than %d", LOCKSTEP_MAX_NESTING);
    uint32_t et;
    uint64_t count;
    if (u32(r, &et, "an array's element type") || u64(r, &count, "an array's length"))
        return -1;
    out->elem_type = et;
    out->count = count;
    uint64_t esz = lockstep_gguf_scalar_size(et);
    if (esz) { /* numbers: point at them */
        if (count > (r->len - r->pos) / esz)
            return ls_bad(r, at, "an array of %llu %llu-byte elements does not fit in the %llu bytes left",
                       (unsigned long long)count, (unsigned long long)esz, (unsigned long long)(r->len - r->pos));
        if (et == LOCKSTEP_GGUF_BOOL)
            for (uint64_t k = 0; k < count; k++)
                if (r->p[r->pos + k] > 1)
                    return ls_bad(r, r->pos + k, "a bool is %u, not 0 or 1", r->p[r->pos + k]);
        out->v.raw = r->p + r->pos;
        r->pos += count * esz;
        return 0;
    }
    if (et != LOCKSTEP_GGUF_STRING && et != LOCKSTEP_GGUF_ARRAY)
        return ls_bad(r, at + 8, "unknown array element type %u", et);
    uint64_t min = et == LOCKSTEP_GGUF_STRING ? 8 : 12; /* the smallest element possible */
    if (count > (r->len - r->pos) / min)
        return ls_bad(r, at, "an array claims %llu elements; the %llu bytes left hold at most %llu",
                   (unsigned long long)count, (unsigned long long)(r->len - r->pos),
                   (unsigned long long)((r->len - r->pos) / min));
    lockstep_value_t *items = ls_arena_alloc(r->m, (size_t)count * sizeof *items);
    if (!items && count) {
        r->nomem = 1;
        return -1;
    }
    for (uint64_t k = 0; k < count; k++)
        if (value(r, et, depth + 1, &items[k]))
            return -1;
    out->v.items = items;
    return 0;
}

/* ---- the file ----------------------------------------------------------------------- */

int ls_parse_gguf(struct rd *r)
{
    lockstep_model_t *m = r->m;
    uint32_t version;
    if (ls_need(r, 4, "the magic"))
        return -1;
    if (memcmp(r->p, "GGUF", 4) != 0)
        return ls_bad(r, 0, "not a GGUF file (magic is not \"GGUF\")");
    r->pos = 4;
    if (u32(r, &version, "the version"))
        return -1;
    if (version != 2 && version != 3)
        return ls_bad(r, 4, "GGUF version %u is not supported (2 and 3 are)", version);
    m->version = version;
    uint64_t n_tensors, n_kv;
    if (u64(r, &n_tensors, "the tensor count") || u64(r, &n_kv, "the metadata count"))
        return -1;
    /* smallest key/value: 8-byte key length + 1-byte key + 4-byte type + 1-byte value */
    if (n_kv > (r->len - r->pos) / 14)
        return ls_bad(r, 16, "the file claims %llu metadata entries; it is too short for that many",
                   (unsigned long long)n_kv);
    if (!(m->meta = ls_calloc(r, n_kv, sizeof *m->meta)))
        return -1;
    m->alignment = 32;
    uint64_t *key_at = ls_calloc(r, n_kv, sizeof *key_at);
    const char **keys = ls_calloc(r, n_kv, sizeof *keys);
    if (!key_at || !keys) {
        free(key_at);
        free(keys);
        return -1;
    }
    int krc = -1;
    for (uint64_t k = 0; k < n_kv; k++) {
        lockstep_meta_t *e = &m->meta[k];
        uint64_t at = key_at[k] = r->pos, klen;
        uint32_t type;
        if (str(r, &e->key, &klen, LOCKSTEP_MAX_KEY, 1, "a metadata key"))
            goto kv_out;
        if (klen == 0) {
            ls_bad(r, at, "metadata entry %llu has an empty key", (unsigned long long)k);
            goto kv_out;
        }
        if (u32(r, &type, "a metadata type") || value(r, type, 0, &e->value))
            goto kv_out;
        m->n_meta = (size_t)k + 1;
        if (strcmp(e->key, "general.alignment") == 0) {
            if (type != LOCKSTEP_GGUF_U32) {
                ls_bad(r, at, "general.alignment must be a u32, not type %u", type);
                goto kv_out;
            }
            uint64_t a = e->value.v.u;
            if (a == 0 || (a & (a - 1)) != 0) {
                ls_bad(r, at, "general.alignment is %llu, not a power of two", (unsigned long long)a);
                goto kv_out;
            }
            m->alignment = a;
        }
    }

    for (uint64_t k = 0; k < n_kv; k++)
        keys[k] = m->meta[k].key;
    krc = ls_check_unique(r, keys, key_at, (size_t)n_kv, "metadata key");
kv_out:
    free(key_at);
    free(keys);
    if (krc)
        return -1;

    /* smallest tensor info: 8-byte name length + 1 byte + u32 n_dims + u32 type + u64 offset */
    if (n_tensors > (r->len - r->pos) / 25)
        return ls_bad(r, 8, "the file claims %llu tensors; it is too short for that many",
                   (unsigned long long)n_tensors);
    if (!(m->tensors = ls_calloc(r, n_tensors, sizeof *m->tensors)))
        return -1;
    uint64_t *info_at = ls_calloc(r, n_tensors, sizeof *info_at);
    if (!info_at)
        return -1;
    int rc = -1;
    for (uint64_t k = 0; k < n_tensors; k++) {
        lockstep_tensor_info_t *t = &m->tensors[k];
        uint64_t at = info_at[k] = r->pos, nlen;
        if (str(r, &t->name, &nlen, LOCKSTEP_MAX_TENSOR_NAME, 1, "a tensor name"))
            goto out;
        if (nlen == 0) {
            ls_bad(r, at, "tensor %llu has an empty name", (unsigned long long)k);
            goto out;
        }
        if (u32(r, &t->n_dims, "a tensor's dimension count"))
            goto out;
        if (t->n_dims > GGUF_MAX_DIMS) {
            ls_bad(r, r->pos - 4, "tensor \"%s\" has %u dimensions, more than %d", t->name, t->n_dims, GGUF_MAX_DIMS);
            goto out;
        }
        uint64_t elems = 1;
        for (uint32_t d = 0; d < t->n_dims; d++) {
            if (u64(r, &t->dims[d], "a tensor dimension"))
                goto out;
            if (t->dims[d] > (uint64_t)INT64_MAX || (t->dims[d] && elems > (uint64_t)INT64_MAX / t->dims[d])) {
                ls_bad(r, r->pos - 8, "tensor \"%s\" has more than 2^63 elements", t->name);
                goto out;
            }
            elems *= t->dims[d];
        }
        uint32_t type;
        if (u32(r, &type, "a tensor type"))
            goto out;
        int ti = ggml_type(type);
        if (ti < 0) {
            ls_bad(r, r->pos - 4, "tensor \"%s\" has unknown type %u", t->name, type);
            goto out;
        }
        t->type = type;
        t->type_name = ggml_types[ti].name;
        uint64_t block = ggml_types[ti].block;
        if (t->n_dims > 0 && t->dims[0] % block != 0) {
            ls_bad(r, at, "tensor \"%s\" (%s) has %llu columns, not a multiple of the %llu-element block",
                t->name, t->type_name, (unsigned long long)t->dims[0], (unsigned long long)block);
            goto out;
        }
        if (t->n_dims == 0 && block != 1) {
            ls_bad(r, at, "tensor \"%s\" is 0-d but its type %s packs %llu elements per block",
                t->name, t->type_name, (unsigned long long)block);
            goto out;
        }
        uint64_t nblocks = elems / block;
        if (nblocks > UINT64_MAX / ggml_types[ti].bytes) {
            ls_bad(r, at, "tensor \"%s\" is larger than 2^64 bytes", t->name);
            goto out;
        }
        t->size = nblocks * ggml_types[ti].bytes;
        if (u64(r, &t->offset, "a tensor offset"))
            goto out;
        if (t->offset % m->alignment != 0) {
            ls_bad(r, r->pos - 8, "tensor \"%s\" offset %llu is not a multiple of the alignment %llu",
                t->name, (unsigned long long)t->offset, (unsigned long long)m->alignment);
            goto out;
        }
        m->n_tensors = (size_t)k + 1;
    }
    {
        const char **names = ls_calloc(r, n_tensors, sizeof *names);
        if (!names)
            goto out;
        for (uint64_t k = 0; k < n_tensors; k++)
            names[k] = m->tensors[k].name;
        int urc = ls_check_unique(r, names, info_at, (size_t)n_tensors, "tensor name");
        free(names);
        if (urc)
            goto out;
    }
    /* data begins at the next multiple of the alignment */
    uint64_t pad = (m->alignment - r->pos % m->alignment) % m->alignment;
    if (pad > r->len - r->pos && n_tensors > 0) {
        ls_bad(r, r->pos, "truncated: the padding before the tensor data is missing");
        goto out;
    }
    m->data_offset = r->pos + pad;
    uint64_t data_len = r->len >= m->data_offset ? r->len - m->data_offset : 0;
    for (uint64_t k = 0; k < n_tensors; k++) {
        lockstep_tensor_info_t *t = &m->tensors[k];
        if (t->offset > data_len || t->size > data_len - t->offset) {
            ls_bad(r, info_at[k], "tensor \"%s\" (%llu bytes at data offset %llu) ends past the end of the file "
                "(%llu bytes of data)", t->name, (unsigned long long)t->size, (unsigned long long)t->offset,
                (unsigned long long)data_len);
            goto out;
        }
        t->offset += m->data_offset; /* absolute from here on */
    }
    /* no two tensors share a byte */
    if (ls_check_overlap(r, info_at))
        goto out;
    rc = 0;
out:
    free(info_at);
    return rc;
}

