/* scale.c: the E2M1 and E8M0 tables, 0xFF detection and the even/odd activation split. */
#include <math.h>
#include <string.h>
#include "mxfp4.h"

const float k3_e2m1[16] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f,
                           -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
float k3_e8m0[256];
float k3_scaled_e2m1[256][16] __attribute__((aligned(64)));
uint8_t k3_bf16_bytes[256][32] __attribute__((aligned(32)));
float k3_pow2_minus128[256];

/* 2^(s-127) built from bits, so nothing depends on libm: s >= 1 is a normal float with exponent
   field s; s = 0 is the subnormal 2^-127 = 2^22 * 2^-149 (mantissa bit 22). */
void k3_mxfp4_init_tables(void) {
    for (int s = 0; s < 256; s++) {
        uint32_t bits = s == 0 ? 0x00400000u : s == 255 ? 0x7FC00000u : (uint32_t)s << 23;
        memcpy(&k3_e8m0[s], &bits, sizeof bits);
        uint32_t half = s == 255 ? 0x7FC00000u : s == 0 ? 0x00200000u : s == 1 ? 0x00400000u : (uint32_t)(s - 1) << 23;
        memcpy(&k3_pow2_minus128[s], &half, sizeof half);
        for (int c = 0; c < 16; c++) k3_scaled_e2m1[s][c] = k3_e2m1[c] * k3_e8m0[s];
        for (int c = 0; c < 16; c++) {
            uint32_t bits;
            memcpy(&bits, &k3_scaled_e2m1[s][c], sizeof bits);
            k3_bf16_bytes[s][c] = (uint8_t)(bits >> 24);
            k3_bf16_bytes[s][16 + c] = (uint8_t)(bits >> 16);
        }
    }
}

ptrdiff_t k3_mxfp4_find_bad_scale(const uint8_t *scales, size_t n) {
    const uint8_t *hit = memchr(scales, 0xFF, n);
    return hit ? hit - scales : -1;
}

void k3_mxfp4_split_activations(const float *x, size_t cols, size_t batch, float *xs) {
    for (size_t b = 0; b < batch; b++) {
        const float *xr = x + b * cols;
        float *o = xs + b * cols;
        for (size_t k = 0; k < cols; k += 32)
            for (int i = 0; i < 16; i++) {
                o[k + i] = xr[k + 2 * i];
                o[k + 16 + i] = xr[k + 2 * i + 1];
            }
    }
}

void k3_mxfp4_dequantize(const k3_mxfp4_matrix *m, float *out) {
    size_t n_blocks = m->rows * (m->cols / 32);
    for (size_t blk = 0; blk < n_blocks; blk++) {
        float scale = k3_e8m0[m->scales[blk]];
        const uint8_t *q = m->packed + 16 * blk;
        float *o = out + 32 * blk;
        for (int j = 0; j < 16; j++) {
            o[2 * j] = k3_e2m1[q[j] & 15] * scale;
            o[2 * j + 1] = k3_e2m1[q[j] >> 4] * scale;
        }
    }
}
