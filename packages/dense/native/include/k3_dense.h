/*
 * k3_dense.h: the C interface of @k3/dense, the base kernels every k3 addon shares.
 *
 * One process has ONE thread pool and ONE SIMD level. Other addons (@k3/mxfp4, @k3/kda, ...)
 * do not link a copy of these kernels: @k3/dense hands them a pointer to its `k3_dense_api`
 * table (a N-API external, see `nativeApi()` in the TS API) and they call through it.
 *
 * Determinism contract (all kernels, all ISA levels, any thread count):
 *   - threads split OUTPUTS, never a reduction;
 *   - every reduction has one fixed order, written down next to its scalar reference, and the
 *     SIMD variants reproduce that order exactly (same lanes, same tree, FMA where the scalar
 *     reference uses fmaf);
 *   - compiled with -ffp-contract=off so the compiler never fuses what the source does not.
 */
#ifndef K3_DENSE_H
#define K3_DENSE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- SIMD levels */

typedef enum {
    K3_SIMD_SCALAR = 0,
    K3_SIMD_AVX2 = 1,   /* x86-64-v3: AVX2 + FMA + F16C */
    K3_SIMD_AVX512 = 2  /* x86-64-v4: AVX-512 F/BW/DQ/VL */
} k3_simd_level;

/* ---------------------------------------------------------------- thread pool */

/* Runs task(ctx, i) for every i in [0, n_tasks) on the pool; returns when all are done. */
typedef void (*k3_task_fn)(void *ctx, int task_index);

/* ---------------------------------------------------------------- the shared table */

#define K3_DENSE_ABI_VERSION 1u

typedef struct k3_dense_api {
    uint32_t abi_version; /* K3_DENSE_ABI_VERSION */
    uint32_t struct_size; /* sizeof(k3_dense_api) of the provider */

    k3_simd_level (*simd_level)(void);
    int (*thread_count)(void);
    void (*parallel_for)(int n_tasks, k3_task_fn task, void *ctx);

    /* y[rows] = W[rows, cols] (bf16 bits, row-major, row stride `ld` elements) * x[cols] (f32). */
    void (*gemv_bf16)(const uint16_t *w, size_t ld, const float *x, float *y, size_t rows, size_t cols);

    /* ---- appended fields (check struct_size before using a field past gemv_bf16) ---- */

    /* y[rows] = W[rows, cols] (f32, row stride `ld`) * x[cols]. Same order as gemv_bf16. */
    void (*gemv_f32)(const float *w, size_t ld, const float *x, float *y, size_t rows, size_t cols);
    /* Y[b][r] = W[r] . X[b] for b < batch; X [batch, cols], Y [batch, rows], both contiguous.
       Y[b] is bit-identical to gemv of X[b]; each weight byte is read from memory once per call. */
    void (*gemm_bf16)(const uint16_t *w, size_t ld, const float *x, float *y, size_t rows, size_t cols,
                      size_t batch);
    void (*gemm_f32)(const float *w, size_t ld, const float *x, float *y, size_t rows, size_t cols,
                     size_t batch);

    /* Row-wise over n_rows rows of `dim` (reduction order in the package's ops.h). out may alias x. */
    void (*rms_norm)(const float *x, const float *w, float eps, float *out, size_t dim, size_t n_rows);
    void (*l2_normalize)(const float *x, float *out, size_t dim, float eps, size_t n_rows);

    /* Elementwise over n values; out may alias an input. */
    void (*sigmoid)(const float *x, float *out, size_t n);
    void (*silu)(const float *x, float *out, size_t n);
    void (*silu_glu)(const float *gate, const float *up, float *out, size_t n);
    void (*situ_glu)(const float *gate, const float *up, float *out, size_t n, float beta1, float beta2);
    void (*softmax)(const float *x, float *out, size_t dim, size_t n_rows);
    /* k largest of values[n], descending; ties -> lower index first; NaN ranks below -inf. k <= n. */
    void (*top_k)(const float *values, size_t n, size_t k, int32_t *out_index, float *out_value);

    /* ---- appended: the accumulating small GEMM (@k3/kda chunked prefill, @k3/mla P.V) ---- */

    /* C[m][n] += A[m][k] B[k][n]; A, C f32, B f32 or bf16 bits; row-major, row strides lda >= k,
       ldb >= n, ldc >= n (elements); C must not overlap A or B. Fixed order for every (i, j), at
       every SIMD level (one FMA chain per element, never split):
         C[i][j] = fmaf(A[i][p], B[p][j], C[i][j])   for p = 0, 1, ..., k-1   (starting from C)
       Runs on the calling thread (call it from inside parallel_for tasks; it never uses the pool). */
    void (*gemm_acc_f32)(size_t m, size_t n, size_t k, const float *A, size_t lda, const float *B, size_t ldb,
                         float *C, size_t ldc);
    void (*gemm_acc_bf16)(size_t m, size_t n, size_t k, const float *A, size_t lda, const uint16_t *B, size_t ldb,
                          float *C, size_t ldc);

    /* ---- appended: dot rows (@k3/mla scores and W_UV projection, @k3/kda direct dots) ---- */

    /* C[i][j] = A[i] . B[j] over k values, i < m, j < n; A f32, B f32 or bf16 bits; row strides
       lda >= k, ldb >= k, ldc >= n (elements); C must not overlap A or B; k = 0 writes +0. The dot
       order of gemv/gemm above, at every SIMD level (C[i][j] is bit for bit gemv(B, A[i])[j]):
         lane[p % 16] = fmaf(A[i][p], B[j][p], lane[p % 16])  for p = 0, 1, ..., k-1  (lanes from +0)
         then lane[t] += lane[t + h] for h = 8, 4, 2, 1;  C[i][j] = lane[0]
       Runs on the calling thread (call it from inside parallel_for tasks; it never uses the pool). */
    void (*dot_rows_f32)(size_t m, size_t n, size_t k, const float *A, size_t lda, const float *B, size_t ldb,
                         float *C, size_t ldc);
    void (*dot_rows_bf16)(size_t m, size_t n, size_t k, const float *A, size_t lda, const uint16_t *B, size_t ldb,
                          float *C, size_t ldc);

    /* ---- appended: the opt-in ROUNDED bf16 GEMM (X rounded to bf16, vdpbf16ps where the CPU has
       AVX512-BF16; NOT the exact order above; bit-identical for any thread count at one SIMD level).
       Same layout as gemm_bf16. Returns 0, or -1 if out of memory (Y untouched). ---- */
    int (*gemm_bf16_rounded)(const uint16_t *w, size_t ld, const float *x, float *y, size_t rows, size_t cols,
                             size_t batch);
} k3_dense_api;

/* Provided by @k3/dense itself. */
const k3_dense_api *k3_dense_get_api(void);

#ifdef __cplusplus
}
#endif
#endif
