/* lockstep/load.h — reading model files, which are untrusted input.
 *
 * This release reads GGUF (versions 2 and 3: header, every metadata value type, nested
 * arrays included, tensor infos, general.alignment) and safetensors (8-byte header
 * length, JSON header, __metadata__, every dtype of the format). Every size, count,
 * offset, dimension and string is checked against the bytes that are actually there,
 * with overflow-safe arithmetic, before it is used; a bad file gives
 * -LOCKSTEP_EBADFILE and a lockstep_load_error_t naming what was wrong and at which
 * byte offset. lockstep_load (below) moves tensors into memory: see its comment.
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
    uint64_t dims[LOCKSTEP_MAX_DIMS];  /* as the file orders them: GGUF innermost first
                                          (ne[0]); safetensors outermost first (shape) */
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
/* Bytes of one element of a numeric or BOOL GGUF value type (the stride of an ARRAY's
 * raw elements); 0 for STRING, ARRAY and unknown types. */
size_t lockstep_gguf_scalar_size(uint32_t type);
const lockstep_tensor_info_t *lockstep_model_tensor(const lockstep_model_t *m, size_t i);
const lockstep_tensor_info_t *lockstep_model_tensor_find(const lockstep_model_t *m, const char *name);

/* A load in AUTO mode maps a file (reads nothing) when at least this fraction of the
 * selected bytes is in the page cache. */
#define LOCKSTEP_LOAD_WARM_FRACTION 0.9
/* *fraction = how much (0..1) of an opened file's tensor data is in the page cache,
 * sampled by mincore over windows spread evenly through it: a caller can tell a warm
 * file from a cold one before loading. 0, or -EINVAL (a NULL argument, or a model
 * parsed from memory rather than opened from a file). */
int lockstep_model_resident(const lockstep_model_t *m, double *fraction);


/* ---- tensor-parallel shard plans ----------------------------------------------------------
 *
 * A plan gives each of world ranks its part of every tensor: per tensor-name pattern, a
 * dimension to split (counted outermost first, as torch's shape: 0 = rows, 1 = columns;
 * GGUF's ne[] is innermost first, so dim 0 there is its last ne) or none (every rank
 * holds the whole tensor). Along the split dimension of size S, rank r holds indices
 * [start, start + count) by torch.chunk's rule: c = ceil(S / world), start = min(r c, S),
 * count = min(c, S - start); ranks past the end hold an empty part. */

typedef struct lockstep_shard_rule {
    const char *pattern;   /* fnmatch(3) glob on the tensor name, no flags ("*.q_proj.weight") */
    int dim;               /* the dimension to split, outermost first; -1: the whole tensor */
} lockstep_shard_rule_t;

typedef struct lockstep_shard {
    int rank, world;       /* 0 <= rank < world */
    const lockstep_shard_rule_t *rules;  /* the first pattern that matches decides; */
    size_t n_rules;                      /* a tensor no pattern matches is whole */
} lockstep_shard_t;

typedef struct lockstep_shard_part {
    int dim;               /* the split dimension, or -1 (the whole tensor) */
    uint64_t start, count; /* this rank's indices along dim (count 0: it holds nothing) */
    uint32_t n_dims;
    uint64_t shape[LOCKSTEP_MAX_DIMS]; /* the part's shape, outermost first */
    uint64_t size;         /* bytes */
    uint64_t offset;       /* file offset of the part's first byte */
    uint64_t runs, run, stride; /* where it lies: runs ranges of run bytes, stride apart
                                   (runs 1 when the part is one range; 0 when empty) */
} lockstep_shard_part_t;

/* The part of tensor i of m that plan gives its rank (plan NULL: the whole tensor).
 * 0, or -EINVAL (err, may be NULL, says why): a rank outside 0..world-1, a world below
 * 1, a NULL pattern, a split dimension the tensor does not have, or a split of
 * quantized blocks (or sub-byte elements) that does not fall on a block boundary. */
int lockstep_shard_part(const lockstep_model_t *m, size_t i, const lockstep_shard_t *plan,
                        lockstep_shard_part_t *out, lockstep_load_error_t *err);

