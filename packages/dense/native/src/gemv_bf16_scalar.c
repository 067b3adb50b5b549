/* gemv_bf16_scalar.c: the reference. Every SIMD variant must match it bit for bit. */
#include <math.h>
#include <string.h>
#include "gemv_bf16.h"

static float bf16_to_f32(uint16_t bits) {
    uint32_t wide = (uint32_t)bits << 16;
    float f;
    memcpy(&f, &wide, sizeof f);
    return f;
}

static float row_dot(const uint16_t *w, const float *x, size_t cols) {
    float lane[16] = {0};
    for (size_t k = 0; k < cols; k++) lane[k % 16] = fmaf(bf16_to_f32(w[k]), x[k], lane[k % 16]);
    for (int h = 8; h >= 1; h /= 2)
        for (int i = 0; i < h; i++) lane[i] += lane[i + h];
    return lane[0];
}

void k3_gemv_bf16_rows_scalar(const uint16_t *w, size_t ld, const float *x, float *y,
                              size_t row_begin, size_t row_end, size_t cols) {
    for (size_t r = row_begin; r < row_end; r++) y[r] = row_dot(w + r * ld, x, cols);
}
