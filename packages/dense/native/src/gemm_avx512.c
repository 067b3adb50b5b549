/*
 * gemm_avx512.c: AVX-512 gemm/gemv. One zmm holds lanes 0-15 of one (row, batch) dot product
 * (see gemm.h). The main tile is 4 rows x 4 batch rows: 16 independent FMA chains, each weight
 * vector converted once and used 4 times, each activation vector loaded once and used 4 times.
 */
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl")
#include <immintrin.h>
#include "k3_lane_sums.h"
#include "gemm.h"

#define PREFETCH_TILES 2

/* ---------------------------------------------------------------- loads */

static inline __attribute__((always_inline)) __m512 load_w(const void *w, size_t k, __mmask16 m, int bf16) {
    if (bf16) {
        __m256i raw = _mm256_maskz_loadu_epi16(m, (const uint16_t *)w + k);
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
    }
    return _mm512_maskz_loadu_ps(m, (const float *)w + k);
}

static inline const void *row_ptr(const void *w, size_t r, size_t ld, int bf16) {
    return bf16 ? (const void *)((const uint16_t *)w + r * ld) : (const void *)((const float *)w + r * ld);
}


/* ---------------------------------------------------------------- tiles */

/* 4 rows x 4 batch rows. out[i][j] goes to y[j * ys + i]. */
static inline __attribute__((always_inline)) void tile4x4(const void *w0, const void *w1, const void *w2,
                                                          const void *w3, const float *x, size_t xs, float *y,
                                                          size_t ys, size_t cols, int bf16) {
    __m512 a00 = _mm512_setzero_ps(), a01 = a00, a02 = a00, a03 = a00;
    __m512 a10 = a00, a11 = a00, a12 = a00, a13 = a00;
    __m512 a20 = a00, a21 = a00, a22 = a00, a23 = a00;
    __m512 a30 = a00, a31 = a00, a32 = a00, a33 = a00;
    const float *x0 = x, *x1 = x + xs, *x2 = x + 2 * xs, *x3 = x + 3 * xs;
    size_t k = 0;
    for (; k + 16 <= cols; k += 16) {
        __m512 v0 = load_w(w0, k, 0xFFFF, bf16), v1 = load_w(w1, k, 0xFFFF, bf16);
        __m512 v2 = load_w(w2, k, 0xFFFF, bf16), v3 = load_w(w3, k, 0xFFFF, bf16);
        __m512 xv = _mm512_loadu_ps(x0 + k);
        a00 = _mm512_fmadd_ps(v0, xv, a00); a10 = _mm512_fmadd_ps(v1, xv, a10);
        a20 = _mm512_fmadd_ps(v2, xv, a20); a30 = _mm512_fmadd_ps(v3, xv, a30);
        xv = _mm512_loadu_ps(x1 + k);
        a01 = _mm512_fmadd_ps(v0, xv, a01); a11 = _mm512_fmadd_ps(v1, xv, a11);
        a21 = _mm512_fmadd_ps(v2, xv, a21); a31 = _mm512_fmadd_ps(v3, xv, a31);
        xv = _mm512_loadu_ps(x2 + k);
        a02 = _mm512_fmadd_ps(v0, xv, a02); a12 = _mm512_fmadd_ps(v1, xv, a12);
        a22 = _mm512_fmadd_ps(v2, xv, a22); a32 = _mm512_fmadd_ps(v3, xv, a32);
        xv = _mm512_loadu_ps(x3 + k);
        a03 = _mm512_fmadd_ps(v0, xv, a03); a13 = _mm512_fmadd_ps(v1, xv, a13);
        a23 = _mm512_fmadd_ps(v2, xv, a23); a33 = _mm512_fmadd_ps(v3, xv, a33);
    }
    if (k < cols) {
        __mmask16 m = (__mmask16)((1u << (cols - k)) - 1);
        __m512 v0 = load_w(w0, k, m, bf16), v1 = load_w(w1, k, m, bf16);
        __m512 v2 = load_w(w2, k, m, bf16), v3 = load_w(w3, k, m, bf16);
        __m512 xv = _mm512_maskz_loadu_ps(m, x0 + k);
        a00 = _mm512_mask3_fmadd_ps(v0, xv, a00, m); a10 = _mm512_mask3_fmadd_ps(v1, xv, a10, m);
        a20 = _mm512_mask3_fmadd_ps(v2, xv, a20, m); a30 = _mm512_mask3_fmadd_ps(v3, xv, a30, m);
        xv = _mm512_maskz_loadu_ps(m, x1 + k);
        a01 = _mm512_mask3_fmadd_ps(v0, xv, a01, m); a11 = _mm512_mask3_fmadd_ps(v1, xv, a11, m);
        a21 = _mm512_mask3_fmadd_ps(v2, xv, a21, m); a31 = _mm512_mask3_fmadd_ps(v3, xv, a31, m);
        xv = _mm512_maskz_loadu_ps(m, x2 + k);
        a02 = _mm512_mask3_fmadd_ps(v0, xv, a02, m); a12 = _mm512_mask3_fmadd_ps(v1, xv, a12, m);
        a22 = _mm512_mask3_fmadd_ps(v2, xv, a22, m); a32 = _mm512_mask3_fmadd_ps(v3, xv, a32, m);
        xv = _mm512_maskz_loadu_ps(m, x3 + k);
        a03 = _mm512_mask3_fmadd_ps(v0, xv, a03, m); a13 = _mm512_mask3_fmadd_ps(v1, xv, a13, m);
        a23 = _mm512_mask3_fmadd_ps(v2, xv, a23, m); a33 = _mm512_mask3_fmadd_ps(v3, xv, a33, m);
    }
    y[0] = k3_lanes16_sum_avx512(a00); y[1] = k3_lanes16_sum_avx512(a10); y[2] = k3_lanes16_sum_avx512(a20); y[3] = k3_lanes16_sum_avx512(a30);
    y += ys;
    y[0] = k3_lanes16_sum_avx512(a01); y[1] = k3_lanes16_sum_avx512(a11); y[2] = k3_lanes16_sum_avx512(a21); y[3] = k3_lanes16_sum_avx512(a31);
    y += ys;
    y[0] = k3_lanes16_sum_avx512(a02); y[1] = k3_lanes16_sum_avx512(a12); y[2] = k3_lanes16_sum_avx512(a22); y[3] = k3_lanes16_sum_avx512(a32);
    y += ys;
    y[0] = k3_lanes16_sum_avx512(a03); y[1] = k3_lanes16_sum_avx512(a13); y[2] = k3_lanes16_sum_avx512(a23); y[3] = k3_lanes16_sum_avx512(a33);
}

