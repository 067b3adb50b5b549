/*
 * mla_simd.h: the inner loops of MLA attention, one table per SIMD level. Every variant
 * reproduces the scalar reference (mla_simd_scalar.c) bit for bit:
 *   scores      out[r][s] = dot(Q[r], K[s]) with lane[p % 16] = fmaf(q[p], k[p], lane[p % 16]),
 *               then lane[i] += lane[i + h] for h = 8, 4, 2, 1
 *   accumulate  acc[r][c] = fmaf(P[r][s], V[s][c], acc[r][c]) for s = 0, 1, ..., npos-1
 * K and V rows are f32 or bf16 bits (widened exactly).
 */
#ifndef K3_MLA_SIMD_H
#define K3_MLA_SIMD_H
#include <stddef.h>
#include <stdint.h>

typedef struct {
    void (*scores_f32)(size_t nrows, size_t npos, size_t D, const float *Q, size_t ldq, const float *K, size_t ldk,
                       float *out, size_t ldo);
    void (*scores_bf16)(size_t nrows, size_t npos, size_t D, const float *Q, size_t ldq, const uint16_t *K, size_t ldk,
                        float *out, size_t ldo);
    void (*accumulate_f32)(size_t nrows, size_t npos, size_t dv, const float *P, size_t ldp, const float *V, size_t ldv,
                           float *acc, size_t lda);
    void (*accumulate_bf16)(size_t nrows, size_t npos, size_t dv, const float *P, size_t ldp, const uint16_t *V,
                            size_t ldv, float *acc, size_t lda);
} mla_kernels;

extern const mla_kernels mla_kernels_scalar;
extern const mla_kernels mla_kernels_avx2;
extern const mla_kernels mla_kernels_avx512;

const mla_kernels *mla_kernels_current(void);

#endif
