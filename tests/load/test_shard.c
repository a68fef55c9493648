/* Shard plans: at world sizes 1-4, every rank's part of every tensor (rows, columns,
 * an inner dimension, replicated; F32, BF16, F4, ggml's Q4_0) holds exactly the
 * elements torch.chunk gives it, in every mode and destination, with chunks small
 * enough to cut the runs; rows are read once between the ranks (bytes_read); bad
 * plans (rank, world, dimension, a split inside a block, alias of a column split)
 * give -EINVAL with a message naming the tensor. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>

#include "lockstep/lockstep.h"
#include "../common/check.h"

struct tdesc { const char *name; int gguf_type; const char *dtype; unsigned nd; uint64_t shape[3]; unsigned el; };

/* shapes outermost first; el: bytes per element (0: F4, two in a byte; 18: Q4_0's
 * 32-element block) */
static const struct tdesc st_tensors[] = {
    {"w", -1, "F32", 2, {37, 53}, 4},
    {"x", -1, "BF16", 3, {5, 6, 7}, 2},
    {"v", -1, "F32", 1, {11}, 4},
    {"big", -1, "F32", 2, {1024, 1000}, 4},
    {"f4", -1, "F4", 2, {4, 6}, 0},
};
static const struct tdesc gg_tensors[] = {
    {"q", 2, "Q4_0", 2, {6, 64}, 18},
    {"e", 0, "F32", 2, {3, 10}, 4},
};

struct file { unsigned char *bytes; size_t len; uint64_t off[8]; const struct tdesc *t; unsigned n; };

static uint64_t tensor_bytes(const struct tdesc *t)
{
    uint64_t n = 1;
    for (unsigned d = 0; d < t->nd; d++)
        n *= t->shape[d];
    return t->el == 0 ? n / 2 : t->el == 18 ? n / 32 * 18 : n * t->el;
}

static void fill(struct file *f)
{
    for (size_t k = 0; k < f->len; k++)
        f->bytes[k] = (unsigned char)(k * 131 + k / 251); /* differs byte to byte */
}

static void save(const char *path, const struct file *f)
{
    FILE *fp = fopen(path, "wb");
    CHECK(fp != NULL);
    CHECK(fwrite(f->bytes, 1, f->len, fp) == f->len);
    CHECK(fclose(fp) == 0);
}

static struct file make_safetensors(void)
{
    struct file f = {.t = st_tensors, .n = sizeof st_tensors / sizeof st_tensors[0]};
    char hdr[2048];
    int n = snprintf(hdr, sizeof hdr, "{");
    uint64_t at = 0;
    for (unsigned i = 0; i < f.n; i++) {
        const struct tdesc *t = &f.t[i];
        n += snprintf(hdr + n, sizeof hdr - (size_t)n, "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[", i ? "," : "",
                      t->name, t->dtype);
        for (unsigned d = 0; d < t->nd; d++)
            n += snprintf(hdr + n, sizeof hdr - (size_t)n, "%s%llu", d ? "," : "", (unsigned long long)t->shape[d]);
        n += snprintf(hdr + n, sizeof hdr - (size_t)n, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)at,
                      (unsigned long long)(at + tensor_bytes(t)));
        f.off[i] = at;
        at += tensor_bytes(t);
    }
    n += snprintf(hdr + n, sizeof hdr - (size_t)n, "}");
    while (n % 8)
        hdr[n++] = ' ';
    f.len = 8 + (size_t)n + at;
    f.bytes = malloc(f.len);
    CHECK(f.bytes != NULL);
    fill(&f);
    uint64_t hl = (uint64_t)n;
    memcpy(f.bytes, &hl, 8);
    memcpy(f.bytes + 8, hdr, (size_t)n);
    for (unsigned i = 0; i < f.n; i++)
        f.off[i] += 8 + (uint64_t)n;
    return f;
}

static size_t put(unsigned char *p, size_t at, const void *d, size_t n)
{
    if (p)
        memcpy(p + at, d, n);
    return at + n;
}

