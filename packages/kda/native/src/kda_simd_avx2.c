/*
 * kda_simd_avx2.c: AVX2 + FMA inner loops. Same per-element operations, in the same order, as
 * kda_simd_scalar.c (see kda_simd.h). Columns that do not fill a vector run the scalar formula
 * (fmaf compiles to the same single-rounding FMA instruction here).
 */
#pragma GCC target("avx2,fma")
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include "k3_exp_avx2.h"
#include "kda_simd.h"
#include "state_bf16.h"

#define INLINE static inline __attribute__((always_inline))

/* ---------------------------------------------------------------- exp */

static void exp_diff(const float *a, const float *b, float *out, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 x = _mm256_loadu_ps(a + i);
        if (b) x = _mm256_sub_ps(x, _mm256_loadu_ps(b + i));
        _mm256_storeu_ps(out + i, k3_expf8(x));
    }
    if (i < n) { /* the tail through a padded buffer, so it runs the same vector formula */
        float buf[8] = {0};
        for (size_t t = 0; t < n - i; t++) buf[t] = b ? a[i + t] - b[i + t] : a[i + t];
        _mm256_storeu_ps(buf, k3_expf8(_mm256_loadu_ps(buf)));
        memcpy(out + i, buf, (n - i) * sizeof(float));
    }
}

/* ---------------------------------------------------------------- recurrence step */

INLINE void step_block(const int V, float *S, size_t dk, size_t dv, size_t j0, const float *alpha, const float *k,
                       const float *q, const float *v, float beta, float *o) {
    __m256 e[4], acc[4];
    for (int u = 0; u < V; u++) e[u] = _mm256_setzero_ps();
    for (size_t d = 0; d < dk; d++) {
        float *row = S + d * dv + j0;
        __m256 a = _mm256_set1_ps(alpha[d]), kd = _mm256_set1_ps(k[d]);
        for (int u = 0; u < V; u++) {
            __m256 s = _mm256_mul_ps(_mm256_loadu_ps(row + 8 * u), a);
            _mm256_storeu_ps(row + 8 * u, s);
            e[u] = _mm256_fmadd_ps(kd, s, e[u]);
        }
    }
    for (int u = 0; u < V; u++) {
        e[u] = _mm256_sub_ps(_mm256_loadu_ps(v + j0 + 8 * u), e[u]);
        acc[u] = _mm256_setzero_ps();
    }
    for (size_t d = 0; d < dk; d++) {
        float *row = S + d * dv + j0;
        __m256 bk = _mm256_set1_ps(beta * k[d]), qd = _mm256_set1_ps(q[d]);
        for (int u = 0; u < V; u++) {
            __m256 s = _mm256_fmadd_ps(bk, e[u], _mm256_loadu_ps(row + 8 * u));
            _mm256_storeu_ps(row + 8 * u, s);
            acc[u] = _mm256_fmadd_ps(qd, s, acc[u]);
        }
    }
    for (int u = 0; u < V; u++) _mm256_storeu_ps(o + j0 + 8 * u, acc[u]);
}

/* Leftover columns [j0, dv): the scalar formula, column by column. */
static void step_tail(float *S, size_t dk, size_t dv, size_t j0, const float *alpha, const float *k, const float *q,
                      const float *v, float beta, float *o) {
    for (size_t j = j0; j < dv; j++) {
        float e = 0.0f, acc = 0.0f;
        for (size_t d = 0; d < dk; d++) {
            S[d * dv + j] = S[d * dv + j] * alpha[d];
            e = fmaf(k[d], S[d * dv + j], e);
        }
        e = v[j] - e;
        for (size_t d = 0; d < dk; d++) {
            float s = fmaf(beta * k[d], e, S[d * dv + j]);
            S[d * dv + j] = s;
            acc = fmaf(q[d], s, acc);
        }
        o[j] = acc;
    }
}

