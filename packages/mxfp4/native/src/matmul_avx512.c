/*
 * matmul_avx512.c: packed MXFP4 on AVX-512 (order in include/k3_mxfp4.h).
 *
 * Decoding a block of one row (16 bytes = 32 weights) takes: one zero-extending load of the 16 bytes
 * to 16 dwords (dword i = byte i: its low nibble is the even code, and vpermps reads only the low 4
 * index bits, so no masking), one immediate shift for the odd codes, one load of the E2M1 table
 * pre-scaled by the block's scale (k3_scaled_e2m1, 16 KiB, L1-resident) and two vpermps. (An earlier
 * broadcast + per-lane variable shift decode was ~5-8 % slower per core on Zen 5: vpsrlvd shares
 * ports with vpermps and the FMAs; vpsrld does not.) The decoded even/odd vectors then feed one FMA
 * each per activation row. Each (row, batch row) keeps two accumulators: lanes 0-15 (even) and 16-31 (odd).
 *
 * Tiles: decode runs 8 rows at a time (tile_rows8_decode: 16 independent FMA chains, 8 prefetched row
 * streams), then 4 x 1 tiles for what is left. Batches use R rows x NB activation rows, R and NB
 * compile-time constants (the tile function is inlined at every call site): 2 x 4 (each decoded block is
 * used 4 times, 16 accumulators), or the L1-buffered kernel of matmul_prefill_avx512.c.
 */
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl")
#include <immintrin.h>
#include "k3_lane_sums.h"
#include "mxfp4.h"
#include "matmul_prefill.h"

/* How many tiles ahead the packed bytes are prefetched (see tile()). */
#define PREFETCH_TILES 2

/* lanes 0-31: h = 16 folds the odd lanes onto the even ones, then the 16-lane tree */
static float reduce32(__m512 even, __m512 odd) { return k3_lanes16_sum_avx512(_mm512_add_ps(even, odd)); }

/* Rows r0 .. r0+R-1 against activation rows b0 .. b0+NB-1. */
static inline __attribute__((always_inline)) void tile(const k3_mxfp4_matrix *m, const float *xs, float *y,
                                                       size_t r0, size_t b0, const int R, const int NB) {
    const size_t cols = m->cols, n_blocks = cols / 32;
    const uint8_t *packed[4], *scales[4];
    __m512 acc_even[4][4], acc_odd[4][4];
    for (int i = 0; i < R; i++) {
        packed[i] = m->packed + (r0 + i) * (cols / 2);
        scales[i] = m->scales + (r0 + i) * n_blocks;
        for (int j = 0; j < NB; j++) acc_even[i][j] = acc_odd[i][j] = _mm512_setzero_ps();
    }
    const float *x0 = xs + b0 * cols;
    /* Rows are contiguous, so the tile is one run of R * cols/2 bytes. While it is consumed (R * 16
       bytes per block) prefetch the same span PREFETCH_TILES tiles ahead, one line per 64 bytes: the
       hardware prefetcher alone leaves DRAM latency exposed on these short interleaved row streams. */
    const uint8_t *ahead = packed[0] + (size_t)PREFETCH_TILES * R * (cols / 2);
    const uint8_t *scales_ahead = scales[0] + (size_t)PREFETCH_TILES * R * n_blocks;
    for (size_t blk = 0; blk < n_blocks; blk++) {
        __m512 w_even[4], w_odd[4];
        if ((blk * R) % 4 == 0) _mm_prefetch((const char *)(ahead + blk * R * 16), _MM_HINT_T0);
        if ((blk & 15) == 0) _mm_prefetch((const char *)(scales_ahead + blk * R), _MM_HINT_T0);
        for (int i = 0; i < R; i++) {
            __m512i q = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(packed[i] + 16 * blk)));
            __m512 scaled = _mm512_load_ps(k3_scaled_e2m1[scales[i][blk]]);
            w_even[i] = _mm512_permutexvar_ps(q, scaled);
            w_odd[i] = _mm512_permutexvar_ps(_mm512_srli_epi32(q, 4), scaled);
        }
        for (int j = 0; j < NB; j++) {
            const float *xb = x0 + j * cols + 32 * blk;
            __m512 x_even = _mm512_loadu_ps(xb), x_odd = _mm512_loadu_ps(xb + 16);
            for (int i = 0; i < R; i++) {
                acc_even[i][j] = _mm512_fmadd_ps(w_even[i], x_even, acc_even[i][j]);
                acc_odd[i][j] = _mm512_fmadd_ps(w_odd[i], x_odd, acc_odd[i][j]);
            }
        }
    }
    for (int i = 0; i < R; i++)
        for (int j = 0; j < NB; j++) y[(b0 + j) * m->rows + r0 + i] = reduce32(acc_even[i][j], acc_odd[i][j]);
}

/* Decode (batch 1), 8 rows at a time: each block is decoded and used at once, so 16 accumulators and
   few other live registers. Eight row streams per core, each prefetched on its own 8 rows ahead, keep
   more DRAM requests in flight than the 4-row tile does (package code, 3072x3584 from DRAM, wall time:
   39-40 vs 34-35 GB/s on 2 threads, 23 vs 21 GB/s on 1). Each row keeps the documented order. */
