/* The GGUF reader on a valid file and on hostile ones: every prefix of a valid file
 * (truncation at every byte), forged counts and lengths, deep nesting, bad types,
 * overflowing dimensions, misaligned, out-of-file and overlapping tensors, duplicate
 * names and keys, bad UTF-8, a bad alignment. Each must fail with -LOCKSTEP_EBADFILE,
 * a message naming the problem, and an offset inside the file; none may crash (this
 * test runs under ASan and UBSan in the test command). */
#include <errno.h>
#include <stdint.h>

#include "lockstep/lockstep.h"
#include "../common/check.h"

/* ---- a tiny GGUF writer ------------------------------------------------------------ */

struct buf { unsigned char *p; size_t len, cap; };

static void put(struct buf *b, const void *d, size_t n)
{
    if (b->len + n > b->cap) {
        b->cap = (b->len + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        CHECK(b->p != NULL);
    }
    memcpy(b->p + b->len, d, n);
    b->len += n;
}
static void u32(struct buf *b, uint32_t v) { put(b, &v, 4); }
static void u64(struct buf *b, uint64_t v) { put(b, &v, 8); }
static void str(struct buf *b, const char *s) { u64(b, strlen(s)); put(b, s, strlen(s)); }
static void pad_to(struct buf *b, size_t a) { while (b->len % a) put(b, "", 1); }

/* What to forge in the otherwise valid file. */
enum forge {
    F_NONE, F_MAGIC, F_VERSION, F_KV_COUNT, F_TENSOR_COUNT, F_STRLEN, F_ARRAY_COUNT, F_NESTING,
    F_VALUE_TYPE, F_TENSOR_TYPE, F_NDIMS, F_DIM_OVERFLOW, F_MISALIGNED, F_OUT_OF_FILE, F_OVERLAP,
    F_DUP_TENSOR, F_DUP_KEY, F_BAD_UTF8, F_ALIGN_NOT_POW2, F_ALIGN_TYPE, F_BOOL, F_BLOCK,
    F_LONG_NAME, F_EMPTY_KEY, F_COUNT
};

static struct buf make(enum forge f)
{
    struct buf b = {0};
    put(&b, f == F_MAGIC ? "GGUX" : "GGUF", 4);
    u32(&b, f == F_VERSION ? 7 : 3);
    u64(&b, f == F_TENSOR_COUNT ? (1ull << 60) : 3);  /* tensors */
    u64(&b, f == F_KV_COUNT ? (1ull << 62) : 6);      /* metadata */
    /* 1: general.alignment */
    str(&b, "general.alignment");
    u32(&b, f == F_ALIGN_TYPE ? LOCKSTEP_GGUF_U64 : LOCKSTEP_GGUF_U32);
    if (f == F_ALIGN_TYPE)
        u64(&b, 64);
    else
        u32(&b, f == F_ALIGN_NOT_POW2 ? 48 : 64);
    /* 2: a string */
    str(&b, f == F_BAD_UTF8 ? "general.\xc3\x28name" : f == F_EMPTY_KEY ? "" : "general.name");
    u32(&b, LOCKSTEP_GGUF_STRING);
    if (f == F_STRLEN) {
        u64(&b, 1ull << 40);
        put(&b, "x", 1);
    } else {
        str(&b, "tiny");
    }
    /* 3: an array of strings */
    str(&b, "tokenizer.tokens");
    u32(&b, LOCKSTEP_GGUF_ARRAY);
    u32(&b, LOCKSTEP_GGUF_STRING);
    u64(&b, f == F_ARRAY_COUNT ? (1ull << 59) : 3);
    str(&b, "a");
    str(&b, "bc");
    str(&b, "");
    /* 4: nested arrays: [[1, 2], [3]] of i32, or too deep */
    str(&b, "nested");
    u32(&b, LOCKSTEP_GGUF_ARRAY);
    if (f == F_NESTING) {
        for (int d = 0; d < 40; d++) {
            u32(&b, LOCKSTEP_GGUF_ARRAY);
            u64(&b, 1);
        }
        u32(&b, LOCKSTEP_GGUF_I32);
        u64(&b, 0);
    } else {
        u32(&b, LOCKSTEP_GGUF_ARRAY);
        u64(&b, 2);
        u32(&b, LOCKSTEP_GGUF_I32); u64(&b, 2); u32(&b, 1); u32(&b, 2);
        u32(&b, LOCKSTEP_GGUF_I32); u64(&b, 1); u32(&b, 3);
    }
    /* 5: a bool, 6: an f64 or an unknown type */
    str(&b, f == F_DUP_KEY ? "general.name" : "flag");
    u32(&b, LOCKSTEP_GGUF_BOOL);
    put(&b, f == F_BOOL ? "\x02" : "\x01", 1);
    str(&b, "pi");
    u32(&b, f == F_VALUE_TYPE ? 77 : LOCKSTEP_GGUF_F64);
    double pi = 3.25;
    put(&b, &pi, 8);

    /* tensors: a [16] f32, a [32, 2] q8_0, a 0-d f16 */
    str(&b, "a.weight");
    u32(&b, f == F_NDIMS ? 9 : 1);
    u64(&b, 16);
    u32(&b, 0);
    u64(&b, 0);
    str(&b, f == F_DUP_TENSOR ? "a.weight" : f == F_LONG_NAME ? "a.name.that.is.much.longer.than.sixty.three.bytes.which.llama.cpp.rejects" : "b.weight");
    u32(&b, 2);
    u64(&b, f == F_BLOCK ? 33 : 32);
    u64(&b, f == F_DIM_OVERFLOW ? (1ull << 62) : 2);
    u32(&b, f == F_TENSOR_TYPE ? 4 /* removed Q4_2 */ : 8 /* Q8_0: 34 bytes per 32 */);
    u64(&b, f == F_MISALIGNED ? 65 : f == F_OVERLAP ? 0 : 64);
    str(&b, "c.scalar");
    u32(&b, 0);
    u32(&b, 1);
    u64(&b, f == F_OUT_OF_FILE ? (1ull << 50) : 192);
    pad_to(&b, 64);
    size_t data = b.len;
    for (int i = 0; i < 64 + 68 + 60 + 2; i++)
        put(&b, "\x5a", 1);
    CHECK(b.len == data + 194);
    return b;
}

static const char *expect_msg[F_COUNT] = {
    [F_MAGIC] = "magic", [F_VERSION] = "version", [F_KV_COUNT] = "metadata entries",
    [F_TENSOR_COUNT] = "tensors", [F_STRLEN] = "truncated", [F_ARRAY_COUNT] = "elements",
    [F_NESTING] = "nested", [F_VALUE_TYPE] = "unknown metadata value type", [F_TENSOR_TYPE] = "unknown type",
    [F_NDIMS] = "dimensions", [F_DIM_OVERFLOW] = "2^63", [F_MISALIGNED] = "alignment",
    [F_OUT_OF_FILE] = "past the end", [F_OVERLAP] = "overlap", [F_DUP_TENSOR] = "twice",
    [F_DUP_KEY] = "twice", [F_BAD_UTF8] = "UTF-8", [F_ALIGN_NOT_POW2] = "power of two",
    [F_ALIGN_TYPE] = "u32", [F_BOOL] = "bool", [F_BLOCK] = "block", [F_LONG_NAME] = "bytes long",
    [F_EMPTY_KEY] = "empty key",
};

int main(void)
{
    watchdog(120);
    /* the valid file reads back exactly */
    struct buf ok = make(F_NONE);
    lockstep_load_error_t err;
    lockstep_model_t *m = lockstep_model_parse(ok.p, ok.len, &err);
    if (!m) {
        fprintf(stderr, "valid file rejected at %llu: %s\n", (unsigned long long)err.offset, err.message);
        return 1;
    }
    CHECK_EQ(err.code, 0);
    CHECK_EQ(lockstep_model_version(m), 3);
    CHECK_EQ(lockstep_model_alignment(m), 64);
    CHECK_EQ(lockstep_model_meta_count(m), 6);
    CHECK_EQ(lockstep_model_tensor_count(m), 3);
    CHECK(strcmp(lockstep_model_meta_find(m, "general.name")->value.v.s, "tiny") == 0);
    const lockstep_meta_t *tok = lockstep_model_meta_find(m, "tokenizer.tokens");
    CHECK_EQ(tok->value.count, 3);
    CHECK(strcmp(tok->value.v.items[1].v.s, "bc") == 0);
    CHECK_EQ(tok->value.v.items[2].count, 0);
    const lockstep_meta_t *nest = lockstep_model_meta_find(m, "nested");
    CHECK_EQ(nest->value.count, 2);
    CHECK_EQ(nest->value.v.items[0].count, 2);
    int32_t third;
    memcpy(&third, nest->value.v.items[1].v.raw, 4);
    CHECK_EQ(third, 3);
    CHECK_EQ(lockstep_model_meta_find(m, "flag")->value.v.u, 1);
    CHECK(lockstep_model_meta_find(m, "pi")->value.v.f == 3.25);
    const lockstep_tensor_info_t *b = lockstep_model_tensor_find(m, "b.weight");
    CHECK(b && strcmp(b->type_name, "Q8_0") == 0);
    CHECK_EQ(b->size, 2 * 34);
    CHECK_EQ(b->offset, lockstep_model_data_offset(m) + 64);
    const lockstep_tensor_info_t *c = lockstep_model_tensor_find(m, "c.scalar");
    CHECK(c && c->n_dims == 0 && c->size == 2);
    CHECK(lockstep_model_tensor_find(m, "nope") == NULL);
    CHECK(lockstep_model_tensor(m, 3) == NULL);
    lockstep_model_free(m);

    /* truncated at every byte */
    for (size_t n = 0; n < ok.len; n++) {
        unsigned char *copy = malloc(n + 1); /* exactly n bytes readable: ASan sees overreads */
        memcpy(copy, ok.p, n);
        m = lockstep_model_parse(copy, n, &err);
        if (m) {
            fprintf(stderr, "a file truncated to %zu of %zu bytes was accepted\n", n, ok.len);
            return 1;
        }
        CHECK_EQ(errno, EBADMSG);
        CHECK_EQ(err.code, -LOCKSTEP_EBADFILE);
        CHECK(err.offset <= n);
        CHECK(err.message[0] != 0);
        free(copy);
    }

    /* forged files */
    for (int f = F_MAGIC; f < F_COUNT; f++) {
        struct buf bad = make((enum forge)f);
        m = lockstep_model_parse(bad.p, bad.len, &err);
        if (m || err.code != -LOCKSTEP_EBADFILE || !strstr(err.message, expect_msg[f]) || err.offset > bad.len) {
            fprintf(stderr, "forgery %d: %s (code %d, offset %llu: \"%s\"; expected \"%s\")\n", f,
                    m ? "accepted" : "wrong error", err.code, (unsigned long long)err.offset, err.message,
                    expect_msg[f]);
            return 1;
        }
        free(bad.p);
    }

    /* files on disk: a missing one, and the valid one */
    m = lockstep_model_open("/nonexistent/model.gguf", &err);
    CHECK(m == NULL && errno == ENOENT && err.code == -ENOENT);
    char path[] = "/tmp/lockstep-gguf-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    CHECK(write(fd, ok.p, ok.len) == (ssize_t)ok.len);
    close(fd);
    m = lockstep_model_open(path, &err);
    CHECK(m != NULL);
    CHECK_EQ(lockstep_model_tensor_count(m), 3);
    lockstep_model_free(m);
    unlink(path);
    CHECK(lockstep_model_parse(NULL, 5, NULL) == NULL && errno == EINVAL);
    lockstep_model_free(NULL);
    free(ok.p);
    return 0;
}
