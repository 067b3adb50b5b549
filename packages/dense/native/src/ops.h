/*
 * ops.h: norms, activations, softmax and top-k on f32 vectors.
 *
 * These are O(n) per token (the GEMVs around them are O(n^2)), so each has ONE C implementation
 * used at every SIMD level: the results are trivially identical across levels and thread counts.
 * The element-wise transcendentals are k3_expf / k3_tanhf (include/), whose 8-lane twins give the
 * same bits; softmax's expf is libm's.
 *
 * Fixed reduction order for every sum over a row of `dim` values (sum of squares, softmax sum):
 *   lane[k % 16] = fmaf(v[k], v[k], lane[k % 16])  (sum of squares)  or  lane[k % 16] += e[k]  (sums)
 *   then lane[i] += lane[i + h] for h = 8, 4, 2, 1; the total is lane[0]
 * (the same 16-lane tree as the GEMV kernels, so a future SIMD variant can reproduce it).
 */
#ifndef K3_OPS_H
#define K3_OPS_H
#include <stddef.h>
#include <stdint.h>

/* Values per pool task of the pooled element-wise and row ops (a decode row stays on the caller's
   thread; a [64, 12288] KDA chunk is 96 tasks). */
#define K3_OPS_PIECE 8192

/* The operands of an element-wise op on two arrays, handed to its pool task (k3_add, k3_sigmoid_mul). */
typedef struct {
    const float *a, *b;
    float *out;
} k3_pair_job;

/* out = w * (x / sqrt(sumsq/dim + eps)) per row of `dim`; n_rows rows. out may alias x. */
void k3_rms_norm(const float *x, const float *w, float eps, float *out, size_t dim, size_t n_rows);
/* out[r] = sum over the RMSNorm row w * (x / sqrt(sumsq/dim + eps)) (the values k3_rms_norm makes),
   summed in double in index order and rounded once (K3's attention-residual scores). */
void k3_rms_norm_dot(const float *x, const float *w, float eps, size_t dim, size_t n_rows, float *out);
/* out[t] = sum_i pi[t * n_src + i] * src[i][t] over rows of `dim`, per value o = (float)((double)o +
   (double)pi * (double)v) in source order from +0 (K3's attention-residual mix). */
void k3_mix_rows(const float *const *src, size_t n_src, const float *pi, size_t dim, size_t n_rows, float *out);
/* out = a + b elementwise (the residual adds); out may alias a or b. */
void k3_add(const float *a, const float *b, float *out, size_t n);
/* out = x / sqrt(sumsq + eps) per row of `dim` (KDA q/k norm). out may alias x. */
void k3_l2_normalize(const float *x, float *out, size_t dim, float eps, size_t n_rows);
/* out = (x / sqrt(sumsq + eps)) * scale, two roundings (KDA's q with its dk^-1/2; scale 1 is the
   unscaled form bit for bit). out may alias x. */
void k3_l2_normalize_scaled(const float *x, float *out, size_t dim, float eps, float scale, size_t n_rows);

/* sigma(x) = 1 / (1 + expf(-x)) */
void k3_sigmoid(const float *x, float *out, size_t n);
/* tanh(x) = k3_tanhf (include/k3_tanh.h): within 3 ulp, the same bits at every level */
void k3_tanh(const float *x, float *out, size_t n);
/* out = x * sigma(gate) (KDA's output gate): the bits of sigmoid(gate) then a multiply. out may alias x. */
void k3_sigmoid_mul(const float *x, const float *gate, float *out, size_t n);
/* silu(x) = x * sigma(x) */
void k3_silu(const float *x, float *out, size_t n);
/* out = silu(g) * u */
void k3_silu_glu(const float *g, const float *u, float *out, size_t n);
/* out = [(b1 * tanh(g / b1)) * sigma(g)] * [b2 * tanh(u / b2)], tanh = k3_tanhf */
void k3_situ_glu(const float *g, const float *u, float *out, size_t n, float beta1, float beta2);
/* Per row of `dim`: out = exp(x - max) / sum; a row with a NaN gives all NaN; all -inf gives NaN. */
void k3_softmax(const float *x, float *out, size_t dim, size_t n_rows);

/* The k largest of values[n] in descending order; ties: lower index first; NaN ranks below -inf
   (NaNs come last, lower index first). k <= n. */
void k3_top_k(const float *values, size_t n, size_t k, int32_t *out_index, float *out_value);

#endif
