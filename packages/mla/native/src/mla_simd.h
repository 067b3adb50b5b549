/*
 * mla_simd.h: the inner loops of MLA attention, one table per SIMD level. Every variant
 * reproduces the scalar reference (mla_simd_scalar.c) bit for bit:
 *   scores      out[r][s] = dot(Q[r], K[s]) with lane[p % 16] = fmaf(q[p], k[p], lane[p % 16]),
 *               then lane[i] += lane[i + h] for h = 8, 4, 2, 1
 * K rows are f32 or bf16 bits (widened exactly). The products that accumulate (P.V, q~ = W_UK^T q)
 * are @k3/dense's gemm_acc_f32 / gemm_acc_bf16 (k3_dense.h):
 *   acc[r][c] = fmaf(P[r][s], V[s][c], acc[r][c]) for s = 0, 1, ..., npos-1
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
} mla_kernels;

extern const mla_kernels mla_kernels_scalar;
extern const mla_kernels mla_kernels_avx2;
extern const mla_kernels mla_kernels_avx512;

const mla_kernels *mla_kernels_current(void);

#endif
