/*
 * k3_lane_sums.h: the fixed horizontal sums every SIMD kernel of k3 ends with.
 *
 * Sixteen lane partials are folded as lane[i] += lane[i + h] for h = 8, 4, 2, 1 (the order written
 * next to each scalar reference), so a kernel's result does not depend on its ISA. Include it after
 * the file's `#pragma GCC target(...)`: each variant exists only where its ISA is enabled.
 */
#ifndef K3_LANE_SUMS_H
#define K3_LANE_SUMS_H
#include <immintrin.h>

#if defined(__AVX2__)
/* lanes 0-7 in lo, 8-15 in hi */
static inline float k3_lanes16_sum_avx2(__m256 lo, __m256 hi) {
    __m256 s8 = _mm256_add_ps(lo, hi);
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    __m128 s1 = _mm_add_ss(s2, _mm_movehdup_ps(s2));
    return _mm_cvtss_f32(s1);
}
#endif

#if defined(__AVX512F__)
static inline float k3_lanes16_sum_avx512(__m512 v) {
    return k3_lanes16_sum_avx2(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
}
#endif

#endif
