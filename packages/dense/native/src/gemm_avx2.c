/*
 * gemm_avx2.c: AVX2 + FMA gemm/gemv. Lanes 0-7 of a dot product live in one ymm (`lo`), lanes
 * 8-15 in another (`hi`), so the 16-lane order of gemm.h holds. Tiles: 2 rows x 2 batch rows, and
 * 4 rows x 1 batch row for a batch row left alone (gemv, dot rows of one query): 8 accumulators
 * each. Tails load through a zero-padded buffer and blend, so lanes past `cols` keep their value
 * exactly (no 0*x that could turn -0 into +0 or inf into NaN).
 */
#pragma GCC target("avx2,fma")
#include <immintrin.h>
#include <string.h>
#include "gemm.h"

/* ---------------------------------------------------------------- loads */

static inline __attribute__((always_inline)) __m256 load_w8(const void *w, size_t k, int bf16) {
    if (bf16) {
        __m128i raw = _mm_loadu_si128((const __m128i *)((const uint16_t *)w + k));
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(raw), 16));
    }
    return _mm256_loadu_ps((const float *)w + k);
}

static inline const void *row_ptr(const void *w, size_t r, size_t ld, int bf16) {
    return bf16 ? (const void *)((const uint16_t *)w + r * ld) : (const void *)((const float *)w + r * ld);
}

/* The last (cols - k) < 16 weights as f32, zero padded to 16. */
static void tail_w16(const void *w, size_t k, size_t n, int bf16, float out[16]) {
    memset(out, 0, 16 * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        if (bf16) {
            uint32_t wide = (uint32_t)((const uint16_t *)w)[k + i] << 16;
            memcpy(&out[i], &wide, sizeof wide);
        } else {
            out[i] = ((const float *)w)[k + i];
        }
    }
}

static void tail_x16(const float *x, size_t k, size_t n, float out[16]) {
    memset(out, 0, 16 * sizeof(float));
    memcpy(out, x + k, n * sizeof(float));
}

/* All-ones in lanes [0, n) of a 16-lane mask split as lo (0-7) / hi (8-15). */
static void tail_masks(size_t n, __m256 *lo, __m256 *hi) {
    int32_t bits[16];
    for (int i = 0; i < 16; i++) bits[i] = (size_t)i < n ? -1 : 0;
    *lo = _mm256_castsi256_ps(_mm256_loadu_si256((const __m256i *)bits));
    *hi = _mm256_castsi256_ps(_mm256_loadu_si256((const __m256i *)(bits + 8)));
}

static inline __m256 fma_masked(__m256 w, __m256 x, __m256 acc, __m256 mask) {
    return _mm256_blendv_ps(acc, _mm256_fmadd_ps(w, x, acc), mask);
}

/* lane[i] += lane[i+h] for h = 8, 4, 2, 1, exactly as the scalar reference. */
static float reduce16(__m256 lo, __m256 hi) {
    __m256 s8 = _mm256_add_ps(lo, hi);
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    __m128 s1 = _mm_add_ss(s2, _mm_movehdup_ps(s2));
    return _mm_cvtss_f32(s1);
}

/* ---------------------------------------------------------------- tiles */