static void step_head(float *S, size_t dk, size_t dv, const float *alpha, const float *k, const float *q,
                      const float *v, float beta, float *o, float *e_scratch) {
    (void)e_scratch;
    size_t j = 0;
    for (; j + 32 <= dv; j += 32) step_block(4, S, dk, dv, j, alpha, k, q, v, beta, o);
    for (; j + 8 <= dv; j += 8) step_block(1, S, dk, dv, j, alpha, k, q, v, beta, o);
    if (j < dv) step_tail(S, dk, dv, j, alpha, k, q, v, beta, o);
}

/* ---------------------------------------------------------------- bf16-stored state */

static __m256 widen8(const uint16_t *p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}

static void round_store8(uint16_t *p, __m256 x) {
    __m256i b = _mm256_castps_si256(x);
    __m256i hi = _mm256_srli_epi32(b, 16);
    __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(b, _mm256_set1_epi32(0x7fff)),
                                                         _mm256_and_si256(hi, _mm256_set1_epi32(1))), 16);
    /* |b| > 0x7f800000 as signed int32: both sides are non-negative */
    __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(b, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
    __m256i r = _mm256_blendv_epi8(rounded, _mm256_or_si256(hi, _mm256_set1_epi32(0x40)), nan);
    __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
    _mm_storeu_si128((__m128i *)p, packed);
}


INLINE void step_block_bf16(const int V, uint16_t *S, float *work, size_t dk, size_t dv, size_t j0, const float *alpha,
                            const float *k, const float *q, const float *v, float beta, float *o) {
    __m256 e[4], acc[4];
    for (int u = 0; u < V; u++) e[u] = _mm256_setzero_ps();
    for (size_t d = 0; d < dk; d++) {
        __m256 a = _mm256_set1_ps(alpha[d]), kd = _mm256_set1_ps(k[d]);
        for (int u = 0; u < V; u++) {
            __m256 x = _mm256_mul_ps(widen8(S + d * dv + j0 + 8 * u), a);
            _mm256_storeu_ps(work + d * dv + j0 + 8 * u, x);
            e[u] = _mm256_fmadd_ps(kd, x, e[u]);
        }
    }
    for (int u = 0; u < V; u++) {
        e[u] = _mm256_sub_ps(_mm256_loadu_ps(v + j0 + 8 * u), e[u]);
        acc[u] = _mm256_setzero_ps();
    }
    for (size_t d = 0; d < dk; d++) {
        __m256 bk = _mm256_set1_ps(beta * k[d]), qd = _mm256_set1_ps(q[d]);
        for (int u = 0; u < V; u++) {
            __m256 s = _mm256_fmadd_ps(bk, e[u], _mm256_loadu_ps(work + d * dv + j0 + 8 * u));
            round_store8(S + d * dv + j0 + 8 * u, s);
            acc[u] = _mm256_fmadd_ps(qd, s, acc[u]);
        }
    }
    for (int u = 0; u < V; u++) _mm256_storeu_ps(o + j0 + 8 * u, acc[u]);
}

static void step_head_bf16(uint16_t *S, float *work, size_t dk, size_t dv, const float *alpha, const float *k,
                           const float *q, const float *v, float beta, float *o, float *e_scratch) {
    (void)e_scratch;
    size_t j = 0;
    for (; j + 32 <= dv; j += 32) step_block_bf16(4, S, work, dk, dv, j, alpha, k, q, v, beta, o);
    for (; j + 8 <= dv; j += 8) step_block_bf16(1, S, work, dk, dv, j, alpha, k, q, v, beta, o);
    for (; j < dv; j++) { /* leftover columns: the scalar formula */
        float e = 0.0f, acc = 0.0f;
        for (size_t d = 0; d < dk; d++) {
            float x = kda_bf16_to_f32(S[d * dv + j]) * alpha[d];
            work[d * dv + j] = x;
            e = fmaf(k[d], x, e);
        }
        e = v[j] - e;
        for (size_t d = 0; d < dk; d++) {
            float s = fmaf(beta * k[d], e, work[d * dv + j]);
            S[d * dv + j] = kda_f32_to_bf16(s);
            acc = fmaf(q[d], s, acc);
        }
        o[j] = acc;
    }
}

const kda_kernels kda_kernels_avx2 = {step_head, exp_diff, step_head_bf16};
