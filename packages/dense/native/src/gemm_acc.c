/* gemm_acc.c: picks the accumulating small GEMM for the current SIMD level (runs on the caller's thread). */
#include "gemm_acc.h"
#include "cpu.h"

void k3_gemm_acc_f32(size_t m, size_t n, size_t k, const float *A, size_t lda, const float *B, size_t ldb, float *C,
                     size_t ldc) {
    switch (k3_cpu_level()) {
        case K3_SIMD_AVX512: k3_gemm_acc_f32_avx512(m, n, k, A, lda, B, ldb, C, ldc); break;
        case K3_SIMD_AVX2: k3_gemm_acc_f32_avx2(m, n, k, A, lda, B, ldb, C, ldc); break;
        default: k3_gemm_acc_f32_scalar(m, n, k, A, lda, B, ldb, C, ldc);
    }
}

void k3_gemm_acc_bf16(size_t m, size_t n, size_t k, const float *A, size_t lda, const uint16_t *B, size_t ldb,
                      float *C, size_t ldc) {
    switch (k3_cpu_level()) {
        case K3_SIMD_AVX512: k3_gemm_acc_bf16_avx512(m, n, k, A, lda, B, ldb, C, ldc); break;
        case K3_SIMD_AVX2: k3_gemm_acc_bf16_avx2(m, n, k, A, lda, B, ldb, C, ldc); break;
        default: k3_gemm_acc_bf16_scalar(m, n, k, A, lda, B, ldb, C, ldc);
    }
}
