/* How much of a file is in the page cache, sampled (mincore on the model's mapping). */
#define _GNU_SOURCE
#include <errno.h>
#include <sys/mman.h>
#include <unistd.h>

#include "pipeline.h"

/* Fraction of the selection's pages (the tensors as selected, in file order) in the
 * page cache: every page of a small selection, windows spread over a large one. */
double ls_load_resident(const lockstep_model_t *m, const lockstep_tensor_info_t *tensors, const size_t *sel,
                        size_t n_sel)
{
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE), pages = 0;
    for (size_t k = 0; k < n_sel; k++) {
        const lockstep_tensor_info_t *t = &tensors[sel[k]];
        if (t->size)
            pages += (align_up(t->offset + t->size, page) - align_down(t->offset, page)) / page;
    }
    /* a window of `window` pages every `step` pages of the selection */
    uint64_t window = RESIDENT_WINDOW, step = pages / RESIDENT_WINDOWS;
    if (step <= window)
        window = step = pages ? pages : 1;
    unsigned char vec[4096];
    uint64_t in = 0, all = 0, pos = 0, next = 0; /* pages before this tensor; the next window */
    for (size_t k = 0; k < n_sel; k++) {
        const lockstep_tensor_info_t *t = &tensors[sel[k]];
        if (!t->size)
            continue;
        uint64_t a = align_down(t->offset, page), b = align_up(t->offset + t->size, page);
        if (b > align_up(m->map_len, page))
            return 0;
        uint64_t n = (b - a) / page;
        for (; next < pos + n; next += step) {
            uint64_t at = next - pos, len = n - at < window ? n - at : window;
            for (uint64_t x = 0; x < len; x += sizeof vec) {
                uint64_t part = len - x < sizeof vec ? len - x : sizeof vec;
                if (mincore((char *)m->map + a + (at + x) * page, part * page, vec) != 0)
                    return 0;
                for (uint64_t i = 0; i < part; i++)
                    in += vec[i] & 1;
                all += part;
            }
        }
        pos += n;
    }
    return all ? (double)in / (double)all : 1.0;
}

int lockstep_model_resident(const lockstep_model_t *m, double *fraction)
{
    if (!m || !fraction || !m->map)
        return -EINVAL;
    lockstep_tensor_info_t data = {0};
    data.offset = m->data_offset;
    data.size = m->map_len > m->data_offset ? m->map_len - m->data_offset : 0;
    size_t all = 0;
    *fraction = ls_load_resident(m, &data, &all, 1);
    return 0;
}
