/*
 * gemm_rows.c: the row kernel of each SIMD level, and dot rows (gemm.h): the same kernels called
 * once on the caller's thread with a stride on every operand. Nothing here reads process-wide
 * state, so the sanitizer driver of @k3/kda and @k3/mla (test-utils/native/fake_dense.c) runs
 * exactly this code at a level it picks.
 */
#include "gemm.h"

k3_gemm_rows_fn k3_gemm_rows_variant(k3_simd_level level, k3_weight_type type) {
    switch (level) {
        case K3_SIMD_AVX512: return type == K3_WEIGHT_BF16 ? k3_gemm_bf16_rows_avx512 : k3_gemm_f32_rows_avx512;
        case K3_SIMD_AVX2: return type == K3_WEIGHT_BF16 ? k3_gemm_bf16_rows_avx2 : k3_gemm_f32_rows_avx2;
        default: return type == K3_WEIGHT_BF16 ? k3_gemm_bf16_rows_scalar : k3_gemm_f32_rows_scalar;
    }
}

/* C[i][j] = A[i] . B[j]: B plays W (its rows are the output columns), A plays the batch X. */
void k3_dot_rows_at(k3_simd_level level, k3_weight_type type, size_t m, size_t n, size_t k, const float *A,
                    size_t lda, const void *B, size_t ldb, float *C, size_t ldc) {
    if (m == 0 || n == 0) return;
    k3_gemm_rows_variant(level, type)(B, ldb, A, lda, C, ldc, k, m, 0, n);
}
