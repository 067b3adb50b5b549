/*
 * matmul_int8_avx2.c: the int8 path on AVX2 without VNNI (order in matmul_int8.h; same bits as the
 * scalar reference and the VNNI kernels). The weights are the unsigned LUT2 + 12 (vpshufb on the
 * nibbles); vpmaddubsw multiplies them by the signed activations and sums pairs (|sum| <= 2 * 24 * 127,
 * no saturation), the even and odd int16 sums are added (<= 12192), vpmaddwd sums them per 4 bytes into
 * the dword of lane L, and -12 * sum(q) of those bytes (precomputed per activation row) makes the dot
 * exact. Each row's 64-byte group is decoded once for all activation rows.
 */
#pragma GCC target("avx2,fma")
#include <immintrin.h>
#include <string.h>
#include "k3_lane_sums.h"
#include "matmul_int8.h"

/* 2^(s-128) for every scale byte (s = 0 is the subnormal 2^-128; 255 NaN), bits built like k3_e8m0. */
static float pow2_minus128(uint8_t s) {
    uint32_t bits = s == 255 ? 0x7FC00000u : s == 0 ? 0x00200000u : s == 1 ? 0x00400000u : (uint32_t)(s - 1) << 23;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

void k3_mxfp4_int8_row_avx2(const k3_mxfp4_matrix *m, size_t r, const k3_int8_activations *acts, size_t batch, float *y) {
    const size_t n_blocks = m->cols / 32, groups = (n_blocks + 3) / 4;
    const uint8_t *packed = m->packed + r * (m->cols / 2), *scales = m->scales + r * n_blocks;
    const __m256i table = _mm256_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0,
                                           12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0);
    const __m256i low4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
    for (size_t b0 = 0; b0 < batch; b0 += 2) {
        const int nb = batch - b0 >= 2 ? 2 : 1;
        __m256 acc[2][2] = {{_mm256_setzero_ps(), _mm256_setzero_ps()}, {_mm256_setzero_ps(), _mm256_setzero_ps()}};
        for (size_t g = 0; g < groups; g++) {
            size_t left = n_blocks - 4 * g;
            uint8_t tail[64];
            const uint8_t *src = packed + 64 * g;
            if (left < 4) { /* a short last group: the missing bytes read as 0, never past the row */
                memset(tail, 0, sizeof tail);
                memcpy(tail, src, 16 * left);
                src = tail;
            }
            __m256i wl[2], wh[2];
            __m256 p2[2];
            for (int h = 0; h < 2; h++) {
                __m256i v = _mm256_loadu_si256((const __m256i *)(src + 32 * h));
                wl[h] = _mm256_shuffle_epi8(table, _mm256_and_si256(v, low4));
                wh[h] = _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(v, 4), low4));
                size_t b_lo = 4 * g + 2 * (size_t)h, b_hi = b_lo + 1; /* lanes 0-3 / 4-7 of this half */
                float f_lo = b_lo < n_blocks ? pow2_minus128(scales[b_lo]) : 0.0f;
                float f_hi = b_hi < n_blocks ? pow2_minus128(scales[b_hi]) : 0.0f;
                p2[h] = _mm256_setr_ps(f_lo, f_lo, f_lo, f_lo, f_hi, f_hi, f_hi, f_hi);
            }
            for (int j = 0; j < nb; j++) {
                const k3_int8_activations *a = &acts[b0 + (size_t)j];
                for (int h = 0; h < 2; h++) {
                    __m256i xe = _mm256_loadu_si256((const __m256i *)(a->q_even + 64 * g + 32 * h));
                    __m256i xo = _mm256_loadu_si256((const __m256i *)(a->q_odd + 64 * g + 32 * h));
                    __m256i pairs = _mm256_add_epi16(_mm256_maddubs_epi16(wl[h], xe), _mm256_maddubs_epi16(wh[h], xo));
                    __m256i dot = _mm256_add_epi32(_mm256_madd_epi16(pairs, ones),
                                                   _mm256_loadu_si256((const __m256i *)(a->neg12_sums + 16 * g + 8 * h)));
                    __m256 f = _mm256_mul_ps(_mm256_loadu_ps(a->d_lanes + 16 * g + 8 * h), p2[h]);
                    acc[j][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), f, acc[j][h]);
                }
            }
        }
        for (int j = 0; j < nb; j++) y[(b0 + (size_t)j) * m->rows + r] = k3_lanes16_sum_avx2(acc[j][0], acc[j][1]);
    }
}
