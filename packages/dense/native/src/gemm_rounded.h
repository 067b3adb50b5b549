/*
 * gemm_rounded.h: the OPT-IN rounded bf16 GEMM, Y[b][r] ~= W[r] . X[b], with the activations
 * rounded to bf16 (round to nearest even, NaN kept quiet) before the products, as ggml's bf16
 * matmul does. It is NOT the exact path of gemm.h: its error against gemmBf16 is measured in the
 * package's tests and bench (README). Threads split rows, so it is bit-identical for any thread
 * count at one SIMD level.
 *   - AVX-512 level on a CPU with AVX512-BF16: vdpbf16ps (order in gemm_rounded_avx512bf16.c);
 *   - otherwise: the exact kernels of gemm.h on the rounded activations (so every level without
 *     vdpbf16ps gives the same bits, and the products are exact: the only rounding is X's).
 */
#ifndef K3_GEMM_ROUNDED_H
#define K3_GEMM_ROUNDED_H
#include <stddef.h>
#include <stdint.h>

/* f32 -> bf16 bits, round to nearest even; NaN stays NaN (quiet). */
uint16_t k3_f32_to_bf16(float f);

void k3_gemm_bf16_rounded_rows_avx512bf16(const uint16_t *w, size_t ld, const uint16_t *xb, size_t ldx, float *y,
                                          size_t ldy, size_t cols, size_t batch, size_t row_begin, size_t row_end);

/* 1 if the rounded GEMM runs vdpbf16ps at the current SIMD level. */
int k3_gemm_rounded_uses_dpbf16(void);

/* Threaded entry (X [batch, cols], Y [batch, rows] contiguous). Returns 0, or -1 if out of memory. */
int k3_gemm_bf16_rounded(const uint16_t *w, size_t ld, const float *x, float *y, size_t rows, size_t cols,
                         size_t batch);

#endif
