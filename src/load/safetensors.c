/* Safetensors reader, for untrusted files.
 *
 * Layout: u64 little-endian N | N bytes of JSON | the data section. The JSON is one
 * object mapping tensor names to {"dtype": S, "shape": [n, ...], "data_offsets":
 * [begin, end]} (offsets relative to the data section), plus optionally
 * "__metadata__": {string: string}.
 *
 * The JSON is read by a recursive-descent parser made for exactly that shape, so its
 * depth is fixed (three levels) and anything else is an error: only the three fields,
 * each once; integers without sign, fraction or exponent, checked for overflow;
 * strings valid UTF-8 with valid escapes (surrogates paired). Beyond the JSON: N at most
 * 100 MB (the reference reader's limit) and inside the file; names unique; every dtype
 * known; shape x dtype size equals end - begin (overflow-safe, sub-byte dtypes whole
 * bytes); and the entries tile the data section exactly: sorted by offset, the first
 * starts at 0, each starts where the previous one ended, the last ends at the end of
 * the file. Every failure names the byte offset. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "load_impl.h"

#define ST_MAX_HEADER 100000000ull
#define ST_MAX_NAME 4096

static const struct { const char *name; unsigned bits; } st_dtypes[] = {
    {"BOOL", 8},     {"U8", 8},        {"I8", 8},        {"F8_E5M2", 8},  {"F8_E4M3", 8},
    {"F8_E8M0", 8},  {"I16", 16},      {"U16", 16},      {"F16", 16},     {"BF16", 16},
    {"I32", 32},     {"U32", 32},      {"F32", 32},      {"I64", 64},     {"U64", 64},
    {"F64", 64},     {"C64", 64},      {"F4", 4},        {"F6_E2M3", 6},  {"F6_E3M2", 6},
};

static int st_dtype(const char *s)
{
    for (unsigned i = 0; i < sizeof st_dtypes / sizeof st_dtypes[0]; i++)
        if (strcmp(st_dtypes[i].name, s) == 0)
            return (int)i;
    return -1;
}

int ls_st_type_code(const char *name)
{
    return st_dtype(name);
}

int ls_st_unit(uint32_t type, uint64_t *elems, uint64_t *bytes)
{
    if (type >= sizeof st_dtypes / sizeof st_dtypes[0])
        return -1;
    unsigned bits = st_dtypes[type].bits, e = 1;
    while (e * bits % 8)
        e++; /* the fewest elements that fill whole bytes: F4 2, F6 4 */
    *elems = e;
    *bytes = e * bits / 8;
    return 0;
}

/* ---- the JSON subset ------------------------------------------------------------------ */

static int peek(struct rd *r, uint64_t end)
{
    while (r->pos < end && (r->p[r->pos] == ' ' || r->p[r->pos] == '\t' || r->p[r->pos] == '\n' ||
                            r->p[r->pos] == '\r'))
        r->pos++;
    return r->pos < end ? r->p[r->pos] : -1;
}

/* What follows an object's member: ',' (0: another member) or '}' (1: the object ends);
 * anything else fails as "expected ',' or '}' <where>[ "<name>"]" (-1). */
static int member_end(struct rd *r, uint64_t end, const char *where, const char *name)
{
    int c = peek(r, end);
    r->pos++;
    if (c == '}')
        return 1;
    if (c == ',')
        return 0;
    return name ? ls_bad(r, r->pos - 1, "expected ',' or '}' %s \"%s\"", where, name)
                : ls_bad(r, r->pos - 1, "expected ',' or '}' %s", where);
}

static int expect(struct rd *r, uint64_t end, char c, const char *where)
{
    if (peek(r, end) != c)
        return ls_bad(r, r->pos, "expected '%c' %s", c, where);
    r->pos++;
    return 0;
}

static int hex4(const unsigned char *p, uint32_t *v)
{
    *v = 0;
    for (int i = 0; i < 4; i++) {
        unsigned c = p[i], d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 :
                               c >= 'A' && c <= 'F' ? c - 'A' + 10 : 16;
        if (d > 15)
            return -1;
        *v = *v << 4 | d;
    }
    return 0;
}

