/* The CUDA sink's runtime entry points (sink_cuda.c). Not installed. 0 or -errno;
 * -ENODEV when the runtime or a device is missing. */
#ifndef LOCKSTEP_SINK_CUDA_H
#define LOCKSTEP_SINK_CUDA_H

#include <stddef.h>

#include "lockstep/load.h"

#define LS_CUDA_RING 2 /* staging buffers per reader: one filling, one draining */

/* One reader's copy lane: a stream and an event per staging buffer. */
struct ls_cuda_lane {
    void *stream;
    void *event[LS_CUDA_RING];
    int used[LS_CUDA_RING];
};

int ls_cuda_open(int device);                     /* load the runtime, select device */
int ls_cuda_malloc(void **p, size_t n);
void ls_cuda_free(void *p);
int ls_cuda_pin(void *p, size_t n);               /* page-lock host memory */
void ls_cuda_unpin(void *p);
int ls_cuda_lane_init(struct ls_cuda_lane *l, int device);
int ls_cuda_lane_wait(struct ls_cuda_lane *l, int b); /* buffer b's last copy is done */
int ls_cuda_lane_copy(struct ls_cuda_lane *l, void *dst, const void *src, size_t n);
int ls_cuda_lane_mark(struct ls_cuda_lane *l, int b); /* buffer b's copies are queued */
int ls_cuda_lane_finish(struct ls_cuda_lane *l);  /* wait for all, free the lane */

#endif
