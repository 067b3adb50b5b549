/*
 * matmul_avx2.c: packed MXFP4 on AVX2 + FMA (order in include/k3_mxfp4.h).
 *
 * vpermps on ymm reads 3 index bits, so the table holds the 8 magnitudes (pre-scaled by the block
 * scale, exact) and the sign bit of the nibble is moved into the float sign with a shift and an AND, then
 * XORed in (code 8 gives -0 exactly like the scalar table). The 32 lanes of a dot product live in
 * four ymm: even lanes 0-7 / 8-15 and odd lanes 16-23 / 24-31.
 */
#pragma GCC target("avx2,fma")
#include <immintrin.h>
#include "k3_lane_sums.h"
#include "mxfp4.h"

static float reduce32(__m256 e0, __m256 e1, __m256 o0, __m256 o1) {
    return k3_lanes16_sum_avx2(_mm256_add_ps(e0, o0), _mm256_add_ps(e1, o1)); /* h = 16, then the 16-lane tree */
}

typedef struct {
    __m256 even, odd;
} decoded8;

/* 8 packed bytes (zero-extended to dwords) -> 8 even and 8 odd weights. */
static inline decoded8 decode8(__m256i q, __m256 magnitudes) {
    const __m256i sign = _mm256_set1_epi32((int)0x80000000u);
    __m256 even = _mm256_permutevar8x32_ps(magnitudes, q);
    __m256 odd = _mm256_permutevar8x32_ps(magnitudes, _mm256_srli_epi32(q, 4));
    __m256i sign_even = _mm256_and_si256(_mm256_slli_epi32(q, 28), sign);
    __m256i sign_odd = _mm256_and_si256(_mm256_slli_epi32(q, 24), sign);
    decoded8 d = {_mm256_xor_ps(even, _mm256_castsi256_ps(sign_even)), _mm256_xor_ps(odd, _mm256_castsi256_ps(sign_odd))};
    return d;
}

static float row_dot(const uint8_t *packed, const uint8_t *scales, const float *xs, size_t cols) {
    __m256 e0 = _mm256_setzero_ps(), e1 = e0, o0 = e0, o1 = e0;
    for (size_t blk = 0; blk < cols / 32; blk++) {
        __m256 magnitudes = _mm256_load_ps(k3_scaled_e2m1[scales[blk]]); /* the 8 scaled magnitudes */
        const uint8_t *q = packed + 16 * blk;
        const float *xe = xs + 32 * blk, *xo = xe + 16;
        /* lanes 0-7 read bytes 0-7, lanes 8-15 bytes 8-15, one byte per dword */
        decoded8 a = decode8(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)q)), magnitudes);
        decoded8 b = decode8(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(q + 8))), magnitudes);
        e0 = _mm256_fmadd_ps(a.even, _mm256_loadu_ps(xe), e0);
        e1 = _mm256_fmadd_ps(b.even, _mm256_loadu_ps(xe + 8), e1);
        o0 = _mm256_fmadd_ps(a.odd, _mm256_loadu_ps(xo), o0);
        o1 = _mm256_fmadd_ps(b.odd, _mm256_loadu_ps(xo + 8), o1);
    }
    return reduce32(e0, e1, o0, o1);
}

void k3_mxfp4_rows_avx2(const k3_mxfp4_matrix *m, const float *xs, float *y, size_t batch,
                        size_t row_begin, size_t row_end) {
    size_t cols = m->cols;
    for (size_t r = row_begin; r < row_end; r++)
        for (size_t b = 0; b < batch; b++)
            y[b * m->rows + r] = row_dot(m->packed + r * (cols / 2), m->scales + r * (cols / 32), xs + b * cols, cols);
}
