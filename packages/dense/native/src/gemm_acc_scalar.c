/* gemm_acc_scalar.c: the reference for the accumulating small GEMM. See gemm_acc.h for the order. */
#include <math.h>
#include <string.h>
#include "gemm_acc.h"

static float bf16_to_f32(uint16_t bits) {
    uint32_t wide = (uint32_t)bits << 16;
    float f;
    memcpy(&f, &wide, sizeof f);
    return f;
}

void k3_gemm_acc_f32_scalar(size_t m, size_t n, size_t k, const float *A, size_t lda, const float *B, size_t ldb,
                            float *C, size_t ldc) {
    for (size_t i = 0; i < m; i++)
        for (size_t j = 0; j < n; j++) {
            float acc = C[i * ldc + j];
            for (size_t p = 0; p < k; p++) acc = fmaf(A[i * lda + p], B[p * ldb + j], acc);
            C[i * ldc + j] = acc;
        }
}

void k3_gemm_acc_bf16_scalar(size_t m, size_t n, size_t k, const float *A, size_t lda, const uint16_t *B,
                             size_t ldb, float *C, size_t ldc) {
    for (size_t i = 0; i < m; i++)
        for (size_t j = 0; j < n; j++) {
            float acc = C[i * ldc + j];
            for (size_t p = 0; p < k; p++) acc = fmaf(A[i * lda + p], bf16_to_f32(B[p * ldb + j]), acc);
            C[i * ldc + j] = acc;
        }
}
