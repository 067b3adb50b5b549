/*
 * k3_exp_avx512.h: k3_expf (k3_exp.h) 16 lanes at a time, step for step: the same constants, the
 * same fused and unfused operations in the same order, so every lane has the scalar function's
 * bits. Include it from a file compiled for AVX-512 F (#pragma GCC target("avx512f") before it).
 */
#ifndef K3_EXP_AVX512_H
#define K3_EXP_AVX512_H
#include <immintrin.h>
#include "k3_exp.h"

static inline __m512 k3_expf16(__m512 x) {
    __m512 xc = _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(K3_EXP_HIGH)), _mm512_set1_ps(K3_EXP_LOW));
    __m512 n = _mm512_roundscale_ps(_mm512_add_ps(_mm512_mul_ps(xc, _mm512_set1_ps(K3_EXP_LOG2E)), _mm512_set1_ps(0.5f)),
                                    _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fmadd_ps(n, _mm512_set1_ps(-K3_EXP_LN2_HI), xc);
    r = _mm512_fmadd_ps(n, _mm512_set1_ps(-K3_EXP_LN2_LO), r);
    __m512 p = _mm512_set1_ps(K3_EXP_P0);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(K3_EXP_P1));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(K3_EXP_P2));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(K3_EXP_P3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(K3_EXP_P4));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(K3_EXP_P5));
    __m512 y = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0f));
    __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    __m512 res = _mm512_mul_ps(y, _mm512_castsi512_ps(e));
    res = _mm512_mask_mov_ps(res, _mm512_cmp_ps_mask(x, _mm512_set1_ps(K3_EXP_LOW), _CMP_LE_OQ), _mm512_setzero_ps());
    res = _mm512_mask_mov_ps(res, _mm512_cmp_ps_mask(x, _mm512_set1_ps(K3_EXP_HIGH), _CMP_GT_OQ),
                             _mm512_set1_ps(__builtin_inff()));
    return _mm512_mask_mov_ps(res, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), x);
}

#endif
