/* ops_activation_avx2.c: sigmoid, SiLU, SiLU-GLU and SiTU-GLU with k3_expf / k3_tanhf 8 lanes at a time.
 *
 * k3_expf8 (include/k3_exp_avx2.h, shared with @k3/kda) is k3_expf step for step, so every lane has
 * the scalar function's bits (the tests compare the two at every level). The last n % 8 elements go
 * through the scalar function. */
#pragma GCC target("avx2,fma")
#include <immintrin.h>
#include "k3_exp_avx2.h"
#include "k3_tanh_avx2.h"
#include "ops_activation_avx2.h"

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

void k3_tanh_range_avx2(const float *x, float *out, size_t lo, size_t hi) {
    size_t i = lo;
    for (; i + 8 <= hi; i += 8) _mm256_storeu_ps(out + i, k3_tanhf8(_mm256_loadu_ps(x + i)));
    for (; i < hi; i++) out[i] = k3_tanhf(x[i]);
}

void k3_sigmoid_mul_range_avx2(const float *x, const float *gate, float *out, size_t lo, size_t hi) {
    size_t i = lo;
    for (; i + 8 <= hi; i += 8)
        _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), sigmoid8(_mm256_loadu_ps(gate + i))));
    for (; i < hi; i++) out[i] = x[i] * k3_sigmoidf(gate[i]);
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

void k3_situ_glu_range_avx2(const float *g, const float *u, float *out, size_t lo, size_t hi, float beta1, float beta2) {
    const __m256 b1 = _mm256_set1_ps(beta1), b2 = _mm256_set1_ps(beta2);
    size_t i = lo;
    for (; i + 8 <= hi; i += 8) {
        __m256 gv = _mm256_loadu_ps(g + i), uv = _mm256_loadu_ps(u + i);
        __m256 gate = _mm256_mul_ps(_mm256_mul_ps(b1, k3_tanhf8(_mm256_div_ps(gv, b1))), sigmoid8(gv));
        __m256 up = _mm256_mul_ps(b2, k3_tanhf8(_mm256_div_ps(uv, b2)));
        _mm256_storeu_ps(out + i, _mm256_mul_ps(gate, up));
    }
    for (; i < hi; i++) out_situ(g, u, out, i, beta1, beta2);
}
