/*
 * gemv_bf16_avx2.c: AVX2 + FMA. Eight rows run together, each row's sixteen lanes (see
 * gemv_bf16.h) held in two ymm accumulators: `even` carries lanes 0, 2, ..., 14 and `odd` lanes
 * 1, 3, ..., 15. That split is what one 32-byte load of 16 bf16 gives for free: dword d holds
 * elements 2d (low word) and 2d + 1 (high word), so `v << 16` is the f32 of the even elements and
 * `v & 0xffff0000` that of the odd ones, two cheap ALU ops instead of two vpmovzxwd + two shifts.
 * The activations are split the same way once per 16 columns per tile (shared by the eight rows).
 * Every lane still takes its elements in k order with one FMA each, so the bits are the scalar
 * reference's; before the tree the lanes are put back in order (finish_row).
 *
 * Why eight rows: a row alone has two FMA chains (lanes 0-7 and 8-15 are one chain each in this
 * order), 4-cycle FMA latency, so one row cannot go faster than 32 bytes per 4 cycles, under the
 * memory system's rate on one core. Eight rows give sixteen chains, and eight DRAM streams per core,
 * which this VM reads faster than one (a read of 4 interleaved streams ran 1.24x a single sequential
 * stream, 2026-12-02 10:25 UTC). C harness over these loops, DRAM-streamed (>= 1 GiB of copies,
 * huge pages, best of 3, read ceiling of 4 streams per thread in the same hold), 10:22-10:27 UTC:
 * 1 thread 7168x7168 26.2 GB/s (4 rows) vs 17.0 for the one-row loop this replaces, 12288x7168 27.5
 * (8 rows) / 26.9 (6) / 25.3 (4) vs 16.9; 2 threads 12288x7168 37.5 / 37.3 / 35.9 vs 30.2.
 * A row-interleaved repacked layout (one sequential stream per thread, same chains) ran BELOW the
 * row-major tiles: 7168x7168, 2 threads, 42.2 vs 50.1 GB/s (README).
 */
#pragma GCC target("avx2,fma")
#include <immintrin.h>
#include "k3_lane_sums.h"
#include "gemv_bf16.h"

/* ---------------------------------------------------------------- loads */

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

/* ---------------------------------------------------------------- even / odd lanes */

/* 16 f32 at p -> the even elements (0, 2, ..., 14) in *xe and the odd ones in *xo, in order. */
static inline __attribute__((always_inline)) void split_x16(const float *p, __m256 *xe, __m256 *xo) {
    __m256 a = _mm256_loadu_ps(p), b = _mm256_loadu_ps(p + 8);
    /* shuffle_ps picks within 128-bit halves: [a0 a2 b0 b2 | a4 a6 b4 b6]; the qword permute
       (0, 2, 1, 3) makes it [a0 a2 a4 a6 b0 b2 b4 b6] */
    *xe = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0x88)), 0xD8));
    *xo = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0xDD)), 0xD8));
}

/* even[d] = lane 2d, odd[d] = lane 2d + 1  ->  lanes 0-7 in *lo, 8-15 in *hi */
static inline void lanes_in_order(__m256 even, __m256 odd, __m256 *lo, __m256 *hi) {
    __m256 ul = _mm256_unpacklo_ps(even, odd), uh = _mm256_unpackhi_ps(even, odd); /* [0-3 | 8-11], [4-7 | 12-15] */
    *lo = _mm256_permute2f128_ps(ul, uh, 0x20);
    *hi = _mm256_permute2f128_ps(ul, uh, 0x31);
}

/* The columns after the last whole 16 (rest = cols % 16, 0..15), then the tree. */
static float finish_row(__m256 even, __m256 odd, const uint16_t *w, const float *x, size_t k, size_t rest) {
    __m256 lo, hi;
    lanes_in_order(even, odd, &lo, &hi);
    if (rest > 8) {
        lo = _mm256_fmadd_ps(load_bf16x8(w + k), _mm256_loadu_ps(x + k), lo);
        hi = fma_partial(w + k + 8, x + k + 8, rest - 8, hi);
    } else if (rest > 0) {
        lo = fma_partial(w + k, x + k, rest, lo);
    }
    return k3_lanes16_sum_avx2(lo, hi);
}

/* ---------------------------------------------------------------- tiles */

