/*
 * kda_exp.h: constants of the one exp used by every KDA decay (alpha = e^g, e^(Gamma_i - Gamma_j)).
 * Cody-Waite reduction x = n ln2 + r (n = floor(x log2e + 1/2)), e^r by Cephes' degree-5 minimax
 * polynomial (Horner with fmaf), times 2^n built from the exponent bits. Scalar and SIMD variants
 * run the same operations in the same order, so they agree bit for bit (about 1 ulp from e^x).
 */
#ifndef K3_KDA_EXP_H
#define K3_KDA_EXP_H

#define KEXP_LOG2E 1.44269504088896341f
#define KEXP_LN2_HI 0.693359375f
#define KEXP_LN2_LO -2.12194440e-4f
#define KEXP_P0 1.9875691500e-4f
#define KEXP_P1 1.3981999507e-3f
#define KEXP_P2 8.3334519073e-3f
#define KEXP_P3 4.1665795894e-2f
#define KEXP_P4 1.6666665459e-1f
#define KEXP_P5 5.0000001201e-1f
#define KEXP_LOW -87.0f  /* x <= LOW gives 0 (e^-87 = 1.6e-38: below every tolerance) */
#define KEXP_HIGH 88.0f  /* x > HIGH gives +inf */

#endif
