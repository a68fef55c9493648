/* The CUDA sink: with a GPU, every tensor of a file loaded to the device (by the loader's
 * own allocation and into caller device buffers) reads back equal to the file; without
 * one, the load fails with ENODEV and this test skips (77). Built when the CUDA headers
 * are found; the runtime is loaded at run time, as the library does. */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>

#include "lockstep/lockstep.h"
#include "../common/check.h"

static __typeof__(cudaMemcpy) *memcpy_d2h;
static __typeof__(cudaMalloc) *dev_malloc;

static void *to_device(void *arg, const lockstep_tensor_info_t *t)
{
    (void)arg;
    void *p = NULL;
    return dev_malloc(&p, t->size ? t->size : 1) == cudaSuccess ? p : NULL;
}

int main(void)
{
    watchdog(120);
    const char *path = "test_loader_cuda.safetensors";
    lockstep_load_params_t p = lockstep_load_params_default();
    p.sink = LOCKSTEP_SINK_CUDA;
    if (!lockstep_cuda_available()) {
        lockstep_load_error_t err;
        CHECK(lockstep_load("/nonexistent", &p, &err) == NULL);
        fprintf(stderr, "no CUDA runtime or GPU: skipped\n");
        return TEST_SKIP;
    }
    void *rt = dlopen("libcudart.so", RTLD_NOW);
    if (!rt)
        rt = dlopen("/usr/local/cuda/lib64/libcudart.so", RTLD_NOW);
    CHECK(rt != NULL);
    memcpy_d2h = (__typeof__(cudaMemcpy) *)dlsym(rt, "cudaMemcpy");
    dev_malloc = (__typeof__(cudaMalloc) *)dlsym(rt, "cudaMalloc");
    CHECK(memcpy_d2h && dev_malloc);
    /* a file with a header and two tensors, one crossing many 64 KiB chunks */
    const char *hdr = "{\"a\":{\"dtype\":\"F32\",\"shape\":[300000],\"data_offsets\":[0,1200000]},"
                      "\"b\":{\"dtype\":\"U8\",\"shape\":[5],\"data_offsets\":[1200000,1200005]}}";
    uint64_t hl = strlen(hdr);
    size_t data_len = 1200005;
    unsigned char *data = malloc(data_len);
    CHECK(data != NULL);
    for (size_t i = 0; i < data_len; i++)
        data[i] = (unsigned char)(i * 131 + 7) & 0x3f; /* finite f32 patterns */
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(&hl, 8, 1, f) == 1 && fwrite(hdr, 1, hl, f) == hl && fwrite(data, 1, data_len, f) == data_len);
    fclose(f);
    for (int mode = LOCKSTEP_LOAD_AUTO; mode <= LOCKSTEP_LOAD_BUFFERED; mode++)
        for (int dest = 0; dest < 2; dest++) {
            if (mode == LOCKSTEP_LOAD_ALIAS)
                continue;
            p.mode = (lockstep_load_mode_t)mode;
            p.chunk_bytes = 64 << 10;
            p.check = 1;
            p.dest = dest ? to_device : NULL;
            lockstep_load_error_t err;
            lockstep_loaded_t *l = lockstep_load(path, &p, &err);
            if (!l) {
                fprintf(stderr, "%s\n", err.message);
                return 1;
            }
            const lockstep_model_t *m = lockstep_loaded_model(l);
            for (size_t i = 0; i < lockstep_model_tensor_count(m); i++) {
                const lockstep_tensor_info_t *t = lockstep_model_tensor(m, i);
                unsigned char *back = malloc(t->size);
                CHECK(back && memcpy_d2h(back, lockstep_loaded_data(l, i), t->size, cudaMemcpyDeviceToHost) == cudaSuccess);
                CHECK(memcmp(back, data + (t->offset - 8 - hl), t->size) == 0);
                free(back);
            }
            lockstep_loaded_free(l); /* caller buffers (dest) stay the caller's */
        }
    unlink(path);
    free(data);
    return 0;
}
