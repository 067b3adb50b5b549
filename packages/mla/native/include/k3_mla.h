/*
 * k3_mla.h: the C kernels of @k3/mla (Multi-head Latent Attention as Kimi uses it, NoPE),
 * docs/architecture.md §3.
 *
 * One attention kernel serves both cache forms:
 *   absorbed: query rows [q~ (512) | q_pe (64)] against the latent cache rows [c (512) | k_pe (64)],
 *             shared by all heads (key head stride 0); values = the first 512 of the same rows.
 *   expanded: per-head key rows [k_nope | k_pe] and value rows v (head strides > 0).
 * Causal: query t sits at absolute position q_pos0 + t and attends positions s <= q_pos0 + t.
 * Softmax in f32, online over key blocks of MLA_KEY_BLOCK positions aligned to absolute positions,
 * so a query's result does not depend on how queries are batched (incremental == full, bit for bit).
 */
#ifndef K3_MLA_H
#define K3_MLA_H

#include <stddef.h>
#include <stdint.h>
#include "k3_dense.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MLA_KEY_BLOCK 64

int k3_mla_init(const k3_dense_api *api);
const k3_dense_api *k3_mla_dense(void);

typedef struct {
    const void *data; /* f32, or bf16 bits when bf16 != 0 */
    int bf16;
    size_t offset;    /* elements before position 0, head 0 */
    size_t stride;    /* elements between positions */
    size_t head;      /* elements between heads (0 = shared by all heads) */
} k3_mla_rows;

/* out[t][h][0..dv) = sum_s softmax_s(scale * q[t][h] . key(s, h)) * value(s, h).
   q [T][H][dq] f32; keys have dq values, values dv. Returns 0, or -1 when scratch memory is unavailable. */
int k3_mla_attend(const float *q, size_t T, size_t H, size_t dq, size_t dv, const k3_mla_rows *keys,
                  const k3_mla_rows *values, size_t q_pos0, float scale, float *out);

/* Absorbed queries: out[t*out_stride + h*out_head + c] = sum_i q[t*q_stride + h*q_head + i] * W_UK^h[i][c]
   for c < L, i < n. kvb = kv_b_proj [H*(n+v)][L] (f32 or bf16 bits). */
void k3_mla_absorb(const float *q, size_t T, size_t H, size_t q_stride, size_t q_head, const void *kvb, int kvb_bf16,
                   size_t n, size_t v, size_t L, float *out, size_t out_stride, size_t out_head);

/* Value projection: out[t*out_stride + h*out_head + j] = W_UV^h[j] . lat[t*lat_stride + h*lat_head ..] for j < v. */
void k3_mla_project(const float *lat, size_t T, size_t H, size_t lat_stride, size_t lat_head, const void *kvb, int kvb_bf16,
                    size_t n, size_t v, size_t L, float *out, size_t out_stride, size_t out_head);

#ifdef __cplusplus
}
#endif
#endif