static struct file make_gguf(void)
{
    struct file f = {.t = gg_tensors, .n = sizeof gg_tensors / sizeof gg_tensors[0]};
    for (int pass = 0; pass < 2; pass++) {
        size_t at = 0;
        uint32_t v3 = 3;
        uint64_t nt = f.n, nkv = 0, rel = 0;
        at = put(f.bytes, at, "GGUF", 4);
        at = put(f.bytes, at, &v3, 4);
        at = put(f.bytes, at, &nt, 8);
        at = put(f.bytes, at, &nkv, 8);
        for (unsigned i = 0; i < f.n; i++) {
            const struct tdesc *t = &f.t[i];
            uint64_t len = strlen(t->name);
            uint32_t nd = t->nd, type = (uint32_t)t->gguf_type;
            at = put(f.bytes, at, &len, 8);
            at = put(f.bytes, at, t->name, len);
            at = put(f.bytes, at, &nd, 4);
            for (unsigned d = 0; d < t->nd; d++) /* ne[]: innermost first */
                at = put(f.bytes, at, &t->shape[t->nd - 1 - d], 8);
            at = put(f.bytes, at, &type, 4);
            at = put(f.bytes, at, &rel, 8);
            f.off[i] = rel;
            rel += (tensor_bytes(t) + 31) / 32 * 32;
        }
        at = (at + 31) / 32 * 32;
        if (pass == 0) {
            f.len = at + rel;
            f.bytes = malloc(f.len);
            CHECK(f.bytes != NULL);
            fill(&f);
        } else {
            for (unsigned i = 0; i < f.n; i++)
                f.off[i] += at;
        }
    }
    return f;
}

/* The bytes rank's part of t should hold, by indexing the whole tensor: for each index
 * of the dimensions outside d, the slice [start, start + count) of d with what is
 * inside it (in bytes: el per element, or the packed unit's share). */
static void expect_part(const struct file *f, unsigned ti, int d, uint64_t start, uint64_t count,
                        unsigned char *out, uint64_t *len)
{
    const struct tdesc *t = &f->t[ti];
    const unsigned char *src = f->bytes + f->off[ti];
    if (d < 0) {
        *len = tensor_bytes(t);
        memcpy(out, src, *len);
        return;
    }
    uint64_t outer = 1, inner = 1;
    for (int k = 0; k < d; k++)
        outer *= t->shape[k];
    for (unsigned k = (unsigned)d + 1; k < t->nd; k++)
        inner *= t->shape[k];
    /* bytes of x elements: whole units only (the plan refuses the rest) */
    uint64_t per = 0, div = 1;
    if (t->el == 0) {
        per = 1;
        div = 2;
    } else if (t->el == 18) {
        per = 18;
        div = 32;
    } else {
        per = t->el;
    }
    uint64_t row = t->shape[d] * inner * per / div, a = start * inner * per / div, n = count * inner * per / div;
    *len = 0;
    for (uint64_t o = 0; o < outer; o++) {
        memcpy(out + *len, src + o * row + a, n);
        *len += n;
    }
}

static int dim_for(const struct tdesc *t, int d)
{
    return d < (int)t->nd ? d : -1;
}

struct dests { unsigned char *buf[8]; const struct file *f; };

static void *to_heap(void *arg, const lockstep_tensor_info_t *t)
{
    struct dests *ds = arg;
    for (unsigned i = 0; i < ds->f->n; i++)
        if (strcmp(ds->f->t[i].name, t->name) == 0) {
            ds->buf[i] = malloc(t->size ? t->size : 1);
            return ds->buf[i];
        }
    return NULL;
}

/* Every rank of every world size, d the dimension asked of each tensor (-1 none; a
 * tensor with fewer dimensions is whole), in mode with the loader's or heap memory. */
