/*
 * gemm_acc.h: the accumulating small GEMM  C[m][n] += A[m][k] B[k][n], with A and C in f32 and
 * B in f32 or bf16 (raw bits, widened exactly). It is the inner product of the chunked KDA
 * prefill (@k3/kda) and of MLA's P.V and absorption (@k3/mla); they call it through k3_dense_api.
 *
 * Layout: all three row-major with their own row strides in elements (lda >= k, ldb >= n,
 * ldc >= n); C must not overlap A or B.
 *
 * Reduction order for every (i, j), shared by every variant (scalar, AVX2, AVX-512), any tiling
 * and any blocking of the p range:
 *   C[i][j] = fmaf(A[i][p], B[p][j], C[i][j])   for p = 0, 1, ..., k-1   (starting from C)
 * i.e. one FMA chain per element, in p order: a SIMD variant runs many (i, j) chains side by
 * side in vector lanes and never splits one chain, so it is bit-identical to the scalar reference
 * (NaN, inf and signed zeros included: masked lanes are neither read into a chain nor stored).
 *
 * These run on the calling thread (callers invoke them from inside their own parallel_for tasks).
 */
#ifndef K3_GEMM_ACC_H
#define K3_GEMM_ACC_H
#include <stddef.h>
#include <stdint.h>

typedef void (*k3_gemm_acc_f32_fn)(size_t m, size_t n, size_t k, const float *A, size_t lda, const float *B,
                                   size_t ldb, float *C, size_t ldc);
typedef void (*k3_gemm_acc_bf16_fn)(size_t m, size_t n, size_t k, const float *A, size_t lda, const uint16_t *B,
                                    size_t ldb, float *C, size_t ldc);

void k3_gemm_acc_f32_scalar(size_t m, size_t n, size_t k, const float *A, size_t lda, const float *B, size_t ldb,
                            float *C, size_t ldc);
void k3_gemm_acc_bf16_scalar(size_t m, size_t n, size_t k, const float *A, size_t lda, const uint16_t *B,
                             size_t ldb, float *C, size_t ldc);
void k3_gemm_acc_f32_avx2(size_t m, size_t n, size_t k, const float *A, size_t lda, const float *B, size_t ldb,
                          float *C, size_t ldc);
void k3_gemm_acc_bf16_avx2(size_t m, size_t n, size_t k, const float *A, size_t lda, const uint16_t *B, size_t ldb,
                           float *C, size_t ldc);
void k3_gemm_acc_f32_avx512(size_t m, size_t n, size_t k, const float *A, size_t lda, const float *B, size_t ldb,
                            float *C, size_t ldc);
void k3_gemm_acc_bf16_avx512(size_t m, size_t n, size_t k, const float *A, size_t lda, const uint16_t *B,
                             size_t ldb, float *C, size_t ldc);

/* Dispatch on the current SIMD level (k3_cpu_level). */
void k3_gemm_acc_f32(size_t m, size_t n, size_t k, const float *A, size_t lda, const float *B, size_t ldb, float *C,
                     size_t ldc);
void k3_gemm_acc_bf16(size_t m, size_t n, size_t k, const float *A, size_t lda, const uint16_t *B, size_t ldb,
                      float *C, size_t ldc);

#endif
