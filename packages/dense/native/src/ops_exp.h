/* ops_exp.h: one expf, the same bits at every SIMD level.
 *
 * libm's expf costs 20-40 ns an element on this VM and has no vector form we control, so the
 * activations (sigmoid, SiLU, the GLUs) ran scalar: ~10 % of a Kimi-Linear-48B decode token went
 * to __expf_fma alone. This expf is built only from operations IEEE 754 rounds exactly (multiply,
 * add, fused multiply-add, round-to-nearest-even, exact power-of-two scaling), so the scalar
 * function below and the 8-lane one in ops_activation_avx2.c give identical bits by construction.
 *
 * Method (Cephes expf): n = rint(x / ln 2), r = x - n ln 2 in two parts (Cody-Waite),
 * e^r = 1 + r + r^2 P(r) with Cephes' degree-5 minimax P, then times 2^n as 2^(n>>1) * 2^(n - n>>1):
 * the first product is exact (no underflow), the second rounds once, into the subnormals if it must.
 * Error <= 2 ulp over the normal range (tested against float64 exp). NaN in, NaN out; x >= 89 gives
 * +inf, x <= -104 gives 0.
 */
#ifndef K3_OPS_EXP_H
#define K3_OPS_EXP_H
#include <math.h>
#include <stdint.h>
#include <string.h>

#define K3_EXP_MIN_X (-104.0f)
#define K3_EXP_MAX_X 89.0f
#define K3_EXP_LOG2E 1.44269504088896341f
#define K3_EXP_LN2_HI 0.693359375f      /* ln 2 = LN2_HI - LN2_LO, LN2_HI with 10 significant bits */
#define K3_EXP_LN2_LO 2.12194440e-4f
#define K3_EXP_P0 1.9875691500e-4f
#define K3_EXP_P1 1.3981999507e-3f
#define K3_EXP_P2 8.3334519073e-3f
#define K3_EXP_P3 4.1665795894e-2f
#define K3_EXP_P4 1.6666665459e-1f
#define K3_EXP_P5 5.0000001201e-1f

/* 2^k for k in [-126, 127], as its bit pattern. */
static inline float k3_pow2i(int32_t k) {
    uint32_t bits = (uint32_t)(k + 127) << 23;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static inline float k3_expf(float x) {
    if (isnan(x)) return x;
    float xc = fminf(fmaxf(x, K3_EXP_MIN_X), K3_EXP_MAX_X);
    float n = nearbyintf(xc * K3_EXP_LOG2E);
    float r = fmaf(n, -K3_EXP_LN2_HI, xc);
    r = fmaf(n, K3_EXP_LN2_LO, r);
    float p = K3_EXP_P0;
    p = fmaf(p, r, K3_EXP_P1);
    p = fmaf(p, r, K3_EXP_P2);
    p = fmaf(p, r, K3_EXP_P3);
    p = fmaf(p, r, K3_EXP_P4);
    p = fmaf(p, r, K3_EXP_P5);
    float y = fmaf(p, r * r, r) + 1.0f;
    int32_t ni = (int32_t)n;
    int32_t n1 = ni >> 1; /* arithmetic shift: floor(n / 2) */
    return (y * k3_pow2i(n1)) * k3_pow2i(ni - n1);
}

/* sigma(x) = 1 / (1 + e^-x); a NaN comes back as itself (the compiler may flip the sign of the
   NaN that -x makes, so the vector form could not match it bit for bit). */
static inline float k3_sigmoidf(float x) {
    if (isnan(x)) return x;
    return 1.0f / (1.0f + k3_expf(-x));
}

#endif
