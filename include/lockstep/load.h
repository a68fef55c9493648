/* lockstep/load.h — reading model files, which are untrusted input.
 *
 * This release reads GGUF (versions 2 and 3: header, every metadata value type, nested
 * arrays included, tensor infos, general.alignment) and safetensors (8-byte header
 * length, JSON header, __metadata__, every dtype of the format). Every size, count,
 * offset, dimension and string is checked against the bytes that are actually there,
 * with overflow-safe arithmetic, before it is used; a bad file gives
 * -LOCKSTEP_EBADFILE and a lockstep_load_error_t naming what was wrong and at which
 * byte offset. The pipelined loader is not written yet.
 *
 * Types: for GGUF, lockstep_tensor_info_t.type is the ggml type code; for safetensors
 * it indexes the format's dtype list, and type_name is the dtype ("BF16", "F8_E4M3").
 * Safetensors metadata appears as STRING values.
 *
 * Memory: the parsed model owns copies of every key, name and string; numeric arrays
 * point into the parsed buffer (the caller's, or the model's read-only mapping of the
 * file), so a model stays valid only while that buffer does. */
#ifndef LOCKSTEP_LOAD_H
#define LOCKSTEP_LOAD_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define LOCKSTEP_MAX_DIMS 8          /* safetensors; GGUF allows 4 */
#define LOCKSTEP_MAX_KEY 256         /* metadata keys, bytes */
#define LOCKSTEP_MAX_TENSOR_NAME 63  /* tensor names, bytes (GGML_MAX_NAME - 1, as llama.cpp) */
#define LOCKSTEP_MAX_NESTING 16      /* arrays inside arrays */

typedef struct lockstep_load_error {
    int code;            /* 0, or the negative code the call returned */
    uint64_t offset;     /* byte offset in the file where the problem was found */
    char message[200];   /* what was wrong, for a person */
} lockstep_load_error_t;

/* GGUF metadata value types (the file's own codes). */
typedef enum lockstep_gguf_type {
    LOCKSTEP_GGUF_U8 = 0, LOCKSTEP_GGUF_I8 = 1, LOCKSTEP_GGUF_U16 = 2, LOCKSTEP_GGUF_I16 = 3,
    LOCKSTEP_GGUF_U32 = 4, LOCKSTEP_GGUF_I32 = 5, LOCKSTEP_GGUF_F32 = 6, LOCKSTEP_GGUF_BOOL = 7,
    LOCKSTEP_GGUF_STRING = 8, LOCKSTEP_GGUF_ARRAY = 9, LOCKSTEP_GGUF_U64 = 10, LOCKSTEP_GGUF_I64 = 11,
    LOCKSTEP_GGUF_F64 = 12
} lockstep_gguf_type_t;

typedef struct lockstep_value {
    uint32_t type;           /* lockstep_gguf_type_t */
    uint32_t elem_type;      /* ARRAY: the elements' type */
    uint64_t count;          /* ARRAY: element count; STRING: length in bytes */
    union {
        uint64_t u;          /* unsigned integers and BOOL */
        int64_t i;           /* signed integers */
        double f;            /* F32 and F64 */
        const char *s;       /* STRING: NUL-terminated copy (may contain NULs inside; use count) */
        const void *raw;     /* ARRAY of numbers or BOOL: count little-endian elements */
        const struct lockstep_value *items; /* ARRAY of strings or arrays */
    } v;
} lockstep_value_t;

typedef struct lockstep_meta {
    const char *key;
    lockstep_value_t value;
} lockstep_meta_t;

typedef struct lockstep_tensor_info {
    const char *name;
    uint32_t type;           /* ggml type code */
    const char *type_name;   /* "F32", "Q4_K", ... */
    uint32_t n_dims;
    uint64_t dims[LOCKSTEP_MAX_DIMS];  /* dims[0] varies fastest, as in GGUF */
    uint64_t offset;         /* absolute byte offset of the data in the file */
    uint64_t size;           /* bytes */
} lockstep_tensor_info_t;

typedef struct lockstep_model lockstep_model_t;

typedef enum lockstep_format {
    LOCKSTEP_FORMAT_GGUF = 1,
    LOCKSTEP_FORMAT_SAFETENSORS = 2
} lockstep_format_t;

/* Parse a model file from memory (len bytes: the whole file); the format is told by
 * its first bytes. NULL with errno = EBADMSG
 * (malformed; err says where) or ENOMEM; err may be NULL. */
lockstep_model_t *lockstep_model_parse(const void *buf, size_t len, lockstep_load_error_t *err);

/* Open and parse a file (mapped read-only). NULL with errno: the open/mmap errno, or
 * EBADMSG / ENOMEM as above. */
lockstep_model_t *lockstep_model_open(const char *path, lockstep_load_error_t *err);

void lockstep_model_free(lockstep_model_t *m);

/* LOCKSTEP_FORMAT_GGUF or LOCKSTEP_FORMAT_SAFETENSORS, or -EINVAL. */
int lockstep_model_format(const lockstep_model_t *m);
uint32_t lockstep_model_version(const lockstep_model_t *m);
uint64_t lockstep_model_alignment(const lockstep_model_t *m);
uint64_t lockstep_model_data_offset(const lockstep_model_t *m);
size_t lockstep_model_meta_count(const lockstep_model_t *m);
const lockstep_meta_t *lockstep_model_meta(const lockstep_model_t *m, size_t i);
const lockstep_meta_t *lockstep_model_meta_find(const lockstep_model_t *m, const char *key);
size_t lockstep_model_tensor_count(const lockstep_model_t *m);
const lockstep_tensor_info_t *lockstep_model_tensor(const lockstep_model_t *m, size_t i);
const lockstep_tensor_info_t *lockstep_model_tensor_find(const lockstep_model_t *m, const char *name);

#ifdef __cplusplus
}
#endif

#endif
