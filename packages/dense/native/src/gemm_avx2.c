/*
 * gemm_avx2.c: AVX2 + FMA gemm/gemv. Lanes 0-7 of a dot product live in one ymm (`lo`), lanes
 * 8-15 in another (`hi`), so the 16-lane order of gemm.h holds. The tile is 4 rows x 1 batch row:
 * 8 accumulators (enough FMA chains in flight), one activation vector pair per 4 rows, and the
 * 4-row weight block stays in L1 while every batch row passes over it. (A 2 rows x 2 batch rows
 * tile converts half as many bf16 weights but measured 1.2-1.3x slower for bf16 GEMM 3584 wide at
 * batch 8 and 32, and for MLA's 576-wide scores.) Tails load through a zero-padded buffer and
 * blend, so lanes past `cols` keep their value exactly (no 0*x that could turn -0 into +0 or inf
 * into NaN).
 */
#pragma GCC target("avx2,fma")
#include <immintrin.h>
#include "k3_lane_sums.h"
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


/* ---------------------------------------------------------------- tiles */

/* R rows (R <= 4) x 1 batch row: lanes of row i in lo[i] / hi[i]; out[i] goes to y[i]. */
static inline __attribute__((always_inline)) void tile_rows(const int R, const void *const w[4], const float *x,
                                                            float *y, size_t cols, int bf16) {
    __m256 lo[4], hi[4];
    for (int i = 0; i < R; i++) lo[i] = hi[i] = _mm256_setzero_ps();
    size_t k = 0;
    for (; k + 16 <= cols; k += 16) {
        __m256 xl = _mm256_loadu_ps(x + k), xh = _mm256_loadu_ps(x + k + 8);
        for (int i = 0; i < R; i++) {
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
        for (int i = 0; i < R; i++) {
            tail_w16(w[i], k, n, bf16, wb);
            lo[i] = fma_masked(_mm256_loadu_ps(wb), xl, lo[i], ml);
            hi[i] = fma_masked(_mm256_loadu_ps(wb + 8), xh, hi[i], mh);
        }
    }
    for (int i = 0; i < R; i++) y[i] = k3_lanes16_sum_avx2(lo[i], hi[i]);
}

/* ---------------------------------------------------------------- row ranges */

/* Blocks of 4 rows, every batch row against each block; the last 1-3 rows as one narrower block. */
static inline __attribute__((always_inline)) void rows_range(const void *w, size_t ld, const float *x, size_t ldx,
                                                             float *y, size_t ldy, size_t cols, size_t batch,
                                                             size_t row_begin, size_t row_end, int bf16) {
    size_t r = row_begin;
    for (; r + 4 <= row_end; r += 4) {
        const void *w4[4] = {row_ptr(w, r, ld, bf16), row_ptr(w, r + 1, ld, bf16), row_ptr(w, r + 2, ld, bf16),
                             row_ptr(w, r + 3, ld, bf16)};
        for (size_t b = 0; b < batch; b++) tile_rows(4, w4, x + b * ldx, y + b * ldy + r, cols, bf16);
    }
    size_t left = row_end - r;
    if (left == 0) return;
    const void *wl[4] = {row_ptr(w, r, ld, bf16), 0, 0, 0};
    for (size_t i = 1; i < left; i++) wl[i] = row_ptr(w, r + i, ld, bf16);
    for (size_t b = 0; b < batch; b++) {
        float *yb = y + b * ldy + r;
        if (left == 3) tile_rows(3, wl, x + b * ldx, yb, cols, bf16);
        else if (left == 2) tile_rows(2, wl, x + b * ldx, yb, cols, bf16);
        else tile_rows(1, wl, x + b * ldx, yb, cols, bf16);
    }
}

void k3_gemm_bf16_rows_avx2(const void *w, size_t ld, const float *x, size_t ldx, float *y, size_t ldy,
                            size_t cols, size_t batch, size_t row_begin, size_t row_end) {
    rows_range(w, ld, x, ldx, y, ldy, cols, batch, row_begin, row_end, 1);
}

void k3_gemm_f32_rows_avx2(const void *w, size_t ld, const float *x, size_t ldx, float *y, size_t ldy,
                           size_t cols, size_t batch, size_t row_begin, size_t row_end) {
    rows_range(w, ld, x, ldx, y, ldy, cols, batch, row_begin, row_end, 0);
}
