/*
 * gemv_bf16_avx512.c: AVX-512. One zmm holds lanes 0-15 (see gemv_bf16.h). Eight rows run
 * together (eight independent FMA chains; each row keeps its own order): with eight row streams
 * in flight per core the DRAM-bound GEMV streams 12-15 % faster than with four (3072x3584 from
 * DRAM, 2 threads: 44-46 vs 39-40 GB/s median; a C harness over this file, CPU time).
 */
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl")
#include <immintrin.h>
#include "k3_lane_sums.h"
#include "gemv_bf16.h"

static __m512 load_bf16x16(const uint16_t *p, __mmask16 m) {
    __m256i raw = _mm256_maskz_loadu_epi16(m, p);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
}


/* Distance of the software prefetch, in rows: the hardware prefetcher alone leaves DRAM latency
   exposed on interleaved row streams (measured ~0.6 of the read ceiling without it). */
#define PREFETCH_ROWS 8

static void rows8(const uint16_t *w, size_t ld, const float *x, float *y, size_t cols) {
    __m512 a[8];
    for (int i = 0; i < 8; i++) a[i] = _mm512_setzero_ps();
    const uint16_t *ahead = w + (size_t)PREFETCH_ROWS * ld; /* prefetch never faults past the end */
    size_t k = 0;
    for (; k + 16 <= cols; k += 16) {
        if ((k & 31) == 0) /* one 64-byte line per row every 32 elements */
            for (int i = 0; i < 8; i++) _mm_prefetch((const char *)(ahead + i * ld + k), _MM_HINT_T0);
        __m512 xv = _mm512_loadu_ps(x + k);
        for (int i = 0; i < 8; i++) a[i] = _mm512_fmadd_ps(load_bf16x16(w + i * ld + k, 0xFFFF), xv, a[i]);
    }
    if (k < cols) {
        __mmask16 m = (__mmask16)((1u << (cols - k)) - 1);
        __m512 xv = _mm512_maskz_loadu_ps(m, x + k);
        for (int i = 0; i < 8; i++) a[i] = _mm512_mask3_fmadd_ps(load_bf16x16(w + i * ld + k, m), xv, a[i], m);
    }
    for (int i = 0; i < 8; i++) y[i] = k3_lanes16_sum_avx512(a[i]);
}

static void rows4(const uint16_t *w, size_t ld, const float *x, float *y, size_t cols) {
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    const uint16_t *ahead = w + (size_t)PREFETCH_ROWS * ld; /* prefetch never faults past the end */
    size_t k = 0;
    for (; k + 16 <= cols; k += 16) {
        if ((k & 31) == 0) { /* one 64-byte line per row every 32 elements */
            _mm_prefetch((const char *)(ahead + k), _MM_HINT_T0);
            _mm_prefetch((const char *)(ahead + ld + k), _MM_HINT_T0);
            _mm_prefetch((const char *)(ahead + 2 * ld + k), _MM_HINT_T0);
            _mm_prefetch((const char *)(ahead + 3 * ld + k), _MM_HINT_T0);
        }
        __m512 xv = _mm512_loadu_ps(x + k);
        a0 = _mm512_fmadd_ps(load_bf16x16(w + k, 0xFFFF), xv, a0);
        a1 = _mm512_fmadd_ps(load_bf16x16(w + ld + k, 0xFFFF), xv, a1);
        a2 = _mm512_fmadd_ps(load_bf16x16(w + 2 * ld + k, 0xFFFF), xv, a2);
        a3 = _mm512_fmadd_ps(load_bf16x16(w + 3 * ld + k, 0xFFFF), xv, a3);
    }
    if (k < cols) {
        __mmask16 m = (__mmask16)((1u << (cols - k)) - 1);
        __m512 xv = _mm512_maskz_loadu_ps(m, x + k);
        a0 = _mm512_mask3_fmadd_ps(load_bf16x16(w + k, m), xv, a0, m);
        a1 = _mm512_mask3_fmadd_ps(load_bf16x16(w + ld + k, m), xv, a1, m);
        a2 = _mm512_mask3_fmadd_ps(load_bf16x16(w + 2 * ld + k, m), xv, a2, m);
        a3 = _mm512_mask3_fmadd_ps(load_bf16x16(w + 3 * ld + k, m), xv, a3, m);
    }
    y[0] = k3_lanes16_sum_avx512(a0);
    y[1] = k3_lanes16_sum_avx512(a1);
    y[2] = k3_lanes16_sum_avx512(a2);
    y[3] = k3_lanes16_sum_avx512(a3);
}

static float row1(const uint16_t *w, const float *x, size_t cols) {
    __m512 acc = _mm512_setzero_ps();
    size_t k = 0;
    for (; k + 16 <= cols; k += 16)
        acc = _mm512_fmadd_ps(load_bf16x16(w + k, 0xFFFF), _mm512_loadu_ps(x + k), acc);
    if (k < cols) {
        __mmask16 m = (__mmask16)((1u << (cols - k)) - 1);
        acc = _mm512_mask3_fmadd_ps(load_bf16x16(w + k, m), _mm512_maskz_loadu_ps(m, x + k), acc, m);
    }
    return k3_lanes16_sum_avx512(acc);
}

void k3_gemv_bf16_rows_avx512(const uint16_t *w, size_t ld, const float *x, float *y,
                              size_t row_begin, size_t row_end, size_t cols) {
    size_t r = row_begin;
    for (; r + 8 <= row_end; r += 8) rows8(w + r * ld, ld, x, y + r, cols);
    for (; r + 4 <= row_end; r += 4) rows4(w + r * ld, ld, x, y + r, cols);
    for (; r < row_end; r++) y[r] = row1(w + r * ld, x, cols);
}