/* 4 rows x 1 batch row (gemv, and the batch remainder). */
static inline __attribute__((always_inline)) void tile4x1(const void *w0, const void *w1, const void *w2,
                                                          const void *w3, const float *x, float *y,
                                                          size_t cols, int bf16) {
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    /* Software prefetch of the tile PREFETCH_TILES ahead (rows w0..w3 are 4 consecutive rows of
       stride w1 - w0; prefetch never faults past the end): the hardware prefetcher alone leaves DRAM
       latency exposed on four interleaved row streams. One line per row per 64 bytes. */
    const char *ahead = (const char *)w0 + PREFETCH_TILES * 4 * ((const char *)w1 - (const char *)w0);
    const size_t row_bytes = (size_t)((const char *)w1 - (const char *)w0), elem = bf16 ? 2 : 4;
    size_t k = 0;
    for (; k + 16 <= cols; k += 16) {
        if ((k * elem) % 64 == 0)
            for (int i = 0; i < 4; i++) _mm_prefetch(ahead + i * row_bytes + k * elem, _MM_HINT_T0);
        __m512 xv = _mm512_loadu_ps(x + k);
        a0 = _mm512_fmadd_ps(load_w(w0, k, 0xFFFF, bf16), xv, a0);
        a1 = _mm512_fmadd_ps(load_w(w1, k, 0xFFFF, bf16), xv, a1);
        a2 = _mm512_fmadd_ps(load_w(w2, k, 0xFFFF, bf16), xv, a2);
        a3 = _mm512_fmadd_ps(load_w(w3, k, 0xFFFF, bf16), xv, a3);
    }
    if (k < cols) {
        __mmask16 m = (__mmask16)((1u << (cols - k)) - 1);
        __m512 xv = _mm512_maskz_loadu_ps(m, x + k);
        a0 = _mm512_mask3_fmadd_ps(load_w(w0, k, m, bf16), xv, a0, m);
        a1 = _mm512_mask3_fmadd_ps(load_w(w1, k, m, bf16), xv, a1, m);
        a2 = _mm512_mask3_fmadd_ps(load_w(w2, k, m, bf16), xv, a2, m);
        a3 = _mm512_mask3_fmadd_ps(load_w(w3, k, m, bf16), xv, a3, m);
    }
    y[0] = k3_lanes16_sum_avx512(a0);
    y[1] = k3_lanes16_sum_avx512(a1);
    y[2] = k3_lanes16_sum_avx512(a2);
    y[3] = k3_lanes16_sum_avx512(a3);
}

