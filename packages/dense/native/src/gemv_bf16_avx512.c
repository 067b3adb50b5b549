/*
 * gemv_bf16_avx512.c: AVX-512. One zmm holds lanes 0-15 (see gemv_bf16.h). Sixteen rows run
 * together (sixteen independent FMA chains; each row keeps its own order).
 *
 * Decode streams every weight byte from DRAM once, so the loop is judged by how far ahead of its
 * FMAs the core keeps loads in flight, and that is bounded by how many ops wait behind a miss:
 *   - one 64-byte load gives 32 bf16, widened to f32 by two vpermw (zero-masked word permutes:
 *     word j -> high half of dword j) instead of 2 x (vpmovzxwd + vpslld): 2 ops per 32
 *     elements instead of 4 (hot, in cache: 99 vs 69 GB/s per core);
 *   - a software prefetch a few hundred bytes ahead IN each row (one line per row per 64 bytes), not
 *     the next group: with K3's wide rows the group is 16 x 14-67 KB ahead and would fall out of
 *     L1/L2 before use; only near a row's end does it move to the next tile (see PREFETCH_AHEAD).
 */
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl")
#include <immintrin.h>
#include "k3_lane_sums.h"
#include "gemv_bf16.h"

static __m512 load_bf16x16(const uint16_t *p, __mmask16 m) {
    __m256i raw = _mm256_maskz_loadu_epi16(m, p);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
}

/* 32 bf16 at p -> f32 lanes 0-15 (elements 0-15) in *lo and lanes 0-15 (elements 16-31) in *hi. */
static inline void widen_bf16x32(__m512i v, __m512 *lo, __m512 *hi) {
    const __m512i lo_idx = _mm512_set_epi16(15, 0, 14, 0, 13, 0, 12, 0, 11, 0, 10, 0, 9, 0, 8, 0,
                                            7, 0, 6, 0, 5, 0, 4, 0, 3, 0, 2, 0, 1, 0, 0, 0);
    const __m512i hi_idx = _mm512_set_epi16(31, 0, 30, 0, 29, 0, 28, 0, 27, 0, 26, 0, 25, 0, 24, 0,
                                            23, 0, 22, 0, 21, 0, 20, 0, 19, 0, 18, 0, 17, 0, 16, 0);
    const __mmask32 odd_words = 0xAAAAAAAAu; /* the high half of every dword; the low half is 0 */
    *lo = _mm512_castsi512_ps(_mm512_maskz_permutexvar_epi16(odd_words, lo_idx, v));
    *hi = _mm512_castsi512_ps(_mm512_maskz_permutexvar_epi16(odd_words, hi_idx, v));
}

/* Software prefetch PREFETCH_AHEAD elements (384 B) ahead in each row; near a row's end it moves on
   to the head of the NEXT tile's row i (rows + i), so a tile starts with its rows already in flight
   instead of each row paying DRAM latency for its first lines (without the redirect the prefetch
   near the end lands in row i + 1, which this tile is reading anyway). C harness over this file,
   DRAM-streamed, one exclusive stretch, 2026-12-02: +5..15 % over the 1 KiB in-row prefetch on
   1 and 2 threads; 384-768 B beat 1-1.5 KiB once redirected; an extra L2 prefetch further
   ahead (T1, 4 KiB) lost 3 %. */
#define PREFETCH_AHEAD 192

/* Offset (from row i's start, in elements) of row i's prefetch at column k of a tile of `rows`. */
static inline size_t prefetch_offset(size_t k, size_t cols, size_t ld, int rows) {
    size_t kp = k + PREFETCH_AHEAD;
    return kp < cols ? kp : kp - cols + (size_t)rows * ld;
}

/* `rows` (16, 8 or 4, a constant after inlining) rows from w (stride ld) into y[0..rows): the
   k-loop in steps of 32, then one of 16, then the masked tail. 16 rows (16 independent FMA chains,
   16 row streams) beat 8 by 2-6 % and 4 or 2 rows lost 10-40 %: more streams in flight per core
   is what this loop needs, fewer streams did not help the hardware prefetcher. */
static inline __attribute__((always_inline)) void rows_tile(const uint16_t *w, size_t ld, const float *x,
                                                            float *y, size_t cols, const int rows) {
    __m512 a[16];
    for (int i = 0; i < rows; i++) a[i] = _mm512_setzero_ps();
    size_t k = 0;
    for (; k + 32 <= cols; k += 32) {
        size_t pf = prefetch_offset(k, cols, ld, rows);
        for (int i = 0; i < rows; i++) _mm_prefetch((const char *)(w + i * ld + pf), _MM_HINT_T0);
        __m512 x0 = _mm512_loadu_ps(x + k), x1 = _mm512_loadu_ps(x + k + 16);
        for (int i = 0; i < rows; i++) {
            __m512 lo, hi;
            widen_bf16x32(_mm512_loadu_si512(w + i * ld + k), &lo, &hi);
            a[i] = _mm512_fmadd_ps(lo, x0, a[i]);
            a[i] = _mm512_fmadd_ps(hi, x1, a[i]);
        }
    }
    for (; k + 16 <= cols; k += 16) {
        __m512 xv = _mm512_loadu_ps(x + k);
        for (int i = 0; i < rows; i++) a[i] = _mm512_fmadd_ps(load_bf16x16(w + i * ld + k, 0xFFFF), xv, a[i]);
    }
    if (k < cols) {
        __mmask16 m = (__mmask16)((1u << (cols - k)) - 1);
        __m512 xv = _mm512_maskz_loadu_ps(m, x + k);
        for (int i = 0; i < rows; i++) a[i] = _mm512_mask3_fmadd_ps(load_bf16x16(w + i * ld + k, m), xv, a[i], m);
    }
    for (int i = 0; i < rows; i++) y[i] = k3_lanes16_sum_avx512(a[i]);
}

static void rows16(const uint16_t *w, size_t ld, const float *x, float *y, size_t cols) { rows_tile(w, ld, x, y, cols, 16); }
static void rows8(const uint16_t *w, size_t ld, const float *x, float *y, size_t cols) { rows_tile(w, ld, x, y, cols, 8); }
static void rows4(const uint16_t *w, size_t ld, const float *x, float *y, size_t cols) { rows_tile(w, ld, x, y, cols, 4); }

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
    /* A row stride that is a multiple of 4 KiB puts every row's current line in the same L1 set
       (64 sets of 64 B): 16 streams then overflow its 12 ways (7168x12288: 16 rows 0.74 of the read
       ceiling, 8 rows 0.85 on 1 thread), so such matrices run 8-row tiles. */
    const int l1_aliased = (ld * sizeof(uint16_t)) % 4096 == 0;
    if (!l1_aliased)
        for (; r + 16 <= row_end; r += 16) rows16(w + r * ld, ld, x, y + r, cols);
    for (; r + 8 <= row_end; r += 8) rows8(w + r * ld, ld, x, y + r, cols);
    for (; r + 4 <= row_end; r += 4) rows4(w + r * ld, ld, x, y + r, cols);
    for (; r < row_end; r++) y[r] = row1(w + r * ld, x, cols);
}