/* A JSON string, decoded NUL-terminated into the arena. */
static int jstring(struct rd *r, uint64_t end, const char **out, uint64_t *len_out, uint64_t max, const char *what)
{
    if (peek(r, end) != '"')
        return ls_bad(r, r->pos, "expected a string (%s)", what);
    uint64_t start = ++r->pos, q = start;
    while (q < end && r->p[q] != '"') /* find the closing quote, stepping over escapes */
        q += r->p[q] == '\\' ? 2 : 1;
    if (q >= end)
        return ls_bad(r, start - 1, "unterminated string (%s)", what);
    if (q - start > max)
        return ls_bad(r, start - 1, "%s is longer than %llu bytes", what, (unsigned long long)max);
    unsigned char *o = ls_arena_alloc(r->m, (size_t)(q - start) + 1);
    if (!o) {
        r->nomem = 1;
        return -1;
    }
    uint64_t n = 0;
    for (uint64_t i = start; i < q;) {
        unsigned c = r->p[i];
        if (c < 0x20)
            return ls_bad(r, i, "a control character inside a string (%s)", what);
        if (c != '\\') {
            o[n++] = (unsigned char)c;
            i++;
            continue;
        }
        unsigned e = r->p[i + 1];
        const char *simple = strchr("\"\\/bfnrt", (int)e);
        if (e && simple) {
            static const char map[] = "\"\\/\b\f\n\r\t";
            o[n++] = (unsigned char)map[simple - "\"\\/bfnrt"];
            i += 2;
            continue;
        }
        uint32_t cp, lo;
        if (e != 'u' || q - i < 6 || hex4(r->p + i + 2, &cp))
            return ls_bad(r, i, "a bad escape sequence in a string (%s)", what);
        i += 6;
        if (cp >= 0xdc00 && cp <= 0xdfff)
            return ls_bad(r, i - 6, "a lone low surrogate in a string (%s)", what);
        if (cp >= 0xd800 && cp <= 0xdbff) {
            if (q - i < 6 || r->p[i] != '\\' || r->p[i + 1] != 'u' || hex4(r->p + i + 2, &lo) ||
                lo < 0xdc00 || lo > 0xdfff)
                return ls_bad(r, i - 6, "a high surrogate without its low half (%s)", what);
            cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
            i += 6;
        }
        if (cp < 0x80) {
            o[n++] = (unsigned char)cp;
        } else if (cp < 0x800) {
            o[n++] = (unsigned char)(0xc0 | cp >> 6);
            o[n++] = (unsigned char)(0x80 | (cp & 0x3f));
        } else if (cp < 0x10000) {
            o[n++] = (unsigned char)(0xe0 | cp >> 12);
            o[n++] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
            o[n++] = (unsigned char)(0x80 | (cp & 0x3f));
        } else {
            o[n++] = (unsigned char)(0xf0 | cp >> 18);
            o[n++] = (unsigned char)(0x80 | ((cp >> 12) & 0x3f));
            o[n++] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
            o[n++] = (unsigned char)(0x80 | (cp & 0x3f));
        }
    }
    if (!ls_utf8_valid(o, n))
        return ls_bad(r, start - 1, "%s is not valid UTF-8", what);
    o[n] = 0;
    r->pos = q + 1;
    *out = (const char *)o;
    if (len_out)
        *len_out = n;
    return 0;
}

/* A JSON number that is a non-negative integer fitting 64 bits. */
static int juint(struct rd *r, uint64_t end, uint64_t *out, const char *what)
{
    int c = peek(r, end);
    uint64_t at = r->pos, v = 0;
    if (c < '0' || c > '9')
        return ls_bad(r, at, "%s must be a non-negative integer", what);
    if (c == '0' && r->pos + 1 < end && r->p[r->pos + 1] >= '0' && r->p[r->pos + 1] <= '9')
        return ls_bad(r, at, "%s has a leading zero", what);
    while (r->pos < end && r->p[r->pos] >= '0' && r->p[r->pos] <= '9') {
        unsigned d = r->p[r->pos] - '0';
        if (v > (UINT64_MAX - d) / 10)
            return ls_bad(r, at, "%s does not fit in 64 bits", what);
        v = v * 10 + d;
        r->pos++;
    }
    if (r->pos < end && (r->p[r->pos] == '.' || r->p[r->pos] == 'e' || r->p[r->pos] == 'E'))
        return ls_bad(r, at, "%s must be an integer, without fraction or exponent", what);
    *out = v;
    return 0;
}

/* ---- the file -------------------------------------------------------------------------- */

static int grow(lockstep_model_t *m, size_t *cap, int tensors)
{
    size_t n = *cap ? *cap * 2 : 16;
    void *p = tensors ? realloc(m->tensors, n * sizeof *m->tensors) : realloc(m->meta, n * sizeof *m->meta);
    if (!p)
        return -1;
    if (tensors)
        m->tensors = p;
    else
        m->meta = p;
    *cap = n;
    return 0;
}

