/*
 * k3_tanh_avx2.h: k3_tanhf (k3_tanh.h) 8 lanes at a time, step for step: both branches are computed
 * and the lane takes the one the scalar function would, so every lane has its bits. Include it from
 * a file compiled for AVX2 + FMA.
 */
#ifndef K3_TANH_AVX2_H
#define K3_TANH_AVX2_H
#include <immintrin.h>
#include "k3_exp_avx2.h"
#include "k3_tanh.h"

static inline __m256 k3_tanhf8(__m256 x) {
    const __m256 sign = _mm256_set1_ps(-0.0f), one = _mm256_set1_ps(1.0f);
    __m256 z = _mm256_andnot_ps(sign, x);
    __m256 s = _mm256_mul_ps(x, x);
    __m256 p = _mm256_fmadd_ps(_mm256_set1_ps(K3_TANH_P0), s, _mm256_set1_ps(K3_TANH_P1));
    p = _mm256_fmadd_ps(p, s, _mm256_set1_ps(K3_TANH_P2));
    p = _mm256_fmadd_ps(p, s, _mm256_set1_ps(K3_TANH_P3));
    p = _mm256_fmadd_ps(p, s, _mm256_set1_ps(K3_TANH_P4));
    __m256 small = _mm256_fmadd_ps(_mm256_mul_ps(p, s), x, x);
    __m256 t = _mm256_sub_ps(one, _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(k3_expf8(_mm256_add_ps(z, z)), one)));
    __m256 large = _mm256_or_ps(t, _mm256_and_ps(x, sign)); /* copysignf: t >= 0 */
    __m256 r = _mm256_blendv_ps(small, large, _mm256_cmp_ps(z, _mm256_set1_ps(K3_TANH_SMALL), _CMP_GE_OQ));
    __m256 keep = _mm256_or_ps(_mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_EQ_OQ), _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
    return _mm256_blendv_ps(r, x, keep);
}

#endif