static void tile_rows8_decode(const k3_mxfp4_matrix *m, const float *xs, float *y, size_t r0) {
    const size_t cols = m->cols, row_bytes = cols / 2, n_blocks = cols / 32;
    const uint8_t *packed = m->packed + r0 * row_bytes, *scales = m->scales + r0 * n_blocks;
    const uint8_t *packed_ahead = packed + 8 * row_bytes, *scales_ahead = scales + 8 * n_blocks;
    __m512 acc_even[8], acc_odd[8];
    for (int i = 0; i < 8; i++) acc_even[i] = acc_odd[i] = _mm512_setzero_ps();
    for (size_t s = 0; s < 8 * n_blocks; s += 64) _mm_prefetch((const char *)(scales_ahead + s), _MM_HINT_T0);
    for (size_t blk = 0; blk < n_blocks; blk++) {
        if ((blk & 3) == 0) /* one 64-byte line per row every 4 blocks */
            for (int i = 0; i < 8; i++) _mm_prefetch((const char *)(packed_ahead + i * row_bytes + 16 * blk), _MM_HINT_T0);
        __m512 x_even = _mm512_loadu_ps(xs + 32 * blk), x_odd = _mm512_loadu_ps(xs + 32 * blk + 16);
        for (int i = 0; i < 8; i++) {
            __m512i q = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(packed + i * row_bytes + 16 * blk)));
            __m512 scaled = _mm512_load_ps(k3_scaled_e2m1[scales[i * n_blocks + blk]]);
            acc_even[i] = _mm512_fmadd_ps(_mm512_permutexvar_ps(q, scaled), x_even, acc_even[i]);
            acc_odd[i] = _mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(q, 4), scaled), x_odd, acc_odd[i]);
        }
    }
    for (int i = 0; i < 8; i++) y[r0 + i] = reduce32(acc_even[i], acc_odd[i]);
}

/* One explicit call per (R, NB) so every tile is compiled with constant bounds. */
static void tile_rows4_batch1(const k3_mxfp4_matrix *m, const float *xs, float *y, size_t r, size_t b) { tile(m, xs, y, r, b, 4, 1); }
static void tile_rows2_batch4(const k3_mxfp4_matrix *m, const float *xs, float *y, size_t r, size_t b) { tile(m, xs, y, r, b, 2, 4); }
static void tile_rows2_batch3(const k3_mxfp4_matrix *m, const float *xs, float *y, size_t r, size_t b) { tile(m, xs, y, r, b, 2, 3); }
static void tile_rows2_batch2(const k3_mxfp4_matrix *m, const float *xs, float *y, size_t r, size_t b) { tile(m, xs, y, r, b, 2, 2); }
static void tile_rows2_batch1(const k3_mxfp4_matrix *m, const float *xs, float *y, size_t r, size_t b) { tile(m, xs, y, r, b, 2, 1); }
static void tile_rows1_batch4(const k3_mxfp4_matrix *m, const float *xs, float *y, size_t r, size_t b) { tile(m, xs, y, r, b, 1, 4); }
static void tile_rows1_batch1(const k3_mxfp4_matrix *m, const float *xs, float *y, size_t r, size_t b) { tile(m, xs, y, r, b, 1, 1); }

typedef void (*tile_fn)(const k3_mxfp4_matrix *, const float *, float *, size_t, size_t);

/* Runs rows [r, r+n_rows) (n_rows 1 or 2) against the whole batch, 4 activation rows at a time. */
static void rows_with_batch(const k3_mxfp4_matrix *m, const float *xs, float *y, size_t batch, size_t r, int n_rows) {
    static const tile_fn by_rest2[4] = {0, tile_rows2_batch1, tile_rows2_batch2, tile_rows2_batch3};
    size_t b = 0;
    for (; b + 4 <= batch; b += 4) (n_rows == 2 ? tile_rows2_batch4 : tile_rows1_batch4)(m, xs, y, r, b);
    for (; b < batch; b++) {
        if (n_rows == 2 && batch - b < 4) {
            by_rest2[batch - b](m, xs, y, r, b);
            return;
        }
        tile_rows1_batch1(m, xs, y, r, b);
    }
}

void k3_mxfp4_rows_avx512(const k3_mxfp4_matrix *m, const float *xs, float *y, size_t batch,
                          size_t row_begin, size_t row_end) {
    size_t r = row_begin;
    if (batch == 1) {
        for (; r + 8 <= row_end; r += 8) tile_rows8_decode(m, xs, y, r);
        for (; r + 4 <= row_end; r += 4) tile_rows4_batch1(m, xs, y, r, 0);
        for (; r < row_end; r++) tile_rows1_batch1(m, xs, y, r, 0);
        return;
    }
    /* Batches of 4+ amortise a separate decode into L1 (matmul_prefill_avx512.c). */
    if (batch >= 4) r = k3_mxfp4_rows_prefill_avx512(m, xs, y, batch, r, row_end);
    for (; r + 2 <= row_end; r += 2) rows_with_batch(m, xs, y, batch, r, 2);
    for (; r < row_end; r++) rows_with_batch(m, xs, y, batch, r, 1);
}