static int tensor_entry(struct rd *r, uint64_t end, lockstep_tensor_info_t *t, uint64_t *begin, uint64_t *stop)
{
    int have_dtype = 0, have_shape = 0, have_offsets = 0;
    uint64_t at = r->pos;
    if (expect(r, end, '{', "to open a tensor entry"))
        return -1;
    if (peek(r, end) == '}')
        return ls_bad(r, at, "tensor \"%s\" has no fields", t->name);
    for (;;) {
        const char *field;
        uint64_t fat = r->pos;
        if (jstring(r, end, &field, NULL, 64, "a field name") || expect(r, end, ':', "after a field name"))
            return -1;
        if (strcmp(field, "dtype") == 0 && !have_dtype) {
            const char *dt;
            uint64_t dat = r->pos;
            if (jstring(r, end, &dt, NULL, 64, "a dtype"))
                return -1;
            int i = st_dtype(dt);
            if (i < 0)
                return ls_bad(r, dat, "tensor \"%s\" has unknown dtype \"%s\"", t->name, dt);
            t->type = (uint32_t)i;
            t->type_name = st_dtypes[i].name;
            have_dtype = 1;
        } else if (strcmp(field, "shape") == 0 && !have_shape) {
            if (expect(r, end, '[', "to open a shape"))
                return -1;
            if (peek(r, end) != ']')
                for (;;) {
                    if (t->n_dims == LOCKSTEP_MAX_DIMS)
                        return ls_bad(r, r->pos, "tensor \"%s\" has more than %d dimensions", t->name, LOCKSTEP_MAX_DIMS);
                    if (juint(r, end, &t->dims[t->n_dims++], "a dimension"))
                        return -1;
                    if (peek(r, end) == ']')
                        break;
                    if (expect(r, end, ',', "between dimensions"))
                        return -1;
                }
            r->pos++;
            have_shape = 1;
        } else if (strcmp(field, "data_offsets") == 0 && !have_offsets) {
            if (expect(r, end, '[', "to open data_offsets") || juint(r, end, begin, "an offset") ||
                expect(r, end, ',', "between the two offsets") || juint(r, end, stop, "an offset") ||
                expect(r, end, ']', "after the two offsets"))
                return -1;
            if (*begin > *stop)
                return ls_bad(r, fat, "tensor \"%s\" ends (%llu) before it begins (%llu)", t->name,
                              (unsigned long long)*stop, (unsigned long long)*begin);
            have_offsets = 1;
        } else {
            return ls_bad(r, fat, "tensor \"%s\" has an unexpected or repeated field \"%s\"", t->name, field);
        }
        int done = member_end(r, end, "in tensor", t->name);
        if (done < 0)
            return -1;
        if (done)
            break;
    }
    if (!have_dtype || !have_shape || !have_offsets)
        return ls_bad(r, at, "tensor \"%s\" lacks its %s", t->name,
                      !have_dtype ? "dtype" : !have_shape ? "shape" : "data_offsets");
    return 0;
}