/* ---- the loader ------------------------------------------------------------------------
 *
 * lockstep_load opens a model file and moves every tensor (or those named) into a
 * destination. Modes:
 *   ALIAS     host only: each tensor points into a read-only mapping of the file (no
 *             copy; the weights exist once, in the page cache). The selected pages
 *             of a cold file are mapped before lockstep_load returns
 *             (MADV_POPULATE_READ by n_readers threads, so it is read with several
 *             requests in flight); a warm one (>= 90 % resident) is mapped at its
 *             first touch, as mmap's pages are, progress called once. Writing
 *             through the pointers faults. The file must not shrink while
 *             the tensors live (SIGBUS), as with any mapping.
 *   MAP       ALIAS's mapping made writable, copy-on-write: no copy (the weights stay
 *             in the page cache, mapped as ALIAS's are); a write copies that page
 *             into the process, and the file never changes. What safetensors'
 *             load_file gives. As ALIAS: host only, no dest, no to_type, parts of
 *             one range.
 *   COPY      direct I/O (O_DIRECT, aligned as statx STATX_DIOALIGN says, else the
 *             logical block size) with n_readers large reads in flight. If the file
 *             system or the buffer refuses direct I/O, the load continues with buffered
 *             reads from the same offset (stats.direct_fallback says where).
 *   BUFFERED  buffered pread, n_readers in flight.
 *   AUTO      when the selected bytes are already in the page cache (mincore says
 *             >= 90 % resident: direct reads would gain nothing), MAP if it may (host
 *             sink, no dest, no to_type, parts of one range, and no NUMA placement
 *             asked: numa OFF, or LOCAL on a one-node machine), else BUFFERED;
 *             otherwise COPY. ALIAS never.
 * Destinations: with dest == NULL the loader allocates one region (host: anonymous,
 * transparent huge pages, pages pre-faulted in parallel ahead of the reads, data read
 * straight into place; CUDA: one device allocation) and lockstep_loaded_data gives
 * each tensor's address. With dest set, dest(dest_arg, info) returns where each selected
 * tensor goes (a host pointer, or a device pointer for the CUDA sink; NULL fails the
 * load with -EINVAL), and the data goes through staging buffers.
 * CUDA sink: the CUDA runtime (libcudart) is loaded at run time; pinned staging
 * buffers in a ring, one event each, host-to-device copies overlapped with the next
 * reads. No runtime or no device: -ENODEV.
 * progress(arg, done, total) is called after every chunk, from one thread at a time,
 * with done increasing; a non-zero return cancels the load (-ECANCELED).
 * check: F32/F16/BF16/F64/F8 tensors are scanned for NaN and Inf, and the scales of
 * every quantized ggml block type (f16/f32 fields, IQ1_M's nibble-spread f16, MXFP4's
 * E8M0, NVFP4's four E4M3) for NaN/Inf, overlapped with the reads; a bad value fails the
 * load with -LOCKSTEP_EBADFILE, the tensor's name and the value's file offset in err.
 * Memory: destinations are complete when lockstep_load returns; nothing is written
 * after an error except the chunks already in flight, which finish first. */

typedef enum lockstep_load_mode {
    LOCKSTEP_LOAD_AUTO = 0,
    LOCKSTEP_LOAD_ALIAS = 1,
    LOCKSTEP_LOAD_COPY = 2,
    LOCKSTEP_LOAD_BUFFERED = 3,
    LOCKSTEP_LOAD_MAP = 4
} lockstep_load_mode_t;

typedef enum lockstep_load_sink {
    LOCKSTEP_SINK_HOST = 0,
    LOCKSTEP_SINK_CUDA = 1
} lockstep_load_sink_t;

/* Where the memory the loader allocates goes on a machine with several NUMA nodes (its
 * pages are bound to the node, preferred, before anything touches them; the CUDA sink,
 * ALIAS, MAP and caller destinations are not the loader's memory). */
typedef enum lockstep_numa {
    LOCKSTEP_NUMA_LOCAL = 0,  /* the calling thread's node, where the machine has more than one */
    LOCKSTEP_NUMA_NODE = 1,   /* numa_node, also on a one-node machine (node 0) */
    LOCKSTEP_NUMA_OFF = 2     /* where the loader's threads first touch the pages */
} lockstep_numa_t;

typedef int (*lockstep_load_progress_fn)(void *arg, uint64_t done, uint64_t total);
typedef void *(*lockstep_load_dest_fn)(void *arg, const lockstep_tensor_info_t *t);

