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
 *     L1/L2 before use; only near a row's end does it move to the next tile (see PREFETCH_AHEAD);
 *   - sixteen row streams (FMA chains) per core at every thread count. On the Zen 5 VM (harness over
 *     this file, DRAM-streamed, 2 MiB pages, best of 4, 2026-12-02 13:35 UTC, 2 threads) 16-row tiles
 *     read 53.2 / 47.2 / 53.9 / 44.4 GB/s against 46.0 / 44.2 / 45.4 / 42.7 for 8-row tiles
 *     (12288x7168, 3584x3072, 7168x12288 skewed, 65536x7168); on the earlier VM two threads had
 *     preferred 8 rows each (39.5-43.4 vs 37.4-40.4, 07:33 UTC), one thread 16 on both.
 */
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl")
#include <immintrin.h>
#include <stdlib.h>
#include <string.h>
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
   k-loop in steps of 32, then one of 16, then the masked tail. Rows per tile = row streams in flight
   per core: what this loop needs is about sixteen on the machine (file comment); 4 or 2 rows lost
   10-40 % (too few streams and FMA chains). */
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

/* Skewed, line-aligned tiles for row strides that are a multiple of 4 KiB. Such a stride puts every
   row's current line in the same L1 set (64 sets of 64 B), and 16 streams overflow its 12 ways. Here
   row i of the tile runs i chunks (64 B) behind row 0, so the tile's current lines sit in 16
   neighbouring sets. The chunks are the row's 64-byte lines (all rows start at the same offset o in
   a line when the stride is 4 KiB-aligned): chunk c holds elements 32c - o .. 32c - o + 31, so no load
   splits a line (with split loads the skew lost: 20-25 GB/s against 26-28 unskewed at o = 8). Chunk
   slot j then carries element k with k % 16 == (j - o) % 16 in both halves, so accumulator slot j
   keeps lane (j - o) % 16 throughout, each lane still takes its elements in k order (the same fmaf
   sequence, the same bits), and one permute puts the lanes back in place before the tree. The first
   and last chunks of a row are masked (elements outside 0 .. cols-1 neither loaded nor added).
   Harness over this file, 7168x12288, 1 thread, 64 B-aligned rows, 07:26-07:45 UTC: 32.6-33.3 GB/s
   against 27.8-29.8 for the 8-row tiles it replaces. On two threads the narrow 8-row tiles stay
   (43.7-44.7 vs 35.8-38.1 skewed), and unaliased strides lose with the skew (3072x3584: 29.5 vs 33.0). */
#define SKEW_MIN_COLS 1024

typedef struct {
    size_t cols, o, last; /* row length, line offset of the row start (elements), index of the last chunk */
} line_chunks;

/* Row i's prefetch while it is on chunk c: PREFETCH_AHEAD elements on, or past the row's end the
   next tile's row i (as prefetch_offset; chunk 0 starts o elements before the row, and
   PREFETCH_AHEAD > o keeps the offset non-negative). */
static inline size_t skew_prefetch_offset(const line_chunks *lc, size_t c, size_t ld) {
    size_t kp = 32 * c + PREFETCH_AHEAD - lc->o;
    return kp < lc->cols ? kp : kp - lc->cols + 16 * ld;
}

/* Chunk c of row i: the masked form (first and last chunks, any c). */
static inline __attribute__((always_inline)) void chunk_masked(const uint16_t *wr, const float *x, __m512 *a,
                                                               const line_chunks *lc, size_t c) {
    ptrdiff_t k0 = (ptrdiff_t)(32 * c) - (ptrdiff_t)lc->o; /* element in slot 0 of the low half */
    uint32_t m = 0;
    for (int j = 0; j < 32; j++) m |= (uint32_t)(k0 + j >= 0 && k0 + j < (ptrdiff_t)lc->cols) << j;
    __m512 lo, hi;
    widen_bf16x32(_mm512_maskz_loadu_epi16(m, wr + k0), &lo, &hi);
    __mmask16 ml = (__mmask16)m, mh = (__mmask16)(m >> 16);
    *a = _mm512_mask3_fmadd_ps(lo, _mm512_maskz_loadu_ps(ml, x + k0), *a, ml);
    *a = _mm512_mask3_fmadd_ps(hi, _mm512_maskz_loadu_ps(mh, x + k0 + 16), *a, mh);
}

/* Chunk c of row i where the whole chunk is inside the row (aligned weight load). */
static inline __attribute__((always_inline)) void chunk_full(const uint16_t *wr, const float *x, __m512 *a,
                                                             const line_chunks *lc, size_t c) {
    size_t k0 = 32 * c - lc->o;
    __m512 lo, hi;
    widen_bf16x32(_mm512_load_si512(wr + k0), &lo, &hi);
    *a = _mm512_fmadd_ps(lo, _mm512_loadu_ps(x + k0), *a);
    *a = _mm512_fmadd_ps(hi, _mm512_loadu_ps(x + k0 + 16), *a);
}

