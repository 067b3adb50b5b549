/* ops_activation_avx2.c: sigmoid, SiLU and SiLU-GLU with k3_expf 8 lanes at a time.
 *
 * k3_expf8 is k3_expf (ops_exp.h) step for step: the same constants, the same fused and unfused
 * operations in the same order, so every lane has the bits the scalar function gives (the tests
 * compare the two at every level). The last n % 8 elements go through the scalar function. */
#pragma GCC target("avx2,fma")
#include <immintrin.h>
#include "ops_exp.h"
#include "ops_activation_avx2.h"

static inline __m256 pow2i8(__m256i k) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k, _mm256_set1_epi32(127)), 23));
}

static inline __m256 k3_expf8(__m256 x) {
    __m256 xc = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(K3_EXP_MIN_X)), _mm256_set1_ps(K3_EXP_MAX_X));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(K3_EXP_LOG2E)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fmadd_ps(n, _mm256_set1_ps(-K3_EXP_LN2_HI), xc);
    r = _mm256_fmadd_ps(n, _mm256_set1_ps(K3_EXP_LN2_LO), r);
    __m256 p = _mm256_set1_ps(K3_EXP_P0);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(K3_EXP_P1));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(K3_EXP_P2));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(K3_EXP_P3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(K3_EXP_P4));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(K3_EXP_P5));
    __m256 y = _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r), _mm256_set1_ps(1.0f));
    __m256i ni = _mm256_cvtps_epi32(n); /* n is integral: exact */
    __m256i n1 = _mm256_srai_epi32(ni, 1);
    __m256 e = _mm256_mul_ps(_mm256_mul_ps(y, pow2i8(n1)), pow2i8(_mm256_sub_epi32(ni, n1)));
    return _mm256_blendv_ps(e, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q)); /* NaN in, the same NaN out */
}

static inline __m256 sigmoid8(__m256 x) {
    const __m256 one = _mm256_set1_ps(1.0f);
    __m256 neg = _mm256_xor_ps(x, _mm256_set1_ps(-0.0f));
    __m256 s = _mm256_div_ps(one, _mm256_add_ps(one, k3_expf8(neg)));
    return _mm256_blendv_ps(s, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q)); /* as k3_sigmoidf: NaN -> itself */
}

void k3_sigmoid_range_avx2(const float *x, float *out, size_t lo, size_t hi) {
    size_t i = lo;
    for (; i + 8 <= hi; i += 8) _mm256_storeu_ps(out + i, sigmoid8(_mm256_loadu_ps(x + i)));
    for (; i < hi; i++) out[i] = k3_sigmoidf(x[i]);
}

void k3_silu_range_avx2(const float *x, float *out, size_t lo, size_t hi) {
    size_t i = lo;
    for (; i + 8 <= hi; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        _mm256_storeu_ps(out + i, _mm256_mul_ps(v, sigmoid8(v)));
    }
    for (; i < hi; i++) out[i] = x[i] * k3_sigmoidf(x[i]);
}

void k3_silu_glu_range_avx2(const float *g, const float *u, float *out, size_t lo, size_t hi) {
    size_t i = lo;
    for (; i + 8 <= hi; i += 8) {
        __m256 v = _mm256_loadu_ps(g + i);
        _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_mul_ps(v, sigmoid8(v)), _mm256_loadu_ps(u + i)));
    }
    for (; i < hi; i++) out[i] = (g[i] * k3_sigmoidf(g[i])) * u[i];
}