typedef struct lockstep_load_params {
    lockstep_load_mode_t mode;
    lockstep_load_sink_t sink;
    int device;                    /* CUDA device ordinal */
    const char *const *names;      /* tensors to load; NULL = all */
    size_t n_names;                /* an unknown name fails with -ENOENT */
    lockstep_load_dest_fn dest;    /* NULL: the loader allocates */
    void *dest_arg;
    int check;                     /* scan for NaN/Inf and bad block scales */
    lockstep_load_progress_fn progress;
    void *progress_arg;
    int n_readers;                 /* reads in flight, 1..64 (0: 2 in place, 6 staged) */
    size_t chunk_bytes;            /* bytes per read (0 = 4 MiB, measured) */
    const char *to_type;           /* "F32", "F16" or "BF16": F32, F16 and BF16 tensors
                                      arrive as this type, converted while they are
                                      copied out of the staging buffers (to nearest,
                                      ties to even; a NaN stays a NaN); other types as
                                      they are, except quantized blocks and sub-byte
                                      floats, which fail (-EINVAL: no dequantisation).
                                      NULL: as the file has them. Not with ALIAS, MAP or
                                      the CUDA sink. */
    lockstep_numa_t numa;          /* where the loader's memory goes (default LOCAL) */
    int numa_node;                 /* LOCKSTEP_NUMA_NODE: an online node */
    const lockstep_shard_t *shard; /* load only this rank's parts (NULL: whole tensors):
                                      only their bytes are read, except the gaps between
                                      a column split's ranges, read through where they
                                      are small; parts split along other than the
                                      outermost dimension are gathered, so ALIAS and MAP refuse
                                      them */
} lockstep_load_params_t;

typedef struct lockstep_load_stats {
    uint64_t bytes;                /* tensor bytes delivered */
    double seconds;                /* wall time of lockstep_load */
    double cpu_seconds;            /* process CPU time (user + system) during it */
    lockstep_load_mode_t mode;     /* what AUTO resolved to */
    int direct_fallback;           /* COPY: 1 if direct I/O was refused */
    uint64_t fallback_offset;      /* file offset where buffered reads took over */
    double resident;               /* fraction of the selection in the page cache before */
    uint64_t bytes_read;           /* bytes asked of the file (alignment and read-through
                                      gaps included; ALIAS, MAP: bytes mapped) */
    int numa_node;                 /* the node the loader's memory was bound to, or -1 */
} lockstep_load_stats_t;

typedef struct lockstep_loaded lockstep_loaded_t;

/* AUTO, host, all tensors, no check, 2 readers, 4 MiB chunks. */
lockstep_load_params_t lockstep_load_params_default(void);

/* Load path as params say (NULL params = defaults). NULL with errno on failure:
 * EINVAL (bad params: unknown mode or sink, ALIAS or MAP with the CUDA sink or with dest,
 * n_readers out of range, dest returned NULL, a shard plan lockstep_shard_part
 * refuses, ALIAS or MAP with a part split inside rows, a to_type that is not F32/F16/BF16
 * or a tensor it cannot convert, a numa policy or node that does not exist), ENOENT (a
 * name not in the file),
 * EBADMSG (a malformed file, or check found a bad value: err says what and where),
 * ECANCELED (progress asked), ENODEV (CUDA sink without runtime or device), ENOMEM,
 * EIO and the other read(2) errors; err (may be NULL) gets the code and a message. */
lockstep_loaded_t *lockstep_load(const char *path, const lockstep_load_params_t *params,
                                 lockstep_load_error_t *err);

/* The parsed file (metadata and tensor table), owned by the loaded object. */
const lockstep_model_t *lockstep_loaded_model(const lockstep_loaded_t *l);

/* Where tensor i (index in the model's table) was put: a host pointer (read-only in
 * ALIAS mode), a device pointer for the CUDA sink, what dest returned; NULL when it
 * was not selected or i is out of range. */
void *lockstep_loaded_data(const lockstep_loaded_t *l, size_t i);

/* The region the loader allocated or mapped (host sink, dest == NULL): base and
 * length; tensors lie inside it. -EINVAL otherwise. */
int lockstep_loaded_region(const lockstep_loaded_t *l, void **base, size_t *len);

int lockstep_loaded_stats(const lockstep_loaded_t *l, lockstep_load_stats_t *out);

/* Tensor i as this load holds it: the name, the type after any conversion, the dims
 * of its part (in the file's order), its size in memory, the file offset of the
 * part's first byte. NULL (errno EINVAL) when i was not selected or is out of range. */
const lockstep_tensor_info_t *lockstep_loaded_tensor(const lockstep_loaded_t *l, size_t i);

/* The part of tensor i this load holds (the whole tensor, dim -1, without a shard
 * plan), as the file has it; its elements lie at lockstep_loaded_data(l, i), packed in
 * C order (converted: lockstep_loaded_tensor gives their type and size). -EINVAL when
 * i was not selected or is out of range. */
int lockstep_loaded_part(const lockstep_loaded_t *l, size_t i, lockstep_shard_part_t *out);

/* Free everything the load allocated (not caller destinations). NULL is a no-op. */
void lockstep_loaded_free(lockstep_loaded_t *l);

/* 1 if the CUDA runtime loads and reports a device, 0 if not. */
int lockstep_cuda_available(void);

#ifdef __cplusplus
}
#endif

#endif
