/*
 * mla_simd_avx512.c: AVX-512 inner loops, same per-element order as mla_simd_scalar.c. Each dot
 * keeps its own 16-lane accumulator (lane p % 16), so tiling rows and positions changes nothing.
 */
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl")
#include <immintrin.h>
#include "mla_simd.h"

#define INLINE static inline __attribute__((always_inline))

static __mmask16 mask_for(size_t n) { return n >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1); }

INLINE __m512 load_row(const void *base, const int bf16, size_t idx, __mmask16 m) {
    if (bf16) {
        __m256i raw = _mm256_maskz_loadu_epi16(m, (const uint16_t *)base + idx);
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
    }
    return _mm512_maskz_loadu_ps(m, (const float *)base + idx);
}

static float reduce16(__m512 v) {
    __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    __m128 s1 = _mm_add_ss(s2, _mm_movehdup_ps(s2));
    return _mm_cvtss_f32(s1);
}

/* R query rows x NP positions of dots, each with its own accumulator. */
INLINE void score_tile(const int R, const int NP, const int bf16, size_t D, const float *Q, size_t ldq, const void *K,
                       size_t ldk, float *out, size_t ldo) {
    __m512 acc[2][4];
    for (int r = 0; r < R; r++)
        for (int s = 0; s < NP; s++) acc[r][s] = _mm512_setzero_ps();
    for (size_t p = 0; p < D; p += 16) {
        __mmask16 m = mask_for(D - p);
        __m512 k[4];
        for (int s = 0; s < NP; s++) k[s] = load_row(K, bf16, s * ldk + p, m);
        for (int r = 0; r < R; r++) {
            __m512 q = _mm512_maskz_loadu_ps(m, Q + r * ldq + p);
            for (int s = 0; s < NP; s++) acc[r][s] = _mm512_mask3_fmadd_ps(q, k[s], acc[r][s], m);
        }
    }
    for (int r = 0; r < R; r++)
        for (int s = 0; s < NP; s++) out[r * ldo + s] = reduce16(acc[r][s]);
}

INLINE void scores_impl(const int bf16, size_t nrows, size_t npos, size_t D, const float *Q, size_t ldq, const void *K,
                        size_t ldk, float *out, size_t ldo) {
    size_t esz = bf16 ? 2 : 4;
    size_t r = 0;
    for (; r + 2 <= nrows; r += 2) {
        size_t s = 0;
        for (; s + 4 <= npos; s += 4)
            score_tile(2, 4, bf16, D, Q + r * ldq, ldq, (const char *)K + s * ldk * esz, ldk, out + r * ldo + s, ldo);
        for (; s < npos; s++)
            score_tile(2, 1, bf16, D, Q + r * ldq, ldq, (const char *)K + s * ldk * esz, ldk, out + r * ldo + s, ldo);
    }
    for (; r < nrows; r++) {
        size_t s = 0;
        for (; s + 4 <= npos; s += 4)
            score_tile(1, 4, bf16, D, Q + r * ldq, ldq, (const char *)K + s * ldk * esz, ldk, out + r * ldo + s, ldo);
        for (; s < npos; s++)
            score_tile(1, 1, bf16, D, Q + r * ldq, ldq, (const char *)K + s * ldk * esz, ldk, out + r * ldo + s, ldo);
    }
}

static void scores_f32(size_t nrows, size_t npos, size_t D, const float *Q, size_t ldq, const float *K, size_t ldk,
                       float *out, size_t ldo) {
    scores_impl(0, nrows, npos, D, Q, ldq, K, ldk, out, ldo);
}

static void scores_bf16(size_t nrows, size_t npos, size_t D, const float *Q, size_t ldq, const uint16_t *K, size_t ldk,
                        float *out, size_t ldo) {
    scores_impl(1, nrows, npos, D, Q, ldq, K, ldk, out, ldo);
}

const mla_kernels mla_kernels_avx512 = {scores_f32, scores_bf16};
