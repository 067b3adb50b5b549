/* gemv_bf16_avx2.c: AVX2 + FMA. Lanes 0-7 live in `lo`, lanes 8-15 in `hi` (see gemv_bf16.h). */
#pragma GCC target("avx2,fma")
#include <immintrin.h>
#include "k3_lane_sums.h"
#include "gemv_bf16.h"

static __m256 load_bf16x8(const uint16_t *p) {
    __m128i raw = _mm_loadu_si128((const __m128i *)p);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(raw), 16));
}

static __m256 load_bf16x8_partial(const uint16_t *p, size_t n) {
    uint16_t buf[8] = {0};
    for (size_t i = 0; i < n; i++) buf[i] = p[i];
    return load_bf16x8(buf);
}

static __m256 load_f32x8_partial(const float *p, size_t n) {
    float buf[8] = {0};
    for (size_t i = 0; i < n; i++) buf[i] = p[i];
    return _mm256_loadu_ps(buf);
}

static __m256 tail_mask(size_t n) {
    const int32_t ones[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
    return _mm256_castsi256_ps(_mm256_loadu_si256((const __m256i *)(ones + 8 - n)));
}


/* Accumulates 8 lanes starting at k, with only `n` valid (1..8); other lanes stay untouched. */
static __m256 fma_partial(const uint16_t *w, const float *x, size_t n, __m256 acc) {
    __m256 prod_sum = _mm256_fmadd_ps(load_bf16x8_partial(w, n), load_f32x8_partial(x, n), acc);
    return _mm256_blendv_ps(acc, prod_sum, tail_mask(n));
}

static float row_dot(const uint16_t *w, const float *x, size_t cols) {
    __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
    size_t k = 0;
    for (; k + 16 <= cols; k += 16) {
        lo = _mm256_fmadd_ps(load_bf16x8(w + k), _mm256_loadu_ps(x + k), lo);
        hi = _mm256_fmadd_ps(load_bf16x8(w + k + 8), _mm256_loadu_ps(x + k + 8), hi);
    }
    size_t rest = cols - k;
    if (rest > 8) {
        lo = _mm256_fmadd_ps(load_bf16x8(w + k), _mm256_loadu_ps(x + k), lo);
        hi = fma_partial(w + k + 8, x + k + 8, rest - 8, hi);
    } else if (rest > 0) {
        lo = fma_partial(w + k, x + k, rest, lo);
    }
    return k3_lanes16_sum_avx2(lo, hi);
}

void k3_gemv_bf16_rows_avx2(const uint16_t *w, size_t ld, const float *x, float *y,
                            size_t row_begin, size_t row_end, size_t cols) {
    for (size_t r = row_begin; r < row_end; r++) y[r] = row_dot(w + r * ld, x, cols);
}