static void check_parts(const char *path, const struct file *f, int d, lockstep_load_mode_t mode, int heap)
{
    unsigned char *want = malloc(f->len);
    CHECK(want != NULL);
    lockstep_shard_rule_t rules[8];
    for (unsigned i = 0; i < f->n; i++) {
        rules[i].pattern = f->t[i].name;
        rules[i].dim = dim_for(&f->t[i], d);
    }
    for (int world = 1; world <= 4; world++)
        for (int rank = 0; rank < world; rank++) {
            int bad_unit = 0; /* F4 and Q4_0 splits of the last dimension must fall on a unit */
            for (unsigned i = 0; i < f->n; i++) {
                const struct tdesc *t = &f->t[i];
                int dd = rules[i].dim;
                if (dd != (int)t->nd - 1 || (t->el != 0 && t->el != 18))
                    continue;
                uint64_t s = t->shape[dd], c = (s + (uint64_t)world - 1) / (uint64_t)world, u = t->el ? 32 : 2;
                uint64_t st = (uint64_t)rank * c < s ? (uint64_t)rank * c : s, cnt = s - st < c ? s - st : c;
                bad_unit |= st % u || cnt % u;
            }
            lockstep_shard_t plan = {rank, world, rules, f->n};
            lockstep_load_params_t p = lockstep_load_params_default();
            p.mode = mode;
            p.shard = &plan;
            p.chunk_bytes = 8192; /* cuts the big tensor's runs and rows */
            struct dests ds = {.f = f};
            if (heap) {
                p.dest = to_heap;
                p.dest_arg = &ds;
            }
            lockstep_load_error_t err;
            lockstep_loaded_t *l = lockstep_load(path, &p, &err);
            if (bad_unit) {
                CHECK(l == NULL);
                CHECK_EQ(errno, EINVAL);
                CHECK(strstr(err.message, "block") != NULL);
                continue;
            }
            if (!l)
                fprintf(stderr, "d %d world %d rank %d mode %d: %s\n", d, world, rank, (int)mode, err.message);
            CHECK(l != NULL);
            const lockstep_model_t *m = lockstep_loaded_model(l);
            for (unsigned i = 0; i < f->n; i++) {
                const lockstep_tensor_info_t *info = lockstep_model_tensor_find(m, f->t[i].name);
                CHECK(info != NULL);
                size_t idx = (size_t)(info - lockstep_model_tensor(m, 0));
                lockstep_shard_part_t part, again;
                CHECK_EQ(lockstep_loaded_part(l, idx, &part), 0);
                CHECK_EQ(lockstep_shard_part(m, idx, &plan, &again, NULL), 0);
                CHECK(memcmp(&part, &again, sizeof part) == 0);
                int dd = rules[i].dim;
                CHECK_EQ(part.dim, dd);
                uint64_t s = dd >= 0 ? f->t[i].shape[dd] : 0, c = (s + (uint64_t)world - 1) / (uint64_t)world;
                if (dd >= 0) { /* torch.chunk */
                    uint64_t st = (uint64_t)rank * c < s ? (uint64_t)rank * c : s;
                    CHECK_EQ(part.start, st);
                    CHECK_EQ(part.count, s - st < c ? s - st : c);
                    CHECK_EQ(part.shape[dd], part.count);
                }
                uint64_t len;
                expect_part(f, i, dd, part.start, part.count, want, &len);
                CHECK_EQ(part.size, len);
                const unsigned char *got = lockstep_loaded_data(l, idx);
                CHECK(got != NULL);
                CHECK(memcmp(got, want, len) == 0);
            }
            lockstep_loaded_free(l);
            for (unsigned i = 0; i < f->n; i++)
                free(ds.buf[i]);
        }
    free(want);
}

/* Rows of one big tensor between two ranks: each reads its own rows and little more. */
static void rows_read_once(const char *path, const struct file *f)
{
    lockstep_shard_rule_t rule = {"big", 0};
    const char *names[] = {"big"};
    uint64_t total = 0, size = tensor_bytes(&f->t[3]);
    for (int rank = 0; rank < 2; rank++) {
        lockstep_shard_t plan = {rank, 2, &rule, 1};
        for (int mode = LOCKSTEP_LOAD_COPY; mode <= LOCKSTEP_LOAD_BUFFERED; mode++) {
            lockstep_load_params_t p = lockstep_load_params_default();
            p.mode = (lockstep_load_mode_t)mode;
            p.shard = &plan;
            p.names = names;
            p.n_names = 1;
            lockstep_loaded_t *l = lockstep_load(path, &p, NULL);
            CHECK(l != NULL);
            lockstep_load_stats_t st;
            CHECK_EQ(lockstep_loaded_stats(l, &st), 0);
            CHECK_EQ(st.bytes, size / 2);
            CHECK(st.bytes_read >= size / 2);
            CHECK(st.bytes_read <= size / 2 + 2 * 8192); /* an alignment unit at each end */
            if (mode == LOCKSTEP_LOAD_COPY)
                total += st.bytes_read;
            lockstep_loaded_free(l);
        }
    }
    CHECK(total <= size + 4 * 8192);
}

