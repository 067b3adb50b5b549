/*
 * gemm.h: Y[b] = W X[b] for a batch of activations, W in bf16 (raw bits) or f32, X and Y in f32.
 * gemv is the batch-1 case of the same kernels.
 *
 * Layout: W row-major [rows, cols] with row stride `ld` elements; X [batch, cols] contiguous;
 * Y [batch, rows] contiguous (Y[b * rows + r]).
 *
 * Reduction order for every (b, r), shared by every variant and every batch size, so a batched
 * prefill gives bit for bit what token-by-token decode gives (and what gemv_bf16 gives):
 *   lane[k % 16] = fmaf(w[r][k], X[b][k], lane[k % 16])   for k = 0, 1, ..., cols-1
 *   then lane[i] += lane[i + h] for h = 8, 4, 2, 1  (i < h)
 *   Y[b][r] = lane[0]
 * Lanes start at +0; lanes with no element stay +0 (SIMD tails are masked, never padded with 0*x).
 *
 * Weight reuse: the threaded entry splits ROWS into tasks; a task walks its rows in tiles of a few
 * rows and runs the whole batch against a tile while it sits in L1, so each weight byte comes from
 * DRAM once per call, not once per batch row.
 */
#ifndef K3_GEMM_H
#define K3_GEMM_H
#include <stddef.h>
#include <stdint.h>
#include "k3_dense.h"

typedef enum { K3_WEIGHT_F32 = 0, K3_WEIGHT_BF16 = 1 } k3_weight_type;

/* Computes rows [row_begin, row_end) of Y for the whole batch: Y[b * ldy + r] = W[r] . X[b * ldx]
   (the threaded entries pass ldx = cols, ldy = rows; dot_rows passes the caller's strides). */
typedef void (*k3_gemm_rows_fn)(const void *w, size_t ld, const float *x, size_t ldx, float *y, size_t ldy,
                                size_t cols, size_t batch, size_t row_begin, size_t row_end);

void k3_gemm_bf16_rows_scalar(const void *w, size_t ld, const float *x, size_t ldx, float *y, size_t ldy,
                              size_t cols, size_t batch, size_t row_begin, size_t row_end);
void k3_gemm_f32_rows_scalar(const void *w, size_t ld, const float *x, size_t ldx, float *y, size_t ldy,
                             size_t cols, size_t batch, size_t row_begin, size_t row_end);
void k3_gemm_bf16_rows_avx2(const void *w, size_t ld, const float *x, size_t ldx, float *y, size_t ldy,
                            size_t cols, size_t batch, size_t row_begin, size_t row_end);
void k3_gemm_f32_rows_avx2(const void *w, size_t ld, const float *x, size_t ldx, float *y, size_t ldy,
                           size_t cols, size_t batch, size_t row_begin, size_t row_end);
void k3_gemm_bf16_rows_avx512(const void *w, size_t ld, const float *x, size_t ldx, float *y, size_t ldy,
                              size_t cols, size_t batch, size_t row_begin, size_t row_end);
void k3_gemm_f32_rows_avx512(const void *w, size_t ld, const float *x, size_t ldx, float *y, size_t ldy,
                             size_t cols, size_t batch, size_t row_begin, size_t row_end);

/* The row kernel of a SIMD level (gemm_rows.c; no pool, no process-wide state). */
k3_gemm_rows_fn k3_gemm_rows_variant(k3_simd_level level, k3_weight_type type);

/* Threaded entry points; dispatch on the current SIMD level. */
void k3_gemm_bf16(const uint16_t *w, size_t ld, const float *x, float *y, size_t rows, size_t cols,
                  size_t batch);
void k3_gemm_f32(const float *w, size_t ld, const float *x, float *y, size_t rows, size_t cols,
                 size_t batch);
void k3_gemv_f32(const float *w, size_t ld, const float *x, float *y, size_t rows, size_t cols);

/*
 * dot rows: the same kernels as one unthreaded call with strides on every operand,
 *   C[i * ldc + j] = A[i] . B[j]   for i < m, j < n, over k values
 * (A rows lda apart, f32; B rows ldb apart, f32 or bf16 bits; lda, ldb >= k, ldc >= n), in the
 * 16-lane order above with A as X and B as W: C[i][j] is bit for bit gemv(B, A[i])[j]. It runs on
 * the calling thread (for use inside parallel_for tasks: MLA scores, KDA's direct dots).
 * k3_dot_rows_at runs a given level's kernel (gemm_rows.c; the sanitizer driver calls it).
 */
void k3_dot_rows_at(k3_simd_level level, k3_weight_type type, size_t m, size_t n, size_t k, const float *A,
                    size_t lda, const void *B, size_t ldb, float *C, size_t ldc);
void k3_dot_rows_f32(size_t m, size_t n, size_t k, const float *A, size_t lda, const float *B, size_t ldb, float *C,
                     size_t ldc);
void k3_dot_rows_bf16(size_t m, size_t n, size_t k, const float *A, size_t lda, const uint16_t *B, size_t ldb,
                      float *C, size_t ldc);

#endif
