/*
 * k3_exp.h: the one e^x of the kernels that need theirs vectorised (KDA's decays, the dense
 * activations), with the same bits at every SIMD level. libm's expf has no vector form we
 * control and costs 20-40 ns an element here.
 *
 * Cody-Waite reduction x = n ln2 + r (n = floor(x log2e + 1/2)), e^r by Cephes' degree-5 minimax
 * polynomial (Horner with fmaf), times 2^n built from the exponent bits: only exactly rounded
 * steps, so the vector twins (k3_exp_avx2.h; @k3/kda's AVX-512 kexp16) that run the same
 * operations in the same order agree bit for bit. About 1 ulp from e^x; x <= -87 gives 0
 * (e^-87 = 1.6e-38, below every tolerance), x > 88 gives +inf, NaN gives itself.
 */
#ifndef K3_EXP_H
#define K3_EXP_H
#include <math.h>
#include <stdint.h>
#include <string.h>

#define K3_EXP_LOG2E 1.44269504088896341f
#define K3_EXP_LN2_HI 0.693359375f
#define K3_EXP_LN2_LO -2.12194440e-4f
#define K3_EXP_P0 1.9875691500e-4f
#define K3_EXP_P1 1.3981999507e-3f
#define K3_EXP_P2 8.3334519073e-3f
#define K3_EXP_P3 4.1665795894e-2f
#define K3_EXP_P4 1.6666665459e-1f
#define K3_EXP_P5 5.0000001201e-1f
#define K3_EXP_LOW -87.0f /* x <= LOW gives 0 */
#define K3_EXP_HIGH 88.0f /* x > HIGH gives +inf */

static inline float k3_expf(float x) {
    if (x != x) return x;
    if (x <= K3_EXP_LOW) return 0.0f;
    if (x > K3_EXP_HIGH) return INFINITY;
    float n = floorf(x * K3_EXP_LOG2E + 0.5f);
    float r = fmaf(n, -K3_EXP_LN2_HI, x);
    r = fmaf(n, -K3_EXP_LN2_LO, r);
    float p = K3_EXP_P0;
    p = fmaf(p, r, K3_EXP_P1);
    p = fmaf(p, r, K3_EXP_P2);
    p = fmaf(p, r, K3_EXP_P3);
    p = fmaf(p, r, K3_EXP_P4);
    p = fmaf(p, r, K3_EXP_P5);
    float y = fmaf(p, r * r, r) + 1.0f;
    uint32_t bits = (uint32_t)((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return y * scale;
}

/* sigma(x) = 1 / (1 + e^-x); a NaN comes back as itself (the compiler may flip the sign of the
   NaN that -x makes, so a vector form could not match it bit for bit). */
static inline float k3_sigmoidf(float x) {
    if (isnan(x)) return x;
    return 1.0f / (1.0f + k3_expf(-x));
}

#endif
