/*
 * moe_mxfp4.h: a layer's MXFP4 experts (K3's routed experts) in two pool dispatches, through
 * @k3/mxfp4's kernels (the k3_mxfp4_api table; no MXFP4 kernel is written here).
 *
 *   E(x) = W2 · φ(W1 x, W3 x)      w1 = gate [inter, in], w3 = up [inter, in], w2 = down [out, inter]
 *
 * The same plan as moe_compute.h's dense experts: dispatch 1 splits the gate/up rows of ALL experts
 * into tasks (each: its gate rows, its up rows, φ on them, then those φ values reordered into the
 * kernel's even/odd activation order in place); dispatch 2 splits the down rows of all experts.
 * Every output element is one @k3/mxfp4 dot product in its fixed order (k3_mxfp4.h), computed from
 * the same split activations as k3_mxfp4_matmul would split, so each row is bit-identical to the
 * per-expert composition matmul(w1) / matmul(w3) / φ / matmul(w2), whatever the thread count, the
 * task split, the experts sharing the batch or the rows an expert serves.
 *
 * A 0xFF scale decodes to NaN in @k3/mxfp4's kernels, so the scales are not scanned here: `nan`
 * flags each expert whose gate, up or down products hold a NaN (the outputs the per-expert path
 * checks after each matmul), and the caller rescans only those experts' scales to refuse a 0xFF by
 * name (or finds the NaN came from x).
 */
#ifndef K3_MOE_MXFP4_H
#define K3_MOE_MXFP4_H
#include <stddef.h>
#include <stdint.h>
#include "k3_dense.h"
#include "k3_mxfp4.h"
#include "moe_compute.h"

typedef struct {
    k3_mxfp4_matrix w1, w3, w2; /* [inter, in], [inter, in], [out, inter] */
    size_t rows;                /* batch rows this expert serves (> 0) */
    size_t row0;                /* its first batch row: the sum of `rows` of the experts before it */
} k3_moe_mxfp4_expert;

typedef struct {
    k3_moe_act act;
    float beta1, beta2;         /* SiTU bounds */
    size_t in_dim, inter, out_dim; /* in_dim and inter multiples of 32 (the MXFP4 block) */
    size_t n_experts;
    const k3_moe_mxfp4_expert *experts;
    const float *x;             /* source rows [*, in_dim] */
    const int32_t *x_row;       /* per batch row (experts in order, then their rows): its row of x */
    float *y;                   /* destination rows [*, out_dim] */
    const int32_t *y_row;       /* per batch row: its row of y */
    float *work;                /* k3_moe_work_floats(total rows, ...) floats (the dense experts' size) */
    uint8_t *nan;               /* per expert: set to 1 when its gate, up or down products hold a NaN, else 0 */
} k3_moe_mxfp4_batch;

/* y[y_row[i]] = E_e(x[x_row[i]]) for every batch row i of every expert e; sets nan[e]. */
void k3_moe_mxfp4_experts(const k3_dense_api *dense, const k3_mxfp4_api *mx, const k3_moe_mxfp4_batch *b);

#endif
