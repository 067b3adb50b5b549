/* matmul_scalar.c: the reference packed MXFP4 product (order in include/k3_mxfp4.h). */
#include <math.h>
#include "mxfp4.h"

static float row_dot(const uint8_t *packed, const uint8_t *scales, const float *xs, size_t cols) {
    float lane[32] = {0};
    for (size_t b = 0; b < cols / 32; b++) {
        float scale = k3_e8m0[scales[b]];
        const uint8_t *q = packed + 16 * b;
        const float *xe = xs + 32 * b, *xo = xe + 16;
        for (int i = 0; i < 16; i++) {
            uint8_t byte = q[i];
            float w_even = k3_e2m1[byte & 15] * scale;
            float w_odd = k3_e2m1[byte >> 4] * scale;
            lane[i] = fmaf(w_even, xe[i], lane[i]);
            lane[16 + i] = fmaf(w_odd, xo[i], lane[16 + i]);
        }
    }
    for (int h = 16; h >= 1; h /= 2)
        for (int i = 0; i < h; i++) lane[i] += lane[i + h];
    return lane[0];
}

void k3_mxfp4_rows_scalar(const k3_mxfp4_matrix *m, const float *xs, float *y, size_t batch,
                          size_t row_begin, size_t row_end) {
    size_t cols = m->cols;
    for (size_t r = row_begin; r < row_end; r++)
        for (size_t b = 0; b < batch; b++)
            y[b * m->rows + r] = row_dot(m->packed + r * (cols / 2), m->scales + r * (cols / 32), xs + b * cols, cols);
}
