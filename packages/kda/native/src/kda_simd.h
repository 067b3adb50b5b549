/*
 * kda_simd.h: the inner loops of the KDA kernels, one table per SIMD level.
 *
 * Every variant reproduces the scalar reference (kda_simd_scalar.c) bit for bit. The dense products
 * of the chunked form are not here: they are @k3/dense's gemm_acc_f32 and dot_rows_f32 (k3_dense.h).
 * The orders:
 *   step_head  per column j, sums over rows d in ascending order with fmaf:
 *                S[d][j] = S[d][j] * alpha[d];  acc[j] = fmaf(k[d], S[d][j], acc[j])   (from 0)
 *                e[j]   = v[j] - acc[j]
 *                s      = fmaf(beta * k[d], e[j], S[d][j]);  S[d][j] = s
 *                o[j]   = fmaf(q[d], s, o[j])                            (from 0)
 *   exp_diff   out[i] = k3_expf(a[i] - b[i]) (b NULL: k3_expf(a[i])), k3_expf (@k3/dense k3_exp.h) = Cody-Waite + degree-5
 *              polynomial with fmaf; 0 for x <= -87, inf for x > 88, NaN kept
 *   step_head_bf16  step_head on a bf16-stored state: widen (exact), the same step in f32 (decayed
 *              rows kept in `work` [dk][dv]), o from the f32 values, then S rounded to nearest even
 *              (a NaN stays a quiet NaN with its sign)
 */
#ifndef K3_KDA_SIMD_H
#define K3_KDA_SIMD_H
#include <stddef.h>
#include <stdint.h>

typedef struct {
    void (*step_head)(float *S, size_t dk, size_t dv, const float *alpha, const float *k, const float *q,
                      const float *v, float beta, float *o, float *e_scratch);
    void (*exp_diff)(const float *a, const float *b, float *out, size_t n);
    void (*step_head_bf16)(uint16_t *S, float *work, size_t dk, size_t dv, const float *alpha, const float *k,
                           const float *q, const float *v, float beta, float *o, float *e_scratch);
} kda_kernels;

extern const kda_kernels kda_kernels_scalar;
extern const kda_kernels kda_kernels_avx2;
extern const kda_kernels kda_kernels_avx512;

/* The table for the process-wide SIMD level of @k3/dense. */
const kda_kernels *kda_kernels_current(void);

#endif
