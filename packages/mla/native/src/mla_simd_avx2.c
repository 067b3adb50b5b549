/*
 * mla_simd_avx2.c: AVX2 + FMA inner loops, same per-element order as mla_simd_scalar.c. A dot's
 * 16 lanes live in two registers (lanes 0-7, 8-15); a tail shorter than 16 finishes lane by lane
 * with fmaf (one rounding, like the vector FMA).
 */
#pragma GCC target("avx2,fma")
#include <immintrin.h>
#include <math.h>
#include <string.h>
#include "mla_simd.h"

#define INLINE static inline __attribute__((always_inline))

INLINE __m256 load8(const void *base, const int bf16, size_t idx) {
    if (bf16) {
        __m128i raw = _mm_loadu_si128((const __m128i *)((const uint16_t *)base + idx));
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(raw), 16));
    }
    return _mm256_loadu_ps((const float *)base + idx);
}

INLINE float elem(const void *base, const int bf16, size_t idx) {
    if (bf16) {
        uint32_t w = (uint32_t)((const uint16_t *)base)[idx] << 16;
        float f;
        memcpy(&f, &w, sizeof f);
        return f;
    }
    return ((const float *)base)[idx];
}

static float reduce16(__m256 lo, __m256 hi) {
    __m256 s8 = _mm256_add_ps(lo, hi);
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    __m128 s1 = _mm_add_ss(s2, _mm_movehdup_ps(s2));
    return _mm_cvtss_f32(s1);
}

/* One query row against NP positions. */
INLINE void score_tile(const int NP, const int bf16, size_t D, const float *q, const void *K, size_t ldk, float *out) {
    __m256 lo[4], hi[4];
    for (int s = 0; s < NP; s++) lo[s] = hi[s] = _mm256_setzero_ps();
    size_t p = 0;
    for (; p + 16 <= D; p += 16) {
        __m256 q0 = _mm256_loadu_ps(q + p), q1 = _mm256_loadu_ps(q + p + 8);
        for (int s = 0; s < NP; s++) {
            lo[s] = _mm256_fmadd_ps(q0, load8(K, bf16, s * ldk + p), lo[s]);
            hi[s] = _mm256_fmadd_ps(q1, load8(K, bf16, s * ldk + p + 8), hi[s]);
        }
    }
    for (int s = 0; s < NP; s++) {
        if (p < D) {
            float lane[16];
            _mm256_storeu_ps(lane, lo[s]);
            _mm256_storeu_ps(lane + 8, hi[s]);
            for (size_t t = p; t < D; t++) lane[t - p] = fmaf(q[t], elem(K, bf16, s * ldk + t), lane[t - p]);
            lo[s] = _mm256_loadu_ps(lane);
            hi[s] = _mm256_loadu_ps(lane + 8);
        }
        out[s] = reduce16(lo[s], hi[s]);
    }
}

INLINE void scores_impl(const int bf16, size_t nrows, size_t npos, size_t D, const float *Q, size_t ldq, const void *K,
                        size_t ldk, float *out, size_t ldo) {
    size_t esz = bf16 ? 2 : 4;
    for (size_t r = 0; r < nrows; r++) {
        size_t s = 0;
        for (; s + 4 <= npos; s += 4) score_tile(4, bf16, D, Q + r * ldq, (const char *)K + s * ldk * esz, ldk, out + r * ldo + s);
        for (; s < npos; s++) score_tile(1, bf16, D, Q + r * ldq, (const char *)K + s * ldk * esz, ldk, out + r * ldo + s);
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

const mla_kernels mla_kernels_avx2 = {scores_f32, scores_bf16};
