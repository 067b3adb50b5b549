/* mla_simd_scalar.c: the reference inner loops (orders in mla_simd.h). */
#include <math.h>
#include <string.h>
#include "mla_simd.h"

static float widen(uint16_t bits) {
    uint32_t w = (uint32_t)bits << 16;
    float f;
    memcpy(&f, &w, sizeof f);
    return f;
}

static float reduce(float lane[16]) {
    for (int h = 8; h >= 1; h /= 2)
        for (int i = 0; i < h; i++) lane[i] += lane[i + h];
    return lane[0];
}

static void scores_f32(size_t nrows, size_t npos, size_t D, const float *Q, size_t ldq, const float *K, size_t ldk,
                       float *out, size_t ldo) {
    for (size_t r = 0; r < nrows; r++)
        for (size_t s = 0; s < npos; s++) {
            float lane[16] = {0};
            for (size_t p = 0; p < D; p++) lane[p % 16] = fmaf(Q[r * ldq + p], K[s * ldk + p], lane[p % 16]);
            out[r * ldo + s] = reduce(lane);
        }
}

static void scores_bf16(size_t nrows, size_t npos, size_t D, const float *Q, size_t ldq, const uint16_t *K, size_t ldk,
                        float *out, size_t ldo) {
    for (size_t r = 0; r < nrows; r++)
        for (size_t s = 0; s < npos; s++) {
            float lane[16] = {0};
            for (size_t p = 0; p < D; p++) lane[p % 16] = fmaf(Q[r * ldq + p], widen(K[s * ldk + p]), lane[p % 16]);
            out[r * ldo + s] = reduce(lane);
        }
}

const mla_kernels mla_kernels_scalar = {scores_f32, scores_bf16};
