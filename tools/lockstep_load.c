/* lockstep-load FILE [--to host|cuda] [--mode auto|alias|copy|buffered|map] [--check]
 *                    [--readers N] [--chunk-mib N] [--json]
 * Load a GGUF or safetensors file with lockstep's loader, show a progress bar when
 * stderr is a terminal, and print a closing line: bytes, seconds, GB/s, CPU-seconds
 * per GB, and how the data was read. `lockstep load FILE` runs this. Exit 0, 1 on a
 * load error (the message names what and where), 2 on bad usage. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lockstep/lockstep.h"

static const char *mode_names[] = {"auto", "alias", "copy", "buffered", "map"};

static int usage(void)
{
    fprintf(stderr, "usage: lockstep-load FILE [--to host|cuda] [--mode auto|alias|copy|buffered|map] "
                    "[--check] [--readers N] [--chunk-mib N] [--json]\n");
    return 2;
}

static int bar(void *arg, uint64_t done, uint64_t total)
{
    (void)arg;
    int width = 40, fill = total ? (int)((double)done / (double)total * width) : width;
    fprintf(stderr, "\r[%.*s%*s] %5.1f%%  %.2f / %.2f GB", fill,
            "########################################", width - fill, "",
            total ? 100.0 * (double)done / (double)total : 100.0, (double)done / 1e9, (double)total / 1e9);
    return 0;
}

int main(int argc, char **argv)
{
    const char *path = NULL;
    int json = 0;
    lockstep_load_params_t p = lockstep_load_params_default();
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--check") == 0)
            p.check = 1;
        else if (strcmp(a, "--json") == 0)
            json = 1;
        else if (strcmp(a, "--to") == 0 && v) {
            i++;
            if (strcmp(v, "host") == 0)
                p.sink = LOCKSTEP_SINK_HOST;
            else if (strcmp(v, "cuda") == 0)
                p.sink = LOCKSTEP_SINK_CUDA;
            else
                return usage();
        } else if (strcmp(a, "--mode") == 0 && v) {
            i++;
            int m = -1;
            for (int k = 0; k < (int)(sizeof mode_names / sizeof mode_names[0]); k++)
                if (strcmp(v, mode_names[k]) == 0)
                    m = k;
            if (m < 0)
                return usage();
            p.mode = (lockstep_load_mode_t)m;
        } else if (strcmp(a, "--readers") == 0 && v) {
            i++;
            p.n_readers = atoi(v);
        } else if (strcmp(a, "--chunk-mib") == 0 && v) {
            i++;
            p.chunk_bytes = (size_t)atoi(v) << 20;
        } else if (a[0] == '-' || path)
            return usage();
        else
            path = a;
    }
    if (!path)
        return usage();
    int tty = isatty(2) && !json;
    if (tty)
        p.progress = bar;
    lockstep_load_error_t err;
    lockstep_loaded_t *l = lockstep_load(path, &p, &err);
    if (tty)
        fputc('\n', stderr);
    if (!l) {
        fprintf(stderr, "lockstep load: %s: %s", path, err.message[0] ? err.message : lockstep_strerror(err.code));
        if (err.code == -LOCKSTEP_EBADFILE)
            fprintf(stderr, " (at byte %llu)", (unsigned long long)err.offset);
        fputc('\n', stderr);
        return 1;
    }
    lockstep_load_stats_t s;
    lockstep_loaded_stats(l, &s);
    size_t n = lockstep_model_tensor_count(lockstep_loaded_model(l));
    double gbs = s.seconds > 0 ? (double)s.bytes / s.seconds / 1e9 : 0;
    double cpu_gb = s.bytes ? s.cpu_seconds / ((double)s.bytes / 1e9) : 0;
    if (json)
        printf("{\"bytes\": %llu, \"tensors\": %zu, \"seconds\": %.6f, \"gb_per_s\": %.4f, "
               "\"cpu_s_per_gb\": %.4f, \"mode\": \"%s\", \"direct_fallback\": %s, "
               "\"fallback_offset\": %llu, \"resident\": %.3f, \"checked\": %s}\n",
               (unsigned long long)s.bytes, n, s.seconds, gbs, cpu_gb, mode_names[s.mode],
               s.direct_fallback ? "true" : "false", (unsigned long long)s.fallback_offset, s.resident,
               p.check ? "true" : "false");
    else {
        printf("loaded %zu tensors, %llu bytes in %.3f s: %.2f GB/s, %.3f CPU-s/GB (mode %s%s",
               n, (unsigned long long)s.bytes, s.seconds, gbs, cpu_gb, mode_names[s.mode],
               p.sink == LOCKSTEP_SINK_CUDA ? ", to cuda" : "");
        if (s.direct_fallback)
            printf(", direct I/O refused: buffered from byte %llu", (unsigned long long)s.fallback_offset);
        printf("%s; %.0f %% was in the page cache)\n", p.check ? ", values checked" : "", 100 * s.resident);
    }
    lockstep_loaded_free(l);
    return 0;
}
