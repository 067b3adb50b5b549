/*
 * gemm_blocked.h: the register- and cache-blocked batched GEMM (prefill), same signature and the
 * same bits as the row kernels of gemm.h (the order is written there): every (b, r) lane vector
 * is one FMA chain in k order, parked in a per-thread scratch between K blocks.
 */
#ifndef K3_GEMM_BLOCKED_H
#define K3_GEMM_BLOCKED_H
#include <stddef.h>
#include "gemm.h"

void k3_gemm_bf16_blocked_avx512(const void *w, size_t ld, const float *x, size_t ldx, float *y, size_t ldy,
                                 size_t cols, size_t batch, size_t row_begin, size_t row_end);
void k3_gemm_f32_blocked_avx512(const void *w, size_t ld, const float *x, size_t ldx, float *y, size_t ldy,
                                size_t cols, size_t batch, size_t row_begin, size_t row_end);
void k3_gemm_bf16_blocked_avx2(const void *w, size_t ld, const float *x, size_t ldx, float *y, size_t ldy,
                               size_t cols, size_t batch, size_t row_begin, size_t row_end);
void k3_gemm_f32_blocked_avx2(const void *w, size_t ld, const float *x, size_t ldx, float *y, size_t ldy,
                              size_t cols, size_t batch, size_t row_begin, size_t row_end);

/* A 64-byte aligned per-thread scratch of at least `bytes` (kept for the thread's life, grown on
   demand); NULL if out of memory. */
void *k3_gemm_scratch(size_t bytes);

#endif
