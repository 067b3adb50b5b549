/*
 * k3_exp_avx2.h: k3_expf (k3_exp.h) 8 lanes at a time, step for step: the same constants, the same
 * fused and unfused operations in the same order, so every lane has the scalar function's bits.
 * Include it from a file compiled for AVX2 + FMA (#pragma GCC target("avx2,fma") before it).
 */
#ifndef K3_EXP_AVX2_H
#define K3_EXP_AVX2_H
#include <immintrin.h>
#include "k3_exp.h"

static inline __m256 k3_expf8(__m256 x) {
    __m256 xc = _mm256_max_ps(_mm256_min_ps(x, _mm256_set1_ps(K3_EXP_HIGH)), _mm256_set1_ps(K3_EXP_LOW));
    __m256 n = _mm256_floor_ps(_mm256_add_ps(_mm256_mul_ps(xc, _mm256_set1_ps(K3_EXP_LOG2E)), _mm256_set1_ps(0.5f)));
    __m256 r = _mm256_fmadd_ps(n, _mm256_set1_ps(-K3_EXP_LN2_HI), xc);
    r = _mm256_fmadd_ps(n, _mm256_set1_ps(-K3_EXP_LN2_LO), r);
    __m256 p = _mm256_set1_ps(K3_EXP_P0);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(K3_EXP_P1));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(K3_EXP_P2));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(K3_EXP_P3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(K3_EXP_P4));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(K3_EXP_P5));
    __m256 y = _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r), _mm256_set1_ps(1.0f));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    __m256 res = _mm256_mul_ps(y, _mm256_castsi256_ps(e));
    res = _mm256_blendv_ps(res, _mm256_setzero_ps(), _mm256_cmp_ps(x, _mm256_set1_ps(K3_EXP_LOW), _CMP_LE_OQ));
    res = _mm256_blendv_ps(res, _mm256_set1_ps(__builtin_inff()), _mm256_cmp_ps(x, _mm256_set1_ps(K3_EXP_HIGH), _CMP_GT_OQ));
    return _mm256_blendv_ps(res, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

#endif