static inline __attribute__((always_inline)) float tile1x1(const void *w0, const float *x, size_t cols, int bf16) {
    __m512 acc = _mm512_setzero_ps();
    size_t k = 0;
    for (; k + 16 <= cols; k += 16) acc = _mm512_fmadd_ps(load_w(w0, k, 0xFFFF, bf16), _mm512_loadu_ps(x + k), acc);
    if (k < cols) {
        __mmask16 m = (__mmask16)((1u << (cols - k)) - 1);
        acc = _mm512_mask3_fmadd_ps(load_w(w0, k, m, bf16), _mm512_maskz_loadu_ps(m, x + k), acc, m);
    }
    return k3_lanes16_sum_avx512(acc);
}

/* ---------------------------------------------------------------- row ranges */

static inline __attribute__((always_inline)) void rows_range(const void *w, size_t ld, const float *x, size_t ldx,
                                                             float *y, size_t ldy, size_t cols, size_t batch,
                                                             size_t row_begin, size_t row_end, int bf16) {
    size_t r = row_begin;
    for (; r + 4 <= row_end; r += 4) {
        const void *w0 = row_ptr(w, r, ld, bf16), *w1 = row_ptr(w, r + 1, ld, bf16);
        const void *w2 = row_ptr(w, r + 2, ld, bf16), *w3 = row_ptr(w, r + 3, ld, bf16);
        size_t b = 0;
        for (; b + 4 <= batch; b += 4) tile4x4(w0, w1, w2, w3, x + b * ldx, ldx, y + b * ldy + r, ldy, cols, bf16);
        for (; b < batch; b++) tile4x1(w0, w1, w2, w3, x + b * ldx, y + b * ldy + r, cols, bf16);
    }
    for (; r < row_end; r++)
        for (size_t b = 0; b < batch; b++) y[b * ldy + r] = tile1x1(row_ptr(w, r, ld, bf16), x + b * ldx, cols, bf16);
}

void k3_gemm_bf16_rows_avx512(const void *w, size_t ld, const float *x, size_t ldx, float *y, size_t ldy,
                              size_t cols, size_t batch, size_t row_begin, size_t row_end) {
    rows_range(w, ld, x, ldx, y, ldy, cols, batch, row_begin, row_end, 1);
}

void k3_gemm_f32_rows_avx512(const void *w, size_t ld, const float *x, size_t ldx, float *y, size_t ldy,
                             size_t cols, size_t batch, size_t row_begin, size_t row_end) {
    rows_range(w, ld, x, ldx, y, ldy, cols, batch, row_begin, row_end, 0);
}
