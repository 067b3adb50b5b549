/*
 * moe_compute.h: the dense (bf16 / f32) experts of one MoE layer in two pool dispatches, and the
 * weighted sum of their outputs.
 *
 *   E(x) = W2 · φ(W1 x, W3 x)      w1 = gate [inter, in], w3 = up [inter, in], w2 = down [out, inter]
 *   φ = SiLU-GLU (48B) or SiTU-GLU (K3), @k3/dense's, elementwise.
 *
 * Every expert of a batch serves its own rows (the tokens routed to it). Dispatch 1 splits the
 * gate/up rows of ALL experts into tasks (each: its gate rows, its up rows, then φ on them);
 * dispatch 2 splits the down rows of all experts. Each output element is one dot product in
 * @k3/dense's fixed gemv order (gemv_bf16 for one row of bf16 weights, dot_rows otherwise; the two
 * are bit-identical), so the result does not depend on the thread count, the task split, which
 * experts share a batch, or how many rows an expert serves.
 */
#ifndef K3_MOE_COMPUTE_H
#define K3_MOE_COMPUTE_H
#include <stddef.h>
#include <stdint.h>
#include "k3_dense.h"

typedef enum { K3_MOE_SILU = 0, K3_MOE_SITU = 1 } k3_moe_act;

typedef struct {
    const void *w1, *w3, *w2; /* row-major, the batch's dtype, rows of `in`, `in`, `inter` values */
    size_t rows;              /* batch rows this expert serves (> 0) */
    size_t row0;              /* its first batch row: the sum of `rows` of the experts before it */
} k3_moe_expert;

typedef struct {
    int bf16;                 /* 1: weights are bf16 bits, 0: f32 */
    k3_moe_act act;
    float beta1, beta2;       /* SiTU bounds */
    size_t in_dim, inter, out_dim;
    size_t n_experts;
    const k3_moe_expert *experts;
    const float *x;           /* source rows [*, in_dim] */
    const int32_t *x_row;     /* per batch row (experts in order, then their rows): its row of x */
    float *y;                 /* destination rows [*, out_dim] */
    const int32_t *y_row;     /* per batch row: its row of y */
    float *work;              /* k3_moe_work_floats(total rows) floats */
} k3_moe_batch;

/* Floats of work a batch of `rows` rows in all needs. */
size_t k3_moe_work_floats(size_t rows, size_t in_dim, size_t inter, size_t out_dim);

/* y[y_row[i]] = E_e(x[x_row[i]]) for every batch row i of every expert e. */
void k3_moe_experts(const k3_dense_api *api, const k3_moe_batch *b);

/*
 * out[t] = sum over j < k, in j order, of w[t k + j] * slots[t k + j]  (rows of `dim`), each term
 * rounded to f32 before it is added to the f32 sum that starts at +0 (no FMA): the order of the
 * TS reference `acc = fround(acc + fround(w * y))`. `add` (may be NULL): out[t] += add[t] afterwards.
 */
void k3_moe_mix(const float *slots, const float *w, size_t tokens, size_t k, size_t dim, float *out, const float *add);
/* out[i] = out[i] + a[i] (the shared expert's term; `add` of k3_moe_mix: the same, after the sum). */
void k3_moe_add(float *out, const float *a, size_t n);

#endif
