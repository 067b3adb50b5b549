/*
 * k3_tanh.h: the one tanh of the kernels (SiTU-GLU's two per element), with the same bits at every
 * SIMD level. libm's tanhf has no vector form we control and costs 15-20 ns an element here.
 *
 * Cephes' tanhf: below |x| = 0.625 the odd minimax polynomial x + x s P(s), s = x^2 (Horner with
 * fmaf); from 0.625 on 1 - 2 / (e^(2|x|) + 1) with k3_expf, and x's sign. Only exactly rounded
 * steps, so the 8-lane twin (k3_tanh_avx2.h) that runs the same operations in the same order agrees
 * bit for bit. Within 3 ulp of tanh (the tests bound it); +-0 and NaN give themselves, +-inf +-1.
 */
#ifndef K3_TANH_H
#define K3_TANH_H
#include <math.h>
#include "k3_exp.h"

#define K3_TANH_SMALL 0.625f
#define K3_TANH_P0 -5.70498872745e-3f
#define K3_TANH_P1 2.06390887954e-2f
#define K3_TANH_P2 -5.37397155531e-2f
#define K3_TANH_P3 1.33314422036e-1f
#define K3_TANH_P4 -3.33332819422e-1f

static inline float k3_tanhf(float x) {
    if (x == 0.0f || x != x) return x;
    float z = fabsf(x);
    if (z < K3_TANH_SMALL) {
        float s = x * x;
        float p = fmaf(K3_TANH_P0, s, K3_TANH_P1);
        p = fmaf(p, s, K3_TANH_P2);
        p = fmaf(p, s, K3_TANH_P3);
        p = fmaf(p, s, K3_TANH_P4);
        return fmaf(p * s, x, x);
    }
    float t = 1.0f - 2.0f / (k3_expf(z + z) + 1.0f);
    return copysignf(t, x);
}

#endif