static inline __attribute__((always_inline)) void chunk_any(const uint16_t *wr, const float *x, __m512 *a,
                                                            const line_chunks *lc, size_t c) {
    if (c == 0 || c == lc->last) chunk_masked(wr, x, a, lc, c);
    else chunk_full(wr, x, a, lc, c);
}

static void rows16_skewed(const uint16_t *w, size_t ld, const float *x, float *y, size_t cols) {
    const line_chunks lc = {cols, ((uintptr_t)w % 64) / 2, (cols - 1 + ((uintptr_t)w % 64) / 2) / 32};
    __m512 a[16];
    for (int i = 0; i < 16; i++) a[i] = _mm512_setzero_ps();
    size_t t = 0;
    /* The ramps prefetch as the middle does: without it every row but the first few met DRAM
       latency on its first lines, and rows 6-15 never prefetched the next tile's heads (2304x4096,
       128 chunks a row, ran 0.84-0.89 of the read ceiling where unaliased shapes ran 0.93-0.96). */
    for (; t < 16; t++) /* ramp-up: rows 0..t have started; row t is on its first chunk */
        for (int i = 0; i <= (int)t && i < 16; i++) {
            _mm_prefetch((const char *)(w + i * ld + skew_prefetch_offset(&lc, t - i, ld)), _MM_HINT_T0);
            chunk_any(w + i * ld, x, &a[i], &lc, t - i);
        }
    for (; t < lc.last; t++) { /* every row on a middle chunk: t - i in 1 .. last - 1 */
        for (int i = 0; i < 16; i++)
            _mm_prefetch((const char *)(w + i * ld + skew_prefetch_offset(&lc, t - i, ld)), _MM_HINT_T0);
        for (int i = 0; i < 16; i++) chunk_full(w + i * ld, x, &a[i], &lc, t - i);
    }
    for (; t < lc.last + 16; t++) /* ramp-down: rows t - last .. 15 are still running */
        for (int i = (int)(t - lc.last); i < 16; i++) {
            _mm_prefetch((const char *)(w + i * ld + skew_prefetch_offset(&lc, t - i, ld)), _MM_HINT_T0);
            chunk_any(w + i * ld, x, &a[i], &lc, t - i);
        }
    /* slot j holds lane (j - o) % 16: lane L back to slot L */
    const __m512i back = _mm512_and_si512(_mm512_add_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                                           _mm512_set1_epi32((int)lc.o)), _mm512_set1_epi32(15));
    for (int i = 0; i < 16; i++) y[i] = k3_lanes16_sum_avx512(_mm512_permutexvar_ps(back, a[i]));
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

static int l1_aliased(size_t ld) { return (ld * sizeof(uint16_t)) % 4096 == 0; }

static void rows_tail(const uint16_t *w, size_t ld, const float *x, float *y, size_t r, size_t row_end, size_t cols) {
    for (; r + 8 <= row_end; r += 8) rows8(w + r * ld, ld, x, y + r, cols);
    for (; r + 4 <= row_end; r += 4) rows4(w + r * ld, ld, x, y + r, cols);
    for (; r < row_end; r++) y[r] = row1(w + r * ld, x, cols);
}

/* 16-row tiles (skewed and line-aligned where the stride would alias them in L1; short aliased rows
   run 8-row tiles), at every thread count (file comment). */
void k3_gemv_bf16_rows_avx512(const uint16_t *w, size_t ld, const float *x, float *y,
                              size_t row_begin, size_t row_end, size_t cols) {
    size_t r = row_begin;
    if (!l1_aliased(ld))
        for (; r + 16 <= row_end; r += 16) rows16(w + r * ld, ld, x, y + r, cols);
    else if (cols >= SKEW_MIN_COLS && r + 16 <= row_end) {
        /* the chunks' activation loads at x + 32c - o: a copy of x placed so that they too are
           line-aligned (with o != 0 and x in place every one of them split a line: 25 vs 27 GB/s
           unskewed, 31.6 aligned) */
        size_t o = ((uintptr_t)(w + r * ld) % 64) / 2;
        float *buf = o % 16 ? aligned_alloc(64, (cols + 16) * sizeof(float) + 64 - (cols + 16) * sizeof(float) % 64) : NULL;
        const float *xa = x;
        if (buf) xa = memcpy(buf + o % 16, x, cols * sizeof(float));
        if (buf || o % 16 == 0)
            for (; r + 16 <= row_end; r += 16) rows16_skewed(w + r * ld, ld, xa, y + r, cols);
        free(buf);
    }
    rows_tail(w, ld, x, y, r, row_end, cols);
}