int ls_parse_safetensors(struct rd *r)
{
    lockstep_model_t *m = r->m;
    uint64_t n;
    memcpy(&n, r->p, 8);
    if (n > ST_MAX_HEADER)
        return ls_bad(r, 0, "the header claims %llu bytes, more than the format's 100 MB limit", (unsigned long long)n);
    if (n > r->len - 8)
        return ls_bad(r, 0, "the header claims %llu bytes; only %llu follow", (unsigned long long)n,
                      (unsigned long long)(r->len - 8));
    uint64_t end = 8 + n;
    r->pos = 8;
    if (expect(r, end, '{', "to open the header"))
        return -1;
    size_t tcap = 0, mcap = 0;
    uint64_t *spans = NULL, *info_at = NULL; /* per tensor: begin, end; where declared */
    size_t scap = 0;
    int seen_meta = 0, rc = -1;
    if (peek(r, end) == '}') {
        r->pos++;
    } else {
        for (;;) {
            const char *key;
            uint64_t kat = r->pos, klen;
            if (jstring(r, end, &key, &klen, ST_MAX_NAME, "a tensor name") || expect(r, end, ':', "after a name"))
                goto out;
            if (klen == 0 || strlen(key) != klen) {
                ls_bad(r, kat, "a tensor name is empty or contains NUL");
                goto out;
            }
            if (strcmp(key, "__metadata__") == 0) {
                if (seen_meta++) {
                    ls_bad(r, kat, "__metadata__ appears twice");
                    goto out;
                }
                if (expect(r, end, '{', "to open __metadata__"))
                    goto out;
                if (peek(r, end) == '}') {
                    r->pos++;
                } else {
                    for (;;) {
                        if (m->n_meta == mcap && grow(m, &mcap, 0)) {
                            r->nomem = 1;
                            goto out;
                        }
                        lockstep_meta_t *e = &m->meta[m->n_meta];
                        memset(e, 0, sizeof *e);
                        uint64_t mat = r->pos;
                        if (jstring(r, end, &e->key, NULL, ST_MAX_NAME, "a metadata key") ||
                            expect(r, end, ':', "after a metadata key"))
                            goto out;
                        e->value.type = LOCKSTEP_GGUF_STRING;
                        if (peek(r, end) != '"') {
                            ls_bad(r, r->pos, "__metadata__ values must be strings (key \"%s\")", e->key);
                            goto out;
                        }
                        if (jstring(r, end, &e->value.v.s, &e->value.count, UINT64_MAX, "a metadata value"))
                            goto out;
                        for (size_t j = 0; j < m->n_meta; j++)
                            if (strcmp(m->meta[j].key, e->key) == 0) {
                                ls_bad(r, mat, "metadata key \"%s\" appears twice", e->key);
                                goto out;
                            }
                        m->n_meta++;
                        int done = member_end(r, end, "in __metadata__", NULL);
                        if (done < 0)
                            goto out;
                        if (done)
                            break;
                    }
                }
            } else {
                if (m->n_tensors == tcap && grow(m, &tcap, 1)) {
                    r->nomem = 1;
                    goto out;
                }
                if (m->n_tensors >= scap) {
                    size_t ns = scap ? scap * 2 : 16;
                    uint64_t *s2 = realloc(spans, ns * 2 * sizeof *spans), *a2 = realloc(info_at, ns * sizeof *info_at);
                    if (s2)
                        spans = s2;
                    if (a2)
                        info_at = a2;
                    if (!s2 || !a2) {
                        r->nomem = 1;
                        goto out;
                    }
                    scap = ns;
                }
                lockstep_tensor_info_t *t = &m->tensors[m->n_tensors];
                memset(t, 0, sizeof *t);
                t->name = key;
                info_at[m->n_tensors] = kat;
                if (tensor_entry(r, end, t, &spans[2 * m->n_tensors], &spans[2 * m->n_tensors + 1]))
                    goto out;
                m->n_tensors++;
            }
            int done = member_end(r, end, "between entries", NULL);
            if (done < 0)
                goto out;
            if (done)
                break;
        }
    }
    if (peek(r, end) != -1) {
        ls_bad(r, r->pos, "bytes after the header's JSON object (only spaces may pad it)");
        goto out;
    }
    m->data_offset = end;
    m->alignment = 1;
    uint64_t data_len = r->len - end;
    size_t nt = m->n_tensors, *idx = NULL;
    const char **names = ls_calloc(r, nt, sizeof *names);
    if (!names)
        goto out;
    for (size_t k = 0; k < nt; k++) {
        lockstep_tensor_info_t *t = &m->tensors[k];
        uint64_t elems = 1, bits = st_dtypes[t->type].bits;
        for (uint32_t d = 0; d < t->n_dims; d++) {
            if (t->dims[d] && elems > UINT64_MAX / t->dims[d]) {
                ls_bad(r, info_at[k], "tensor \"%s\" has more than 2^64 elements", t->name);
                goto out_idx;
            }
            elems *= t->dims[d];
        }
        if (elems > UINT64_MAX / bits || (elems * bits) % 8) {
            ls_bad(r, info_at[k], "tensor \"%s\" (%s) does not fill whole bytes or overflows", t->name, t->type_name);
            goto out_idx;
        }
        uint64_t size = elems * bits / 8, b = spans[2 * k], e = spans[2 * k + 1];
        if (e - b != size) {
            ls_bad(r, info_at[k], "tensor \"%s\": %s of this shape is %llu bytes, but its data_offsets span %llu",
                   t->name, t->type_name, (unsigned long long)size, (unsigned long long)(e - b));
            goto out_idx;
        }
        t->offset = b; /* relative while checking the tiling */
        t->size = size;
        names[k] = t->name;
    }
    if (ls_check_unique(r, names, info_at, nt, "tensor name"))
        goto out_idx;
    /* the entries tile the data section exactly */
    idx = ls_sorted_index(r, nt, ls_cmp_offsets, m->tensors);
    if (!idx)
        goto out_idx;
    uint64_t expect_at = 0;
    for (size_t i = 0; i < nt; i++) {
        const lockstep_tensor_info_t *t = &m->tensors[idx[i]];
        uint64_t b = spans[2 * idx[i]], e = spans[2 * idx[i] + 1];
        if (b != expect_at) {
            ls_bad(r, info_at[idx[i]], "tensor \"%s\" starts at data offset %llu, but the data so far ends at %llu "
                   "(entries must tile the data section)", t->name, (unsigned long long)b, (unsigned long long)expect_at);
            goto out_idx;
        }
        expect_at = e;
    }
    if (expect_at != data_len) {
        ls_bad(r, end, "the tensors cover %llu bytes of data, but the file has %llu after the header",
               (unsigned long long)expect_at, (unsigned long long)data_len);
        goto out_idx;
    }
    for (size_t k = 0; k < nt; k++)
        m->tensors[k].offset += end; /* absolute from here on */
    rc = 0;
out_idx:
    free(idx);
    free(names);
out:
    free(spans);
    free(info_at);
    return rc;
}
