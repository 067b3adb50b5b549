/*
 * gemm_acc_avx2.c: AVX2 + FMA accumulating small GEMM (order in gemm_acc.h). One ymm holds 8
 * neighbouring columns of one C row (8 independent FMA chains, p in order). Tiles are R rows x
 * 8 V columns: 4 x 16 (8 accumulators) over blocks of 4 rows, and 1 x 64 (8 accumulators, enough
 * chains to hide the FMA latency of a single row) for the rows left over; columns that do not fill
 * a vector run the scalar chain (fmaf is the same single-rounding FMA instruction here).
 */
#pragma GCC target("avx2,fma")
#include <immintrin.h>
#include <math.h>
#include <string.h>
#include "gemm_acc.h"

#define INLINE static inline __attribute__((always_inline))

/* 8 values of B at element index idx (f32, or bf16 bits widened exactly). */
INLINE __m256 load_b(const void *B, const int bf16, size_t idx) {
    if (bf16) {
        __m128i raw = _mm_loadu_si128((const __m128i *)((const uint16_t *)B + idx));
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(raw), 16));
    }
    return _mm256_loadu_ps((const float *)B + idx);
}

INLINE float elem_b(const void *B, const int bf16, size_t idx) {
    if (bf16) {
        uint32_t wide = (uint32_t)((const uint16_t *)B)[idx] << 16;
        float f;
        memcpy(&f, &wide, sizeof f);
        return f;
    }
    return ((const float *)B)[idx];
}

/* ---------------------------------------------------------------- tiles */

/* C[R rows][8 V columns] += A[R][k] B[k][8 V]; B is at element offset b0, columns from there. */
INLINE void tile(const int R, const int V, const int bf16, size_t k, const float *A, size_t lda, const void *B,
                 size_t b0, size_t ldb, float *C, size_t ldc) {
    __m256 acc[4][8];
    for (int r = 0; r < R; r++)
        for (int u = 0; u < V; u++) acc[r][u] = _mm256_loadu_ps(C + r * ldc + 8 * u);
    for (size_t p = 0; p < k; p++) {
        if (R == 1) { /* each B vector is used once: load it into its FMA (8 chains + 2 registers) */
            __m256 a = _mm256_set1_ps(A[p]);
            for (int u = 0; u < V; u++) acc[0][u] = _mm256_fmadd_ps(a, load_b(B, bf16, b0 + p * ldb + 8 * u), acc[0][u]);
            continue;
        }
        __m256 b[8];
        for (int u = 0; u < V; u++) b[u] = load_b(B, bf16, b0 + p * ldb + 8 * u);
        for (int r = 0; r < R; r++) {
            __m256 a = _mm256_set1_ps(A[r * lda + p]);
            for (int u = 0; u < V; u++) acc[r][u] = _mm256_fmadd_ps(a, b[u], acc[r][u]);
        }
    }
    for (int r = 0; r < R; r++)
        for (int u = 0; u < V; u++) _mm256_storeu_ps(C + r * ldc + 8 * u, acc[r][u]);
}

/* Columns [j0, n) of one row that do not fill a vector: the scalar chain. */
INLINE void row_tail(const int bf16, size_t j0, size_t n, size_t k, const float *A, const void *B, size_t ldb,
                     float *C) {
    for (size_t j = j0; j < n; j++) {
        float acc = C[j];
        for (size_t p = 0; p < k; p++) acc = fmaf(A[p], elem_b(B, bf16, p * ldb + j), acc);
        C[j] = acc;
    }
}

/* Blocks of 4 rows, column strip by column strip (the B strip stays in L1 across row blocks). */
INLINE void row_blocks(const int bf16, size_t m4, size_t n, size_t k, const float *A, size_t lda, const void *B,
                       size_t ldb, float *C, size_t ldc) {
    size_t j = 0;
    for (; j + 16 <= n; j += 16)
        for (size_t i = 0; i < m4; i += 4) tile(4, 2, bf16, k, A + i * lda, lda, B, j, ldb, C + i * ldc + j, ldc);
    for (; j + 8 <= n; j += 8)
        for (size_t i = 0; i < m4; i += 4) tile(4, 1, bf16, k, A + i * lda, lda, B, j, ldb, C + i * ldc + j, ldc);
    for (size_t i = 0; i < m4; i++) row_tail(bf16, j, n, k, A + i * lda, B, ldb, C + i * ldc);
}

/* One row across all columns. */
INLINE void single_row(const int bf16, size_t n, size_t k, const float *A, const void *B, size_t ldb, float *C) {
    size_t j = 0;
    for (; j + 64 <= n; j += 64) tile(1, 8, bf16, k, A, 0, B, j, ldb, C + j, 0);
    for (; j + 32 <= n; j += 32) tile(1, 4, bf16, k, A, 0, B, j, ldb, C + j, 0);
    for (; j + 16 <= n; j += 16) tile(1, 2, bf16, k, A, 0, B, j, ldb, C + j, 0);
    for (; j + 8 <= n; j += 8) tile(1, 1, bf16, k, A, 0, B, j, ldb, C + j, 0);
    row_tail(bf16, j, n, k, A, B, ldb, C);
}

INLINE void gemm_acc(const int bf16, size_t m, size_t n, size_t k, const float *A, size_t lda, const void *B,
                     size_t ldb, float *C, size_t ldc) {
    size_t m4 = m / 4 * 4;
    row_blocks(bf16, m4, n, k, A, lda, B, ldb, C, ldc);
    for (size_t i = m4; i < m; i++) single_row(bf16, n, k, A + i * lda, B, ldb, C + i * ldc);
}

void k3_gemm_acc_f32_avx2(size_t m, size_t n, size_t k, const float *A, size_t lda, const float *B, size_t ldb,
                          float *C, size_t ldc) {
    gemm_acc(0, m, n, k, A, lda, B, ldb, C, ldc);
}

void k3_gemm_acc_bf16_avx2(size_t m, size_t n, size_t k, const float *A, size_t lda, const uint16_t *B, size_t ldb,
                           float *C, size_t ldc) {
    gemm_acc(1, m, n, k, A, lda, B, ldb, C, ldc);
}
