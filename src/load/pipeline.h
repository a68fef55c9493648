/* What the loader's two files share: a load's job and its chunks (loader.c sets a job up
 * and runs it; pipeline.c plans the chunks and is what the reader threads run). */
#ifndef LOCKSTEP_LOAD_PIPELINE_H
#define LOCKSTEP_LOAD_PIPELINE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "lockstep/pool.h"
#include "load_impl.h"
#include "sink_cuda.h"

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

#define MAX_READERS 64
/* Reads in flight by default: into the destination, the direct-read ceiling's best; a
 * staged reader converts or gathers between its reads, and 6 keep the disk as busy
 * (f16 -> f32 of 2 GiB from disk: 1.8-2.3 GB/s with 2, 2.2-2.45 with 6). */
#define IN_PLACE_READERS 2
#define STAGED_READERS 6
#define HUGE_PAGE (2u << 20)
#define STAGED_GAP (64u << 10) /* small gaps inside a staged chunk are read through */
/* A selection's residency is sampled, not counted: mincore walks the page cache page
 * by page (about 10 ms for 2 GiB), longer than mapping a warm file takes. Up to this
 * many windows of RESIDENT_WINDOW pages, evenly spread; cached runs are long, so a
 * few pages tell a window, and a call each is most of what a warm load costs. */
#define RESIDENT_WINDOWS 64u
#define RESIDENT_WINDOW 4u

struct lockstep_loaded {
    lockstep_model_t *model;
    void **data;                 /* per tensor of the model */
    lockstep_shard_part_t *parts;  /* per tensor: the part selected (whole without a plan) */
    lockstep_tensor_info_t *views; /* per tensor: the model's entry, narrowed to the part */
    unsigned char *region;       /* host region: allocated, or the model's mapping */
    size_t region_len;
    void *region_map;            /* what to munmap (region rounded to a huge page) */
    size_t region_map_len;
    void *device;                /* CUDA allocation */
    lockstep_load_stats_t stats;
};

struct chunk { uint64_t start, end; uint32_t first, n; }; /* file range; its pieces */
struct piece { uint32_t tensor; uint64_t src, dst, len; }; /* staged: file offset, offset
                                                             in the destination, bytes */

struct job {
    lockstep_loaded_t *l;
    const lockstep_load_params_t *p;
    const lockstep_tensor_info_t *t;   /* the tensors as selected (l->views) */
    size_t *sel, n_sel;                /* selected tensor indices, by file offset */
    int fd_direct, fd_buf;             /* fd_direct < 0: no direct reads */
    uint64_t align, file_size, base_off, refuse_direct_at;
    int in_place, alias, cuda, n_readers;
    int packed;                        /* staged into a region the loader allocated */
    int to_kind;                       /* to_type's kind (ls_float_kind), or -1 */
    unsigned char *from_kind;          /* per tensor: 1 + its kind when converted, else 0 */
    struct chunk *chunks;
    size_t n_chunks;
    struct piece *pieces;
    size_t n_pieces;
    size_t stage_bytes;
    unsigned char *stage[MAX_READERS][LS_CUDA_RING];
    _Atomic uint64_t *remaining;       /* in place: bytes of each selected tensor not read */
    atomic_size_t next;                /* next chunk to claim */
    atomic_int failed;                 /* first error, or 0 */
    atomic_int direct_refused;
    _Atomic uint64_t bytes_read;
    _Atomic uint64_t fallback_at;
    pthread_mutex_t mu;                /* progress calls, one at a time */
    uint64_t done, total;
    lockstep_load_error_t *err;
};

/* Bytes in the destination of len bytes of tensor i's file data (more or fewer when
 * it converts) */
static inline uint64_t dest_bytes(const struct job *j, size_t i, uint64_t len)
{
    int from = j->from_kind[i] - 1;
    return from < 0 ? len : len / ls_float_kind_bytes(from) * ls_float_kind_bytes(j->to_kind);
}

static inline uint64_t align_down(uint64_t x, uint64_t a) { return x - x % a; }
static inline uint64_t align_up(uint64_t x, uint64_t a) { return x + (a - x % a) % a; }

double ls_load_now(void);
double ls_load_cpu_now(void);
int ls_load_fail(struct job *j, int code, uint64_t offset, const char *fmt, ...);
void ls_load_worker(void *arg, int ith, int nth);
int ls_load_plan_in_place(struct job *j, uint64_t chunk);
int ls_load_plan_staged(struct job *j, uint64_t chunk);
/* ALIAS and MAP of a selection in the page cache: map it from the calling thread */
void ls_load_map_warm(struct job *j);
/* Fraction of the selection's pages in the page cache (resident.c) */
double ls_load_resident(const lockstep_model_t *m, const lockstep_tensor_info_t *tensors, const size_t *sel,
                        size_t n_sel);

#endif
