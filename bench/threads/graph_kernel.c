/* The graph benchmark's work: one share of a small f32 matrix-vector product.
 * Sixteen independent partial sums let the compiler vectorise the dot product without
 * -ffast-math, as ggml's kernels are vectorised, so the barrier is a visible part of a
 * node's cost the way it is in inference. */
#include "bench_common.h"

void graph_node_share(struct graph_data *g, int node, int ith, int nth)
{
    const float *m = (node & 1) ? g->b : g->a;
    const float *in = (node & 1) ? g->y : g->x;
    float *out = (node & 1) ? g->x : g->y;
    int rows = (node & 1) ? ROWS_B : ROWS_A, cols = (node & 1) ? COLS_B : COLS_A;
    int per = rows / nth, rem = rows % nth;
    int r0 = ith * per + (ith < rem ? ith : rem);
    int r1 = r0 + per + (ith < rem ? 1 : 0);
    for (int r = r0; r < r1; r++) {
        const float *row = m + (size_t)r * cols;
        float acc[16] = {0};
        for (int c = 0; c < cols; c += 16)
            for (int j = 0; j < 16; j++)
                acc[j] += row[c + j] * in[c + j];
        float s = 0.0f;
        for (int j = 0; j < 16; j++)
            s += acc[j];
        out[r] = s;
    }
}
