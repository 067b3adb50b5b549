/* ops_activation.c: sigmoid, SiLU, SiLU-GLU, SiTU-GLU and softmax with libm expf/tanhf. */
#include <math.h>
#include "ops.h"

static float sigmoid1(float x) { return 1.0f / (1.0f + expf(-x)); }

void k3_sigmoid(const float *x, float *out, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = sigmoid1(x[i]);
}

void k3_silu(const float *x, float *out, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = x[i] * sigmoid1(x[i]);
}

void k3_silu_glu(const float *g, const float *u, float *out, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = (g[i] * sigmoid1(g[i])) * u[i];
}

void k3_situ_glu(const float *g, const float *u, float *out, size_t n, float beta1, float beta2) {
    for (size_t i = 0; i < n; i++) {
        float gate = (beta1 * tanhf(g[i] / beta1)) * sigmoid1(g[i]);
        float up = beta2 * tanhf(u[i] / beta2);
        out[i] = gate * up;
    }
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