/* `rows` (8, 4, 2 or 1, a constant after inlining) rows from w (stride ld) into y[0], y[ys], ... */
static inline __attribute__((always_inline)) void rows_tile(const uint16_t *w, size_t ld, const float *x,
                                                            float *y, size_t ys, size_t cols, const int rows) {
    const __m256i high_words = _mm256_set1_epi32((int)0xFFFF0000u);
    __m256 even[8], odd[8];
    for (int i = 0; i < rows; i++) even[i] = odd[i] = _mm256_setzero_ps();
    size_t k = 0;
    for (; k + 16 <= cols; k += 16) {
        __m256 xe, xo;
        split_x16(x + k, &xe, &xo);
        for (int i = 0; i < rows; i++) {
            __m256i v = _mm256_loadu_si256((const __m256i *)(w + i * ld + k));
            even[i] = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_slli_epi32(v, 16)), xe, even[i]);
            odd[i] = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_and_si256(v, high_words)), xo, odd[i]);
        }
    }
    for (int i = 0; i < rows; i++) y[i * ys] = finish_row(even[i], odd[i], w + i * ld, x, k, cols - k);
}

static void rows8(const uint16_t *w, size_t ld, const float *x, float *y, size_t ys, size_t cols) { rows_tile(w, ld, x, y, ys, cols, 8); }
static void rows4(const uint16_t *w, size_t ld, const float *x, float *y, size_t cols) { rows_tile(w, ld, x, y, 1, cols, 4); }
static void rows2(const uint16_t *w, size_t ld, const float *x, float *y, size_t cols) { rows_tile(w, ld, x, y, 1, cols, 2); }
static void rows1(const uint16_t *w, size_t ld, const float *x, float *y, size_t cols) { rows_tile(w, ld, x, y, 1, cols, 1); }

/* Spread tiles, for rows of less than SPREAD_MAX_ROW_BYTES: the task's rows go in blocks of 8 x d
   rows, and tile j of a block takes its rows j, j + d, ..., j + 7d, so a tile's eight DRAM streams are
   d rows apart instead of neighbours a few KB apart; d = (rows left) / 8, at most SPREAD_MAX_BYTES
   of rows. kernels.bench (JS arrays, 4 KiB pages) at 11:22 UTC, uncapped d: 3072x3584 / 3584x3072 on
   1 thread 0.98 / 1.00 of the read ceiling (0.84 / 0.82 with neighbour rows at 10:48), 12288x7168 0.94
   -> 1.01; but 33792x7168 fell 0.97 -> 0.82 (d = 1056 rows, 15 MB) at 11:35, and 7168x33792 (66 KB
   rows) 28.0 -> 21.2 GB/s. Harness on 4 KiB pages, 1 thread, 11:39 UTC, neighbour rows / uncapped /
   d <= 64 / d <= 256 rows: 33792x7168 20.8 / 20.5 / 22.3 / 22.7 GB/s, 3072x3584 21.0 / 26.7 / 25.5 /
   26.7 (d = 96 there). */
#define SPREAD_MAX_ROW_BYTES (16 * 1024)
#define SPREAD_MAX_BYTES ((size_t)4 << 20)

void k3_gemv_bf16_rows_avx2(const uint16_t *w, size_t ld, const float *x, float *y,
                            size_t row_begin, size_t row_end, size_t cols) {
    const size_t row_bytes = ld * sizeof(uint16_t);
    size_t r = row_begin;
    if (row_bytes > 0 && row_bytes < SPREAD_MAX_ROW_BYTES) {
        const size_t d_max = SPREAD_MAX_BYTES / row_bytes;
        while (row_end - r >= 16) {
            size_t d = (row_end - r) / 8;
            if (d > d_max) d = d_max;
            for (size_t j = 0; j < d; j++) rows8(w + (r + j) * ld, ld * d, x, y + r + j, d, cols);
            r += 8 * d;
        }
    }
    for (; r + 8 <= row_end; r += 8) rows8(w + r * ld, ld, x, y + r, 1, cols);
    for (; r + 4 <= row_end; r += 4) rows4(w + r * ld, ld, x, y + r, cols);
    for (; r + 2 <= row_end; r += 2) rows2(w + r * ld, ld, x, y + r, cols);
    for (; r < row_end; r++) rows1(w + r * ld, ld, x, y + r, cols);
}