static void bad_plans(const char *path)
{
    lockstep_load_error_t err;
    lockstep_shard_rule_t rule = {"w", 2};
    lockstep_shard_t plan = {0, 2, &rule, 1};
    lockstep_load_params_t p = lockstep_load_params_default();
    p.shard = &plan;
    CHECK(lockstep_load(path, &p, &err) == NULL); /* w has 2 dimensions */
    CHECK_EQ(errno, EINVAL);
    CHECK(strstr(err.message, "\"w\"") != NULL);
    rule.dim = 1;
    int bad[][2] = {{0, 0}, {2, 2}, {-1, 2}, {0, -3}};
    for (unsigned k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        plan.rank = bad[k][0];
        plan.world = bad[k][1];
        CHECK(lockstep_load(path, &p, &err) == NULL);
        CHECK_EQ(errno, EINVAL);
        CHECK(strstr(err.message, "world") != NULL);
    }
    plan.rank = 0;
    plan.world = 2;
    p.mode = LOCKSTEP_LOAD_ALIAS; /* columns are not one range */
    CHECK(lockstep_load(path, &p, &err) == NULL);
    CHECK_EQ(errno, EINVAL);
    CHECK(strstr(err.message, "alias") != NULL);
    rule.pattern = NULL;
    p.mode = LOCKSTEP_LOAD_COPY;
    CHECK(lockstep_load(path, &p, &err) == NULL);
    CHECK_EQ(errno, EINVAL);
    rule.pattern = "w";
    rule.dim = -2;
    CHECK(lockstep_load(path, &p, &err) == NULL);
    CHECK_EQ(errno, EINVAL);
    /* a part of an unselected tensor, and NULLs */
    const char *names[] = {"v"};
    rule.dim = 0;
    p.names = names;
    p.n_names = 1;
    lockstep_loaded_t *l = lockstep_load(path, &p, &err);
    CHECK(l != NULL);
    const lockstep_model_t *m = lockstep_loaded_model(l);
    lockstep_shard_part_t part;
    size_t w = (size_t)(lockstep_model_tensor_find(m, "w") - lockstep_model_tensor(m, 0));
    CHECK_EQ(lockstep_loaded_part(l, w, &part), -EINVAL);
    CHECK_EQ(lockstep_loaded_part(l, 1000, &part), -EINVAL);
    CHECK_EQ(lockstep_loaded_part(NULL, 0, &part), -EINVAL);
    CHECK_EQ(lockstep_shard_part(NULL, 0, &plan, &part, NULL), -EINVAL);
    CHECK_EQ(lockstep_shard_part(m, 1000, &plan, &part, &err), -EINVAL);
    lockstep_loaded_free(l);
}

int main(void)
{
    watchdog(300);
    char st_path[128], gg_path[128];
    snprintf(st_path, sizeof st_path, "test_shard_%d.safetensors", (int)getpid());
    snprintf(gg_path, sizeof gg_path, "test_shard_%d.gguf", (int)getpid());
    struct file st = make_safetensors(), gg = make_gguf();
    save(st_path, &st);
    save(gg_path, &gg);
    for (int d = -1; d <= 2; d++) {
        lockstep_load_mode_t modes[] = {LOCKSTEP_LOAD_COPY, LOCKSTEP_LOAD_BUFFERED, LOCKSTEP_LOAD_ALIAS};
        for (unsigned k = 0; k < 3; k++) {
            if (modes[k] == LOCKSTEP_LOAD_ALIAS && d > 0)
                continue; /* alias holds rows only */
            check_parts(st_path, &st, d, modes[k], 0);
            check_parts(gg_path, &gg, d, modes[k], 0);
        }
        check_parts(st_path, &st, d, LOCKSTEP_LOAD_COPY, 1);
        check_parts(gg_path, &gg, d, LOCKSTEP_LOAD_BUFFERED, 1);
    }
    rows_read_once(st_path, &st);
    bad_plans(st_path);
    unlink(st_path);
    unlink(gg_path);
    free(st.bytes);
    free(gg.bytes);
    return 0;
}