/* 2 rows x 2 batch rows; out[i][j] goes to y[j * ys + i]. */
static inline __attribute__((always_inline)) void tile2x2(const void *w0, const void *w1, const float *x0,
                                                          const float *x1, float *y, size_t ys, size_t cols,
                                                          int bf16) {
    __m256 l00 = _mm256_setzero_ps(), h00 = l00, l01 = l00, h01 = l00;
    __m256 l10 = l00, h10 = l00, l11 = l00, h11 = l00;
    size_t k = 0;
    for (; k + 16 <= cols; k += 16) {
        __m256 v0l = load_w8(w0, k, bf16), v0h = load_w8(w0, k + 8, bf16);
        __m256 v1l = load_w8(w1, k, bf16), v1h = load_w8(w1, k + 8, bf16);
        __m256 xl = _mm256_loadu_ps(x0 + k), xh = _mm256_loadu_ps(x0 + k + 8);
        l00 = _mm256_fmadd_ps(v0l, xl, l00); h00 = _mm256_fmadd_ps(v0h, xh, h00);
        l10 = _mm256_fmadd_ps(v1l, xl, l10); h10 = _mm256_fmadd_ps(v1h, xh, h10);
        xl = _mm256_loadu_ps(x1 + k); xh = _mm256_loadu_ps(x1 + k + 8);
        l01 = _mm256_fmadd_ps(v0l, xl, l01); h01 = _mm256_fmadd_ps(v0h, xh, h01);
        l11 = _mm256_fmadd_ps(v1l, xl, l11); h11 = _mm256_fmadd_ps(v1h, xh, h11);
    }
    if (k < cols) {
        size_t n = cols - k;
        float wb0[16], wb1[16], xb[16];
        __m256 ml, mh;
        tail_masks(n, &ml, &mh);
        tail_w16(w0, k, n, bf16, wb0);
        tail_w16(w1, k, n, bf16, wb1);
        __m256 v0l = _mm256_loadu_ps(wb0), v0h = _mm256_loadu_ps(wb0 + 8);
        __m256 v1l = _mm256_loadu_ps(wb1), v1h = _mm256_loadu_ps(wb1 + 8);
        tail_x16(x0, k, n, xb);
        __m256 xl = _mm256_loadu_ps(xb), xh = _mm256_loadu_ps(xb + 8);
        l00 = fma_masked(v0l, xl, l00, ml); h00 = fma_masked(v0h, xh, h00, mh);
        l10 = fma_masked(v1l, xl, l10, ml); h10 = fma_masked(v1h, xh, h10, mh);
        tail_x16(x1, k, n, xb);
        xl = _mm256_loadu_ps(xb); xh = _mm256_loadu_ps(xb + 8);
        l01 = fma_masked(v0l, xl, l01, ml); h01 = fma_masked(v0h, xh, h01, mh);
        l11 = fma_masked(v1l, xl, l11, ml); h11 = fma_masked(v1h, xh, h11, mh);
    }
    y[0] = reduce16(l00, h00);
    y[1] = reduce16(l10, h10);
    y[ys] = reduce16(l01, h01);
    y[ys + 1] = reduce16(l11, h11);
}

/* 4 rows x 1 batch row (gemv, and the batch remainder): 8 accumulators, enough independent FMA
   chains to cover the FMA latency when there is one activation row. out[i] goes to y[i]. */
static inline __attribute__((always_inline)) void tile4x1(const void *const w[4], const float *x, float *y, size_t cols,
                                                          int bf16) {
    __m256 lo[4], hi[4];
    for (int i = 0; i < 4; i++) lo[i] = hi[i] = _mm256_setzero_ps();
    size_t k = 0;
    for (; k + 16 <= cols; k += 16) {
        __m256 xl = _mm256_loadu_ps(x + k), xh = _mm256_loadu_ps(x + k + 8);
        for (int i = 0; i < 4; i++) {
            lo[i] = _mm256_fmadd_ps(load_w8(w[i], k, bf16), xl, lo[i]);
            hi[i] = _mm256_fmadd_ps(load_w8(w[i], k + 8, bf16), xh, hi[i]);
        }
    }
    if (k < cols) {
        size_t n = cols - k;
        float wb[16], xb[16];
        __m256 ml, mh;
        tail_masks(n, &ml, &mh);
        tail_x16(x, k, n, xb);
        __m256 xl = _mm256_loadu_ps(xb), xh = _mm256_loadu_ps(xb + 8);
        for (int i = 0; i < 4; i++) {
            tail_w16(w[i], k, n, bf16, wb);
            lo[i] = fma_masked(_mm256_loadu_ps(wb), xl, lo[i], ml);
            hi[i] = fma_masked(_mm256_loadu_ps(wb + 8), xh, hi[i], mh);
        }
    }
    for (int i = 0; i < 4; i++) y[i] = reduce16(lo[i], hi[i]);
}

