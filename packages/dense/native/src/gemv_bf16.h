/*
 * gemv_bf16.h: y = W x with W in bf16 (raw uint16 bits), x and y in f32.
 *
 * Reduction order (shared by every variant, so results are bit-identical):
 *   lane[k % 16] = fmaf(w[k], x[k], lane[k % 16])   for k = 0, 1, ..., cols-1
 *   then lane[i] += lane[i + h] for h = 8, 4, 2, 1  (i < h)
 *   y = lane[0]
 */
#ifndef K3_GEMV_BF16_H
#define K3_GEMV_BF16_H
#include <stddef.h>
#include <stdint.h>

typedef void (*k3_gemv_bf16_rows_fn)(const uint16_t *w, size_t ld, const float *x, float *y,
                                      size_t row_begin, size_t row_end, size_t cols);

void k3_gemv_bf16_rows_scalar(const uint16_t *w, size_t ld, const float *x, float *y,
                              size_t row_begin, size_t row_end, size_t cols);
void k3_gemv_bf16_rows_avx2(const uint16_t *w, size_t ld, const float *x, float *y,
                            size_t row_begin, size_t row_end, size_t cols);
void k3_gemv_bf16_rows_avx512(const uint16_t *w, size_t ld, const float *x, float *y,
                              size_t row_begin, size_t row_end, size_t cols);

/* Threaded entry point; dispatches on the current SIMD level. */
void k3_gemv_bf16(const uint16_t *w, size_t ld, const float *x, float *y, size_t rows, size_t cols);

#endif
