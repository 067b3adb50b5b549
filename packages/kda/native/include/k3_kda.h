/*
 * k3_kda.h: the C kernels of @k3/kda (Kimi Delta Attention), docs/architecture.md §2.
 *
 * Layouts (row-major, f32 unless noted):
 *   q, k, g  [T][H][dk]     q already L2-normalised and scaled by dk^-1/2, k L2-normalised,
 *                           g the log decay (alpha = exp(g) <= 1)
 *   v, o     [T][H][dv]
 *   beta     [T][H]
 *   S        [H][dk][dv]    rows = key channels (fla's [K, V] layout); f32, or bf16 bits
 *
 * Every kernel is deterministic: threads split heads (outputs), never a reduction, and the SIMD
 * variants reproduce the scalar reference bit for bit (see kda_simd.h for the orders).
 */
#ifndef K3_KDA_H
#define K3_KDA_H

#include <stddef.h>
#include <stdint.h>
#include "k3_dense.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Keeps the @k3/dense table (pool and SIMD level). 0 ok, -1 wrong ABI. */
int k3_kda_init(const k3_dense_api *api);
const k3_dense_api *k3_kda_dense(void);

/* Depthwise causal conv + SiLU. x [T][C], w [C][K] (tap K-1 = current token),
   state [(K-1)][C] = the last K-1 pre-conv inputs, oldest first (read, then replaced).
   Channel blocks run on the @k3/dense pool. 0 ok, -1 out of memory (K x 512 floats of transposed
   taps per task; nothing written). */
int k3_kda_short_conv(const float *x, const float *w, float *state, float *out, size_t T, size_t C, size_t K);

/* Forget gate in log space. z_raw [T][H*dk] = f_b(f_a x) before dt_bias; a_log [H] (already sliced).
   form 0 = K3:  g = lower_bound * sigmoid(exp(a_log[h]) * (z + dt_bias))
   form 1 = 48B: g = -exp(a_log[h]) * softplus(z + dt_bias) */
void k3_kda_gate(const float *z_raw, const float *dt_bias, const float *a_log, float *g, size_t T, size_t H,
                 size_t dk, int form, float lower_bound);

/* Token-by-token recurrence (decode, and the reference for prefill). state_bf16 != 0: S holds bf16
   bits and is re-rounded after every token. Returns 0, or -1 when scratch memory is unavailable. */
int k3_kda_recurrent(const float *q, const float *k, const float *v, const float *g, const float *beta,
                      void *S, int state_bf16, float *o, size_t T, size_t H, size_t dk, size_t dv);

/* Chunkwise WY/UT form (docs/architecture.md §2.6), same result as the recurrence up to rounding.
   chunk >= 1 (64 by default in the TS API). bf16 state is widened once at the start and rounded
   once at the end of the call. Returns 0, or -1 when scratch memory is unavailable. */
int k3_kda_chunked(const float *q, const float *k, const float *v, const float *g, const float *beta,
                    void *S, int state_bf16, float *o, size_t T, size_t H, size_t dk, size_t dv, size_t chunk);

#ifdef __cplusplus
}
#endif
#endif
