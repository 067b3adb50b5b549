/* ops_activation.c: sigmoid, SiLU, SiLU-GLU, SiTU-GLU and softmax. The transcendentals of the
   element-wise ones are k3_expf and k3_tanhf (include/k3_exp.h, shared with @k3/kda, and k3_tanh.h),
   whose 8-lane twins in ops_activation_avx2.c give the same bits, so these run vectorised at AVX2
   and above; softmax's expf stays libm. */
#include <math.h>
#include "cpu.h"
#include "ops.h"
#include "k3_exp.h"
#include "k3_tanh.h"
#include "ops_activation_avx2.h"
#include "pool.h"

static float sigmoid1(float x) { return k3_sigmoidf(x); }

static int vector_activations(void) { return k3_cpu_level() >= K3_SIMD_AVX2; }

void k3_sigmoid(const float *x, float *out, size_t n) {
    if (vector_activations()) return k3_sigmoid_range_avx2(x, out, 0, n);
    for (size_t i = 0; i < n; i++) out[i] = sigmoid1(x[i]);
}

void k3_tanh(const float *x, float *out, size_t n) {
    if (vector_activations()) return k3_tanh_range_avx2(x, out, 0, n);
    for (size_t i = 0; i < n; i++) out[i] = k3_tanhf(x[i]);
}

void k3_silu(const float *x, float *out, size_t n) {
    if (vector_activations()) return k3_silu_range_avx2(x, out, 0, n);
    for (size_t i = 0; i < n; i++) out[i] = x[i] * sigmoid1(x[i]);
}

/* ---------------------------------------------------------------- sigmoid-gated product
 * KDA's output gate over a prefill chunk's [T, H*dv] (786,432 values at K3's widths): pieces over
 * the pool, each value independent, so any thread count gives the same bits. */

static void sigmoid_mul_range(void *ctx, size_t lo, size_t hi) {
    const k3_pair_job *j = ctx; /* a = x, b = gate */
    if (vector_activations()) return k3_sigmoid_mul_range_avx2(j->a, j->b, j->out, lo, hi);
    for (size_t i = lo; i < hi; i++) j->out[i] = j->a[i] * sigmoid1(j->b[i]);
}

void k3_sigmoid_mul(const float *x, const float *gate, float *out, size_t n) {
    k3_pair_job j = {x, gate, out};
    k3_pool_for_ranges(n, K3_OPS_PIECE, sigmoid_mul_range, &j);
}

/* ---------------------------------------------------------------- GLU activations
 * A prefill chunk's [T, 33792] activation is 2.2 M elements (libm's expf/tanhf, 20-40 ns each, took
 * tens of ms on one core). Each element is independent: the pool splits the range into pieces, and
 * the result is the same bits on any thread count. */

typedef struct {
    const float *g, *u;
    float *out;
    size_t n;
    float beta1, beta2;
    int situ;
} glu_job;

static void silu_glu_range(const float *g, const float *u, float *out, size_t lo, size_t hi) {
    if (vector_activations()) return k3_silu_glu_range_avx2(g, u, out, lo, hi);
    for (size_t i = lo; i < hi; i++) out[i] = (g[i] * sigmoid1(g[i])) * u[i];
}

static void situ_glu_range(const glu_job *j, size_t lo, size_t hi) {
    if (vector_activations()) return k3_situ_glu_range_avx2(j->g, j->u, j->out, lo, hi, j->beta1, j->beta2);
    for (size_t i = lo; i < hi; i++) out_situ(j->g, j->u, j->out, i, j->beta1, j->beta2);
}

static void glu_range(void *ctx, size_t lo, size_t hi) {
    const glu_job *j = ctx;
    if (j->situ) situ_glu_range(j, lo, hi);
    else silu_glu_range(j->g, j->u, j->out, lo, hi);
}

static void glu_run(glu_job *j) { k3_pool_for_ranges(j->n, K3_OPS_PIECE, glu_range, j); }

void k3_silu_glu(const float *g, const float *u, float *out, size_t n) {
    glu_job j = { g, u, out, n, 0.0f, 0.0f, 0 };
    glu_run(&j);
}

void k3_situ_glu(const float *g, const float *u, float *out, size_t n, float beta1, float beta2) {
    glu_job j = { g, u, out, n, beta1, beta2, 1 };
    glu_run(&j);
}

/* ---------------------------------------------------------------- softmax */

static void softmax_row(const float *x, float *out, size_t dim) {
    float max = -INFINITY;
    int has_nan = 0;
    for (size_t k = 0; k < dim; k++) {
        if (isnan(x[k])) has_nan = 1;
        else if (x[k] > max) max = x[k];
    }
    if (has_nan || max == -INFINITY) {
        for (size_t k = 0; k < dim; k++) out[k] = NAN;
        return;
    }
    float lane[16] = {0};
    for (size_t k = 0; k < dim; k++) {
        out[k] = expf(x[k] - max);
        lane[k % 16] += out[k];
    }
    for (int h = 8; h >= 1; h /= 2)
        for (int i = 0; i < h; i++) lane[i] += lane[i + h];
    float sum = lane[0];
    for (size_t k = 0; k < dim; k++) out[k] /= sum;
}

void k3_softmax(const float *x, float *out, size_t dim, size_t n_rows) {
    for (size_t r = 0; r < n_rows; r++) softmax_row(x + r * dim, out + r * dim, dim);
}
