/*
 * mla_absorb.c: the two per-head products of absorbed MLA (docs/architecture.md §3.3), straight on the
 * kv_b_proj rows (no transposed copy), heads split over the pool:
 *   absorb:  q~_h[t] = W_UK^h^T q_nope_h[t]   (@k3/dense gemm_acc: acc = fmaf(q_nope[i], W_UK[i][c], acc), i ascending)
 *   project: o_h[t]  = W_UV^h o~_h[t]         (@k3/dense dot_rows: the gemv order, 16 lanes then the tree)
 * One parallel_for per call instead of one GEMV per head (2 x 96 per decoded token).
 * kv_b rows of head h: [h*(n+v), h*(n+v)+n) = W_UK^h, the next v rows = W_UV^h; each row has L values.
 */
#include <string.h>
#include "k3_mla.h"

typedef struct {
    const float *in;
    size_t T, H, in_stride, in_head;
    k3_mla_rows kvb; /* stride = L (row length), offset 0 */
    size_t n, v, L;
    float *out;
    size_t out_stride, out_head;
} absorb_job;

static void absorb_head(void *ctx, int task) {
    const absorb_job *j = ctx;
    size_t h = (size_t)task;
    float *acc = j->out + h * j->out_head;
    for (size_t t = 0; t < j->T; t++) memset(acc + t * j->out_stride, 0, j->L * sizeof(float));
    size_t idx = h * (j->n + j->v) * j->L; /* first W_UK^h row */
    const k3_dense_api *dense = k3_mla_dense();
    if (j->kvb.bf16)
        dense->gemm_acc_bf16(j->T, j->L, j->n, j->in + h * j->in_head, j->in_stride, (const uint16_t *)j->kvb.data + idx,
                             j->L, acc, j->out_stride);
    else
        dense->gemm_acc_f32(j->T, j->L, j->n, j->in + h * j->in_head, j->in_stride, (const float *)j->kvb.data + idx, j->L,
                            acc, j->out_stride);
}

static void project_head(void *ctx, int task) {
    const absorb_job *j = ctx;
    size_t h = (size_t)task;
    size_t idx = (h * (j->n + j->v) + j->n) * j->L; /* first W_UV^h row */
    const k3_dense_api *dense = k3_mla_dense();
    if (j->kvb.bf16)
        dense->dot_rows_bf16(j->T, j->v, j->L, j->in + h * j->in_head, j->in_stride, (const uint16_t *)j->kvb.data + idx, j->L,
                             j->out + h * j->out_head, j->out_stride);
    else
        dense->dot_rows_f32(j->T, j->v, j->L, j->in + h * j->in_head, j->in_stride, (const float *)j->kvb.data + idx, j->L,
                            j->out + h * j->out_head, j->out_stride);
}

void k3_mla_absorb(const float *q, size_t T, size_t H, size_t q_stride, size_t q_head, const void *kvb, int kvb_bf16,
                   size_t n, size_t v, size_t L, float *out, size_t out_stride, size_t out_head) {
    absorb_job job = {q, T, H, q_stride, q_head, {kvb, kvb_bf16, 0, L, 0}, n, v, L, out, out_stride, out_head};
    k3_mla_dense()->parallel_for((int)H, absorb_head, &job);
}

void k3_mla_project(const float *lat, size_t T, size_t H, size_t lat_stride, size_t lat_head, const void *kvb, int kvb_bf16,
                    size_t n, size_t v, size_t L, float *out, size_t out_stride, size_t out_head) {
    absorb_job job = {lat, T, H, lat_stride, lat_head, {kvb, kvb_bf16, 0, L, 0}, n, v, L, out, out_stride, out_head};
    k3_mla_dense()->parallel_for((int)H, project_head, &job);
}
