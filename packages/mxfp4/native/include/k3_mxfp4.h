/*
 * k3_mxfp4.h: the C interface of @k3/mxfp4 (packed MXFP4 matvec/matmul).
 *
 * Format (compressed-tensors / K3 layout): W [rows, cols] with cols % 32 == 0.
 *   packed [rows, cols/2] bytes: byte k of a row holds element 2k in its LOW nibble, 2k+1 in its high.
 *   scales [rows, cols/32] bytes: E8M0, block b of a row covers elements 32b .. 32b+31.
 *   value  = E2M1[code] * 2^(s - 127), E2M1 = {0, .5, 1, 1.5, 2, 3, 4, 6} and the negatives (code 8 = -0).
 *   s = 0xFF is refused (find_bad_scale); s = 0 is 2^-127 (an f32 subnormal), applied exactly.
 *
 * fp32 path, one fixed order for every SIMD level, thread count and batch size:
 *   w = E2M1[code] * 2^(s-127)                     exact in f32 (a product with a power of two;
 *                                                  +-inf only if |w| > FLT_MAX, i.e. s >= 253)
 *   32 lanes per (row, batch row), all starting at +0. Lane i < 16 reads byte i of each block (the
 *   order one zero-extending load of the 16 bytes gives an AVX-512 register). For blocks b = 0, 1, ...;
 *   for i < 16, with k = 32b + 2i:
 *     lane[i]      = fmaf(w[k],     x[k],     lane[i])        (even element: low nibble)
 *     lane[16 + i] = fmaf(w[k + 1], x[k + 1], lane[16 + i])   (odd element: high nibble)
 *   then lane[i] += lane[i + h] for h = 16, 8, 4, 2, 1 (i < h); y = lane[0].
 * So the packed kernels give bit for bit what "dequantize, then this gemv" gives, and matmul's
 * Y[b] is bit-identical to matvec(X[b]).
 */
#ifndef K3_MXFP4_H
#define K3_MXFP4_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    const uint8_t *packed; /* rows * cols / 2 bytes, row-major */
    const uint8_t *scales; /* rows * cols / 32 bytes, row-major, no 0xFF */
    size_t rows;
    size_t cols;           /* a multiple of 32 */
} k3_mxfp4_matrix;

#define K3_MXFP4_ABI_VERSION 2u

typedef struct k3_mxfp4_api {
    uint32_t abi_version; /* K3_MXFP4_ABI_VERSION */
    uint32_t struct_size; /* sizeof(k3_mxfp4_api) of the provider */

    /* Index of the first 0xFF byte in scales[n], or -1 when all are valid. */
    ptrdiff_t (*find_bad_scale)(const uint8_t *scales, size_t n);

    /* x [batch, cols] -> xs [batch, cols]: per 32-block, xs[i] = x[2i] and xs[16 + i] = x[2i + 1]
       (even elements, then odd ones), the order the lanes read.
       Split once and reuse for every matrix that reads the same activations (w1 and w3 of all experts). */
    void (*split_activations)(const float *x, size_t cols, size_t batch, float *xs);

    /* Y [batch, rows] = W * xs[b] for b < batch, from split activations (threaded on the k3 pool).
       The caller validated the scales. */
    void (*matmul_split)(const k3_mxfp4_matrix *m, const float *xs, float *y, size_t batch);

    /* As matmul_split from plain activations; returns 0, or -1 if the scratch could not be allocated. */
    int (*matmul)(const k3_mxfp4_matrix *m, const float *x, float *y, size_t batch);

    /* The opt-in int8-activation path (AVX-512 VNNI, else AVX2 vpmaddubsw; same bits; order in the package's
       matmul_int8.h). Approximate (activation rounding, ~1e-4 of sum|w x|); 0, or -1 on out of memory. */
    int (*matmul_int8)(const k3_mxfp4_matrix *m, const float *x, float *y, size_t batch);

    /* (ABI 2) Rows [row_begin, row_end) of Y [batch, m->rows] from split activations, on the CALLING
       thread at the process SIMD level: for an addon that splits its own work into k3 pool tasks (e.g.
       @k3/moe-stream's batched experts: all experts' gate/up rows in one dispatch). Each output element
       has the bits matmul_split gives it (the order above does not depend on the row range or the batch).
       The caller validated the scales. Never uses the pool. */
    void (*rows_split)(const k3_mxfp4_matrix *m, const float *xs, float *y, size_t batch, size_t row_begin,
                       size_t row_end);
} k3_mxfp4_api;

const k3_mxfp4_api *k3_mxfp4_get_api(void);

#ifdef __cplusplus
}
#endif
#endif
