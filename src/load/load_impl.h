/* The model object, its arena and the bounds-checked cursor, shared by the format
 * readers (gguf.c, safetensors.c). Not installed. */
#ifndef LOCKSTEP_LOAD_IMPL_H
#define LOCKSTEP_LOAD_IMPL_H

#include <stdint.h>

#include "lockstep/lockstep.h"
#include "lockstep/load.h"

struct block { struct block *next; size_t used, cap; char data[]; };

struct lockstep_model {
    void *map;
    size_t map_len;
    uint32_t format;   /* lockstep_format_t */
    uint32_t version;
    uint64_t alignment, data_offset;
    size_t n_meta, n_tensors;
    lockstep_meta_t *meta;
    lockstep_tensor_info_t *tensors;
    struct block *arena;
};

struct rd {
    const unsigned char *p;
    uint64_t len, pos;
    lockstep_load_error_t *err;
    lockstep_model_t *m;
    int nomem;
};

void *ls_arena_alloc(lockstep_model_t *m, size_t n);
/* n zeroed elements of size bytes (room for one when n is 0), or NULL with r->nomem set */
void *ls_calloc(struct rd *r, uint64_t n, size_t size);
__attribute__((format(printf, 3, 4))) int ls_bad(struct rd *r, uint64_t at, const char *fmt, ...);
int ls_need(struct rd *r, uint64_t n, const char *what);
int ls_utf8_valid(const unsigned char *s, uint64_t n);
/* Indices 0..n-1 sorted by cmp(ctx) (NULL, with r->nomem set, when out of memory). */
size_t *ls_sorted_index(struct rd *r, size_t n, int (*cmp)(const void *, const void *, void *), void *ctx);
/* qsort_r comparator: tensor indices by offset; ctx is the tensor array */
int ls_cmp_offsets(const void *a, const void *b, void *ctx);
/* names[0..n) pairwise different (sorted, so O(n log n)); at: where each was declared */
int ls_check_unique(struct rd *r, const char *const *names, const uint64_t *at, size_t n, const char *what);
/* [lo, hi) of tensors sorted by offset must not overlap; info_at: where each was declared */
int ls_check_overlap(struct rd *r, const uint64_t *info_at);

/* check.c: the bytes of one element or block of the type (1 when it has no checks),
 * and a scan of n bytes (whole units) for NaN/Inf values or scales; -1 with *where =
 * the bad unit's byte offset in p. */
unsigned ls_check_unit(const char *type_name);
int ls_check_bytes(const char *type_name, const unsigned char *p, uint64_t n, uint64_t *where);

/* The smallest whole unit of a tensor type: elements and bytes (1 and 4 for F32, a
 * block for ggml's quantized types, 2 elements in a byte for F4); -1 if unknown. */
int ls_gguf_unit(uint32_t code, uint64_t *elems, uint64_t *bytes);
int ls_st_unit(uint32_t type, uint64_t *elems, uint64_t *bytes);

/* shard.c: a plan's rank, world and rules usable: 0, or -EINVAL with err saying why */
int ls_shard_check(const lockstep_shard_t *plan, lockstep_load_error_t *err);

/* GGUF's (ggml's) and safetensors' code of a type name, -1 if unknown */
int ls_gguf_type_code(const char *name);
/* safetensors' code of a dtype name (its index in the format's list), -1 if unknown */
int ls_st_type_code(const char *name);

/* convert.c: F32, F16 and BF16 as kinds 0, 1, 2 (-1: another type), and n elements
 * converted from one kind to another (dst and src must not overlap) */
int ls_float_kind(const char *type_name);
const char *ls_float_kind_name(int kind);
unsigned ls_float_kind_bytes(int kind);
void ls_convert(int from, int to, void *dst, const void *src, size_t n);

/* numa.c: the highest online node (0 when unknown), the calling thread's node (-1
 * unknown), and [p, p + len) bound to a node (preferred): 0 or -errno */
int ls_numa_max_node(void);
int ls_numa_node_of_caller(void);
int ls_numa_bind(void *p, size_t len, int node);

int ls_parse_gguf(struct rd *r);
int ls_parse_safetensors(struct rd *r);

#endif
