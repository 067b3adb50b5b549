/* gemm_scalar.c: the reference for gemm/gemv (bf16 and f32 weights). See gemm.h for the order. */
#include <math.h>
#include <string.h>
#include "gemm.h"

static float bf16_to_f32(uint16_t bits) {
    uint32_t wide = (uint32_t)bits << 16;
    float f;
    memcpy(&f, &wide, sizeof f);
    return f;
}

static float reduce_lanes(float lane[16]) {
    for (int h = 8; h >= 1; h /= 2)
        for (int i = 0; i < h; i++) lane[i] += lane[i + h];
    return lane[0];
}

static float row_dot_bf16(const uint16_t *w, const float *x, size_t cols) {
    float lane[16] = {0};
    for (size_t k = 0; k < cols; k++) lane[k % 16] = fmaf(bf16_to_f32(w[k]), x[k], lane[k % 16]);
    return reduce_lanes(lane);
}

static float row_dot_f32(const float *w, const float *x, size_t cols) {
    float lane[16] = {0};
    for (size_t k = 0; k < cols; k++) lane[k % 16] = fmaf(w[k], x[k], lane[k % 16]);
    return reduce_lanes(lane);
}

void k3_gemm_bf16_rows_scalar(const void *w, size_t ld, const float *x, size_t ldx, float *y, size_t ldy,
                              size_t cols, size_t batch, size_t row_begin, size_t row_end) {
    const uint16_t *wb = w;
    for (size_t r = row_begin; r < row_end; r++)
        for (size_t b = 0; b < batch; b++) y[b * ldy + r] = row_dot_bf16(wb + r * ld, x + b * ldx, cols);
}

void k3_gemm_f32_rows_scalar(const void *w, size_t ld, const float *x, size_t ldx, float *y, size_t ldy,
                             size_t cols, size_t batch, size_t row_begin, size_t row_end) {
    const float *wf = w;
    for (size_t r = row_begin; r < row_end; r++)
        for (size_t b = 0; b < batch; b++) y[b * ldy + r] = row_dot_f32(wf + r * ld, x + b * ldx, cols);
}
