/*
 * kda_simd_avx512.c: AVX-512 inner loops. Same per-element operations, in the same order, as
 * kda_simd_scalar.c (see kda_simd.h); vectors only run many columns side by side.
 */
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl")
#include <immintrin.h>
#include <stdint.h>
#include "k3_exp_avx512.h"
#include "kda_simd.h"

#define INLINE static inline __attribute__((always_inline))

static __mmask16 mask_for(size_t n) { return n >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1); }

/* ---------------------------------------------------------------- exp */

static void exp_diff(const float *a, const float *b, float *out, size_t n) {
    for (size_t i = 0; i < n; i += 16) {
        __mmask16 m = mask_for(n - i);
        __m512 x = _mm512_maskz_loadu_ps(m, a + i);
        if (b) x = _mm512_sub_ps(x, _mm512_maskz_loadu_ps(m, b + i));
        _mm512_mask_storeu_ps(out + i, m, k3_expf16(x));
    }
}

/* ---------------------------------------------------------------- recurrence step */

/* Columns [j0, j0 + 16*V) of one head; the last vector keeps only the lanes in `last`. */
INLINE void step_block(const int V, float *S, size_t dk, size_t dv, size_t j0, __mmask16 last, const float *alpha,
                       const float *k, const float *q, const float *v, float beta, float *o) {
    __m512 e[8], acc[8];
    for (int u = 0; u < V; u++) e[u] = _mm512_setzero_ps();
    for (size_t d = 0; d < dk; d++) {
        float *row = S + d * dv + j0;
        __m512 a = _mm512_set1_ps(alpha[d]), kd = _mm512_set1_ps(k[d]);
        for (int u = 0; u < V; u++) {
            __mmask16 m = u == V - 1 ? last : 0xFFFF;
            __m512 s = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, row + 16 * u), a);
            _mm512_mask_storeu_ps(row + 16 * u, m, s);
            e[u] = _mm512_fmadd_ps(kd, s, e[u]);
        }
    }
    for (int u = 0; u < V; u++) {
        e[u] = _mm512_sub_ps(_mm512_maskz_loadu_ps(u == V - 1 ? last : 0xFFFF, v + j0 + 16 * u), e[u]);
        acc[u] = _mm512_setzero_ps();
    }
    for (size_t d = 0; d < dk; d++) {
        float *row = S + d * dv + j0;
        __m512 bk = _mm512_set1_ps(beta * k[d]), qd = _mm512_set1_ps(q[d]);
        for (int u = 0; u < V; u++) {
            __mmask16 m = u == V - 1 ? last : 0xFFFF;
            __m512 s = _mm512_fmadd_ps(bk, e[u], _mm512_maskz_loadu_ps(m, row + 16 * u));
            _mm512_mask_storeu_ps(row + 16 * u, m, s);
            acc[u] = _mm512_fmadd_ps(qd, s, acc[u]);
        }
    }
    for (int u = 0; u < V; u++) _mm512_mask_storeu_ps(o + j0 + 16 * u, u == V - 1 ? last : 0xFFFF, acc[u]);
}

static void step_head(float *S, size_t dk, size_t dv, const float *alpha, const float *k, const float *q,
                      const float *v, float beta, float *o, float *e_scratch) {
    (void)e_scratch;
    size_t j = 0;
    for (; j + 128 <= dv; j += 128) step_block(8, S, dk, dv, j, 0xFFFF, alpha, k, q, v, beta, o);
    for (; j < dv; j += 16) step_block(1, S, dk, dv, j, mask_for(dv - j), alpha, k, q, v, beta, o);
}

/* ---------------------------------------------------------------- bf16-stored state */

static __m512 widen16(const uint16_t *p, __mmask16 m) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p)), 16));
}

static void round_store16(uint16_t *p, __mmask16 m, __m512 x) {
    __m512i b = _mm512_castps_si512(x);
    __m512i hi = _mm512_srli_epi32(b, 16);
    __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(b, _mm512_set1_epi32(0x7fff)),
                                                         _mm512_and_si512(hi, _mm512_set1_epi32(1))), 16);
    __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(b, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
    __m512i r = _mm512_mask_mov_epi32(rounded, nan, _mm512_or_si512(hi, _mm512_set1_epi32(0x40)));
    _mm512_mask_cvtepi32_storeu_epi16(p, m, r);
}

INLINE void step_block_bf16(const int V, uint16_t *S, float *work, size_t dk, size_t dv, size_t j0, __mmask16 last,
                            const float *alpha, const float *k, const float *q, const float *v, float beta, float *o) {
    __m512 e[8], acc[8];
    for (int u = 0; u < V; u++) e[u] = _mm512_setzero_ps();
    for (size_t d = 0; d < dk; d++) {
        __m512 a = _mm512_set1_ps(alpha[d]), kd = _mm512_set1_ps(k[d]);
        for (int u = 0; u < V; u++) {
            __mmask16 m = u == V - 1 ? last : 0xFFFF;
            __m512 x = _mm512_mul_ps(widen16(S + d * dv + j0 + 16 * u, m), a);
            _mm512_mask_storeu_ps(work + d * dv + j0 + 16 * u, m, x);
            e[u] = _mm512_fmadd_ps(kd, x, e[u]);
        }
    }
    for (int u = 0; u < V; u++) {
        e[u] = _mm512_sub_ps(_mm512_maskz_loadu_ps(u == V - 1 ? last : 0xFFFF, v + j0 + 16 * u), e[u]);
        acc[u] = _mm512_setzero_ps();
    }
    for (size_t d = 0; d < dk; d++) {
        __m512 bk = _mm512_set1_ps(beta * k[d]), qd = _mm512_set1_ps(q[d]);
        for (int u = 0; u < V; u++) {
            __mmask16 m = u == V - 1 ? last : 0xFFFF;
            __m512 s = _mm512_fmadd_ps(bk, e[u], _mm512_maskz_loadu_ps(m, work + d * dv + j0 + 16 * u));
            round_store16(S + d * dv + j0 + 16 * u, m, s);
            acc[u] = _mm512_fmadd_ps(qd, s, acc[u]);
        }
    }
    for (int u = 0; u < V; u++) _mm512_mask_storeu_ps(o + j0 + 16 * u, u == V - 1 ? last : 0xFFFF, acc[u]);
}

static void step_head_bf16(uint16_t *S, float *work, size_t dk, size_t dv, const float *alpha, const float *k,
                           const float *q, const float *v, float beta, float *o, float *e_scratch) {
    (void)e_scratch;
    size_t j = 0;
    for (; j + 128 <= dv; j += 128) step_block_bf16(8, S, work, dk, dv, j, 0xFFFF, alpha, k, q, v, beta, o);
    for (; j < dv; j += 16) step_block_bf16(1, S, work, dk, dv, j, mask_for(dv - j), alpha, k, q, v, beta, o);
}

const kda_kernels kda_kernels_avx512 = {step_head, exp_diff, step_head_bf16};
