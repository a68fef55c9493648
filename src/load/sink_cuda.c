/* The CUDA sink's runtime: libcudart is loaded with dlopen at run time, so the library
 * builds and runs without it; the function types come from the real CUDA headers when
 * the build found them (LOCKSTEP_HAVE_CUDA_HEADERS), else every entry reports -ENODEV.
 * Every call made by a thread that copies first selects the device (CUDA's current
 * device is per thread). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "sink_cuda.h"

#ifdef LOCKSTEP_HAVE_CUDA_HEADERS
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <pthread.h>

#define CUDA_FUNCS(X)                                                                   \
    X(cudaGetDeviceCount) X(cudaSetDevice) X(cudaMalloc) X(cudaFree) X(cudaHostRegister) \
    X(cudaHostUnregister) X(cudaStreamCreateWithFlags) X(cudaStreamDestroy)             \
    X(cudaStreamSynchronize) X(cudaEventCreateWithFlags) X(cudaEventDestroy)           \
    X(cudaEventRecord) X(cudaEventSynchronize) X(cudaMemcpyAsync)

static struct {
#define X(f) __typeof__(f) *f;
    CUDA_FUNCS(X)
#undef X
} rt;
static int rt_state; /* 0 not tried, 1 loaded, -errno failed */
static pthread_once_t rt_once = PTHREAD_ONCE_INIT;

static void rt_load(void)
{
    const char *names[] = {"libcudart.so", "libcudart.so.13", "libcudart.so.12",
                           "/usr/local/cuda/lib64/libcudart.so"};
    void *h = NULL;
    for (unsigned i = 0; i < sizeof names / sizeof names[0] && !h; i++)
        h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        rt_state = -ENODEV;
        return;
    }
#define X(f)                                                                            \
    if (!(rt.f = (__typeof__(f) *)dlsym(h, #f))) {                                      \
        rt_state = -ENODEV;                                                             \
        return;                                                                         \
    }
    CUDA_FUNCS(X)
#undef X
    int n = 0;
    rt_state = rt.cudaGetDeviceCount(&n) == cudaSuccess && n > 0 ? 1 : -ENODEV;
}

static int ok(cudaError_t e) { return e == cudaSuccess ? 0 : -EIO; }

int ls_cuda_open(int device)
{
    pthread_once(&rt_once, rt_load);
    if (rt_state < 0)
        return rt_state;
    int n = 0;
    if (rt.cudaGetDeviceCount(&n) != cudaSuccess || device < 0 || device >= n)
        return device < 0 || n > 0 ? -EINVAL : -ENODEV;
    return ok(rt.cudaSetDevice(device));
}

int ls_cuda_malloc(void **p, size_t n) { return ok(rt.cudaMalloc(p, n ? n : 1)); }
void ls_cuda_free(void *p) { if (p) rt.cudaFree(p); }
int ls_cuda_pin(void *p, size_t n) { return ok(rt.cudaHostRegister(p, n, cudaHostRegisterDefault)); }
void ls_cuda_unpin(void *p) { rt.cudaHostUnregister(p); }

int ls_cuda_lane_init(struct ls_cuda_lane *l, int device)
{
    memset(l, 0, sizeof *l);
    if (ok(rt.cudaSetDevice(device)) || ok(rt.cudaStreamCreateWithFlags((cudaStream_t *)&l->stream, cudaStreamNonBlocking)))
        return -EIO;
    for (int b = 0; b < LS_CUDA_RING; b++)
        if (ok(rt.cudaEventCreateWithFlags((cudaEvent_t *)&l->event[b], cudaEventDisableTiming)))
            return -EIO;
    return 0;
}

int ls_cuda_lane_wait(struct ls_cuda_lane *l, int b)
{
    return l->used[b] ? ok(rt.cudaEventSynchronize((cudaEvent_t)l->event[b])) : 0;
}

int ls_cuda_lane_copy(struct ls_cuda_lane *l, void *dst, const void *src, size_t n)
{
    return ok(rt.cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, (cudaStream_t)l->stream));
}

int ls_cuda_lane_mark(struct ls_cuda_lane *l, int b)
{
    l->used[b] = 1;
    return ok(rt.cudaEventRecord((cudaEvent_t)l->event[b], (cudaStream_t)l->stream));
}

int ls_cuda_lane_finish(struct ls_cuda_lane *l)
{
    int rc = l->stream ? ok(rt.cudaStreamSynchronize((cudaStream_t)l->stream)) : 0;
    for (int b = 0; b < LS_CUDA_RING; b++)
        if (l->event[b])
            rt.cudaEventDestroy((cudaEvent_t)l->event[b]);
    if (l->stream)
        rt.cudaStreamDestroy((cudaStream_t)l->stream);
    memset(l, 0, sizeof *l);
    return rc;
}

#else /* no CUDA headers at build time */

int ls_cuda_open(int device) { (void)device; return -ENODEV; }
int ls_cuda_malloc(void **p, size_t n) { (void)p; (void)n; return -ENODEV; }
void ls_cuda_free(void *p) { (void)p; }
int ls_cuda_pin(void *p, size_t n) { (void)p; (void)n; return -ENODEV; }
void ls_cuda_unpin(void *p) { (void)p; }
int ls_cuda_lane_init(struct ls_cuda_lane *l, int device) { (void)device; memset(l, 0, sizeof *l); return -ENODEV; }
int ls_cuda_lane_wait(struct ls_cuda_lane *l, int b) { (void)l; (void)b; return -ENODEV; }
int ls_cuda_lane_copy(struct ls_cuda_lane *l, void *d, const void *s, size_t n) { (void)l; (void)d; (void)s; (void)n; return -ENODEV; }
int ls_cuda_lane_mark(struct ls_cuda_lane *l, int b) { (void)l; (void)b; return -ENODEV; }
int ls_cuda_lane_finish(struct ls_cuda_lane *l) { (void)l; return 0; }

#endif

int lockstep_cuda_available(void)
{
    return ls_cuda_open(0) == 0;
}
