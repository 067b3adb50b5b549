/* ops_activation_avx2.h: the element-wise activations 8 lanes at a time (ops_activation_avx2.c);
   each writes out[lo, hi) with the same bits as the scalar loops in ops_activation.c. */
#ifndef K3_OPS_ACTIVATION_AVX2_H
#define K3_OPS_ACTIVATION_AVX2_H
#include <stddef.h>
#include "k3_tanh.h"

void k3_sigmoid_range_avx2(const float *x, float *out, size_t lo, size_t hi);
void k3_tanh_range_avx2(const float *x, float *out, size_t lo, size_t hi);
void k3_sigmoid_mul_range_avx2(const float *x, const float *gate, float *out, size_t lo, size_t hi);
void k3_silu_range_avx2(const float *x, float *out, size_t lo, size_t hi);
void k3_silu_glu_range_avx2(const float *g, const float *u, float *out, size_t lo, size_t hi);
void k3_situ_glu_range_avx2(const float *g, const float *u, float *out, size_t lo, size_t hi, float beta1, float beta2);

/* out[i] = [(b1 tanh(g / b1)) sigma(g)] [b2 tanh(u / b2)], the scalar form both files use. */
static inline void out_situ(const float *g, const float *u, float *out, size_t i, float beta1, float beta2) {
    float gate = (beta1 * k3_tanhf(g[i] / beta1)) * k3_sigmoidf(g[i]);
    float up = beta2 * k3_tanhf(u[i] / beta2);
    out[i] = gate * up;
}

#endif