static inline __attribute__((always_inline)) float tile1x1(const void *w0, const float *x, size_t cols, int bf16) {
    __m256 lo = _mm256_setzero_ps(), hi = lo;
    size_t k = 0;
    for (; k + 16 <= cols; k += 16) {
        lo = _mm256_fmadd_ps(load_w8(w0, k, bf16), _mm256_loadu_ps(x + k), lo);
        hi = _mm256_fmadd_ps(load_w8(w0, k + 8, bf16), _mm256_loadu_ps(x + k + 8), hi);
    }
    if (k < cols) {
        size_t n = cols - k;
        float wb[16], xb[16];
        __m256 ml, mh;
        tail_masks(n, &ml, &mh);
        tail_w16(w0, k, n, bf16, wb);
        tail_x16(x, k, n, xb);
        lo = fma_masked(_mm256_loadu_ps(wb), _mm256_loadu_ps(xb), lo, ml);
        hi = fma_masked(_mm256_loadu_ps(wb + 8), _mm256_loadu_ps(xb + 8), hi, mh);
    }
    return reduce16(lo, hi);
}

/* ---------------------------------------------------------------- row ranges */

/* Blocks of 4 rows: pairs of batch rows run as two 2x2 tiles, a last single batch row as 4x1. */
static inline __attribute__((always_inline)) void rows_range(const void *w, size_t ld, const float *x, size_t ldx,
                                                             float *y, size_t ldy, size_t cols, size_t batch,
                                                             size_t row_begin, size_t row_end, int bf16) {
    size_t r = row_begin;
    for (; r + 4 <= row_end; r += 4) {
        const void *w4[4] = {row_ptr(w, r, ld, bf16), row_ptr(w, r + 1, ld, bf16), row_ptr(w, r + 2, ld, bf16),
                             row_ptr(w, r + 3, ld, bf16)};
        size_t b = 0;
        for (; b + 2 <= batch; b += 2) {
            tile2x2(w4[0], w4[1], x + b * ldx, x + (b + 1) * ldx, y + b * ldy + r, ldy, cols, bf16);
            tile2x2(w4[2], w4[3], x + b * ldx, x + (b + 1) * ldx, y + b * ldy + r + 2, ldy, cols, bf16);
        }
        if (b < batch) tile4x1(w4, x + b * ldx, y + b * ldy + r, cols, bf16);
    }
    for (; r + 2 <= row_end; r += 2) {
        const void *w0 = row_ptr(w, r, ld, bf16), *w1 = row_ptr(w, r + 1, ld, bf16);
        size_t b = 0;
        for (; b + 2 <= batch; b += 2) tile2x2(w0, w1, x + b * ldx, x + (b + 1) * ldx, y + b * ldy + r, ldy, cols, bf16);
        if (b < batch) {
            y[b * ldy + r] = tile1x1(w0, x + b * ldx, cols, bf16);
            y[b * ldy + r + 1] = tile1x1(w1, x + b * ldx, cols, bf16);
        }
    }
    for (; r < row_end; r++)
        for (size_t b = 0; b < batch; b++) y[b * ldy + r] = tile1x1(row_ptr(w, r, ld, bf16), x + b * ldx, cols, bf16);
}

void k3_gemm_bf16_rows_avx2(const void *w, size_t ld, const float *x, size_t ldx, float *y, size_t ldy,
                            size_t cols, size_t batch, size_t row_begin, size_t row_end) {
    rows_range(w, ld, x, ldx, y, ldy, cols, batch, row_begin, row_end, 1);
}

void k3_gemm_f32_rows_avx2(const void *w, size_t ld, const float *x, size_t ldx, float *y, size_t ldy,
                           size_t cols, size_t batch, size_t row_begin, size_t row_end) {
    rows_range(w, ld, x, ldx, y, ldy, cols, batch, row_begin, row_end, 0);
}
