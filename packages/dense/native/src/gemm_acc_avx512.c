/*
 * gemm_acc_avx512.c: AVX-512 accumulating small GEMM (order in gemm_acc.h). One zmm holds 16
 * neighbouring columns of one C row, i.e. 16 independent FMA chains; the p loop runs in order, so
 * each chain is the scalar one. Tiles are R rows x 16 V columns: 4 x 64 over blocks of 4 rows (16
 * accumulators, per p 4 loads of a B row, bf16 widened, and 4 broadcasts of A), and 1 x 128 for the
 * rows left over (8 chains: a single row has no other rows to hide the FMA latency behind; this is
 * MLA's one-token absorption). The last vector of a strip is masked: lanes past n are neither
 * loaded into a chain nor stored.
 */
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl")
#include <immintrin.h>
#include "gemm_acc.h"

#define INLINE static inline __attribute__((always_inline))

static __mmask16 mask_for(size_t n) { return n >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1); }

/* 16 values of B at element index idx (f32, or bf16 bits widened exactly). */
INLINE __m512 load_b(const void *B, const int bf16, size_t idx, __mmask16 m) {
    if (bf16) {
        __m256i raw = _mm256_maskz_loadu_epi16(m, (const uint16_t *)B + idx);
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
    }
    return _mm512_maskz_loadu_ps(m, (const float *)B + idx);
}

/* ---------------------------------------------------------------- tiles */

/* C[R rows][16 V columns] += A[R][kc] B[kc][16 V]; B is at element offset b0, columns from there. */
INLINE void tile(const int R, const int V, const int bf16, size_t kc, const float *A, size_t lda, const void *B,
                 size_t b0, size_t ldb, float *C, size_t ldc, __mmask16 last) {
    __m512 acc[4][8];
    for (int r = 0; r < R; r++)
        for (int u = 0; u < V; u++) acc[r][u] = _mm512_maskz_loadu_ps(u == V - 1 ? last : 0xFFFF, C + r * ldc + 16 * u);
    for (size_t p = 0; p < kc; p++) {
        if (R == 1) { /* each B vector is used once: load it into its FMA */
            __m512 a = _mm512_set1_ps(A[p]);
            for (int u = 0; u < V; u++)
                acc[0][u] = _mm512_fmadd_ps(a, load_b(B, bf16, b0 + p * ldb + 16 * u, u == V - 1 ? last : 0xFFFF), acc[0][u]);
            continue;
        }
        __m512 b[8];
        for (int u = 0; u < V; u++) b[u] = load_b(B, bf16, b0 + p * ldb + 16 * u, u == V - 1 ? last : 0xFFFF);
        for (int r = 0; r < R; r++) {
            __m512 a = _mm512_set1_ps(A[r * lda + p]);
            for (int u = 0; u < V; u++) acc[r][u] = _mm512_fmadd_ps(a, b[u], acc[r][u]);
        }
    }
    for (int r = 0; r < R; r++)
        for (int u = 0; u < V; u++) _mm512_mask_storeu_ps(C + r * ldc + 16 * u, u == V - 1 ? last : 0xFFFF, acc[r][u]);
}

/* Rows [0, m4) (a multiple of 4) of one column strip [j, j + 16 V), in tiles of 4 rows. */
INLINE void strip(const int V, const int bf16, size_t m4, size_t kc, const float *A, size_t lda, const void *B,
                  size_t b0, size_t ldb, float *C, size_t ldc, __mmask16 last) {
    for (size_t i = 0; i < m4; i += 4) tile(4, V, bf16, kc, A + i * lda, lda, B, b0, ldb, C + i * ldc, ldc, last);
}

/* One row across all n columns: 128 at a time, then 64, 32, 16 (the last one masked). */
INLINE void single_row(const int bf16, size_t n, size_t kc, const float *A, const void *B, size_t b0, size_t ldb,
                       float *C) {
    size_t j = 0;
    for (; j + 128 <= n; j += 128) tile(1, 8, bf16, kc, A, 0, B, b0 + j, ldb, C + j, 0, 0xFFFF);
    for (; j + 64 <= n; j += 64) tile(1, 4, bf16, kc, A, 0, B, b0 + j, ldb, C + j, 0, 0xFFFF);
    for (; j + 32 <= n; j += 32) tile(1, 2, bf16, kc, A, 0, B, b0 + j, ldb, C + j, 0, 0xFFFF);
    for (; j < n; j += 16) tile(1, 1, bf16, kc, A, 0, B, b0 + j, ldb, C + j, 0, mask_for(n - j));
}

/* ---------------------------------------------------------------- blocking */

/* The p range is cut into slices of KC so that one B strip slice (KC x 64 floats, 16 KiB) stays in
   L1 while every row tile passes over it; C carries each element's chain from one slice to the
   next, so every element still sees p = 0, 1, ..., k-1 in order. */
#define KC 64

INLINE void gemm_acc(const int bf16, size_t m, size_t n, size_t k, const float *A, size_t lda, const void *B,
                     size_t ldb, float *C, size_t ldc) {
    for (size_t p0 = 0; p0 < k; p0 += KC) {
        size_t kc = k - p0 < KC ? k - p0 : KC;
        const float *Ap = A + p0;
        size_t bp = p0 * ldb;
        size_t m4 = m / 4 * 4, j = 0;
        if (m4 > 0) {
            for (; j + 64 <= n; j += 64) strip(4, bf16, m4, kc, Ap, lda, B, bp + j, ldb, C + j, ldc, 0xFFFF);
            for (; j + 32 <= n; j += 32) strip(2, bf16, m4, kc, Ap, lda, B, bp + j, ldb, C + j, ldc, 0xFFFF);
            for (; j < n; j += 16) strip(1, bf16, m4, kc, Ap, lda, B, bp + j, ldb, C + j, ldc, mask_for(n - j));
        }
        for (size_t i = m4; i < m; i++) single_row(bf16, n, kc, Ap + i * lda, B, bp, ldb, C + i * ldc);
    }
}

void k3_gemm_acc_f32_avx512(size_t m, size_t n, size_t k, const float *A, size_t lda, const float *B, size_t ldb,
                            float *C, size_t ldc) {
    gemm_acc(0, m, n, k, A, lda, B, ldb, C, ldc);
}

void k3_gemm_acc_bf16_avx512(size_t m, size_t n, size_t k, const float *A, size_t lda, const uint16_t *B,
                             size_t ldb, float *C, size_t ldc) {
    gemm_acc(1, m, n, k, A, lda, B, ldb, C, ldc);
}
