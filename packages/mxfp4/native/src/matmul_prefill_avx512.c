/*
 * matmul_prefill_avx512.c: the batched (prefill) AVX-512 kernel for 4 rows at a time.
 *
 * Decode is cheap per block but not free, and a batch of 32 would pay it 32 times if the weights were
 * decoded inside the FMA loop. Here 4 rows are decoded once per column chunk into an L1 buffer (in the
 * kernel's lane order, exactly the values the fp32 path multiplies), then a plain f32 micro-kernel of
 * 4 rows x 2 activations (16 accumulators; the 8 decoded vectors stay in registers) runs the whole batch over that buffer. The lane
 * accumulators live in a small scratch between column chunks, so every (row, activation, lane) sees
 * the same fmaf sequence as matvec: results are bit-identical to the other tiles and to matvec.
 * Each weight byte is read from memory once per batch chunk of 32 activations (from cache after the
 * first chunk).
 */
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl")
#include <immintrin.h>
#include "k3_lane_sums.h"
#include "mxfp4.h"
#include "matmul_prefill.h"

#define CHUNK_BLOCKS 32  /* 1024 columns: 4 rows x 4 KiB of decoded weights */
#define BATCH_CHUNK 32   /* activations whose accumulators stay in scratch (16 KiB) */

/* lanes 0-31: h = 16 folds the odd lanes onto the even ones, then the 16-lane tree */
static float reduce32(__m512 even, __m512 odd) { return k3_lanes16_sum_avx512(_mm512_add_ps(even, odd)); }

/* Decodes blocks [blk0, blk0 + n) of one row into out (32 floats per block: 16 even, 16 odd lanes).
   The same span `ahead` bytes (scales: `ahead_scales`) further on is prefetched: the row 4 rows down,
   which the next 4-row group decodes. Each group reads its rows in short 512-byte pieces between
   long FMA phases, which the hardware prefetcher does not follow (7 % faster from L3/DRAM). */
static void decode_blocks(const uint8_t *packed, const uint8_t *scales, size_t blk0, size_t n, size_t ahead,
                          size_t ahead_scales, float *out) {
    _mm_prefetch((const char *)(scales + ahead_scales + blk0), _MM_HINT_T0);
    for (size_t b = 0; b < n; b++) {
        if ((b & 3) == 0) _mm_prefetch((const char *)(packed + ahead + 16 * (blk0 + b)), _MM_HINT_T0);
        __m512i q = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(packed + 16 * (blk0 + b))));
        __m512 scaled = _mm512_load_ps(k3_scaled_e2m1[scales[blk0 + b]]);
        _mm512_store_ps(out + 32 * b, _mm512_permutexvar_ps(q, scaled));
        _mm512_store_ps(out + 32 * b + 16, _mm512_permutexvar_ps(_mm512_srli_epi32(q, 4), scaled));
    }
}

/* 4 rows x NB activations over n decoded blocks; acc[i][j] = 32 floats (even lanes, odd lanes). */
static inline __attribute__((always_inline)) void micro(const float *w, size_t w_stride, const float *x0, size_t x_stride,
                                                        float *acc, size_t n, const int NB) {
    __m512 ae[4][2], ao[4][2];
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < NB; j++) {
            ae[i][j] = _mm512_load_ps(acc + (i * BATCH_CHUNK + j) * 32);
            ao[i][j] = _mm512_load_ps(acc + (i * BATCH_CHUNK + j) * 32 + 16);
        }
    for (size_t b = 0; b < n; b++) {
        __m512 we[4], wo[4];
        for (int i = 0; i < 4; i++) {
            we[i] = _mm512_load_ps(w + i * w_stride + 32 * b);
            wo[i] = _mm512_load_ps(w + i * w_stride + 32 * b + 16);
            /* keep them in registers: gcc would otherwise fold a reload into every FMA (2x the loads) */
            __asm__("" : "+v"(we[i]), "+v"(wo[i]));
        }
        for (int j = 0; j < NB; j++) {
            __m512 xe = _mm512_loadu_ps(x0 + j * x_stride + 32 * b), xo = _mm512_loadu_ps(x0 + j * x_stride + 32 * b + 16);
            for (int i = 0; i < 4; i++) {
                ae[i][j] = _mm512_fmadd_ps(we[i], xe, ae[i][j]);
                ao[i][j] = _mm512_fmadd_ps(wo[i], xo, ao[i][j]);
            }
        }
    }
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < NB; j++) {
            _mm512_store_ps(acc + (i * BATCH_CHUNK + j) * 32, ae[i][j]);
            _mm512_store_ps(acc + (i * BATCH_CHUNK + j) * 32 + 16, ao[i][j]);
        }
}

static void micro2(const float *w, size_t ws, const float *x, size_t xs, float *acc, size_t n) { micro(w, ws, x, xs, acc, n, 2); }
static void micro1(const float *w, size_t ws, const float *x, size_t xs, float *acc, size_t n) { micro(w, ws, x, xs, acc, n, 1); }

void k3_mxfp4_rows4_prefill_avx512(const k3_mxfp4_matrix *m, const float *xs, float *y, size_t batch, size_t r0) {
    static __thread float wbuf[4][CHUNK_BLOCKS * 32] __attribute__((aligned(64)));
    static __thread float acc[4 * BATCH_CHUNK * 32] __attribute__((aligned(64)));
    const size_t cols = m->cols, n_blocks = cols / 32;
    const int has_next_group = r0 + 8 <= m->rows;
    const size_t ahead = has_next_group ? 4 * (cols / 2) : 0, ahead_scales = has_next_group ? 4 * n_blocks : 0;
    for (size_t b0 = 0; b0 < batch; b0 += BATCH_CHUNK) {
        size_t nb = batch - b0 < BATCH_CHUNK ? batch - b0 : BATCH_CHUNK;
        for (size_t i = 0; i < 4 * BATCH_CHUNK * 32; i++) acc[i] = 0.0f;
        for (size_t c0 = 0; c0 < n_blocks; c0 += CHUNK_BLOCKS) {
            size_t n = n_blocks - c0 < CHUNK_BLOCKS ? n_blocks - c0 : CHUNK_BLOCKS;
            for (int i = 0; i < 4; i++)
                decode_blocks(m->packed + (r0 + i) * (cols / 2), m->scales + (r0 + i) * n_blocks, c0, n, ahead,
                              ahead_scales, wbuf[i]);
            size_t j = 0;
            for (; j + 2 <= nb; j += 2) micro2(wbuf[0], CHUNK_BLOCKS * 32, xs + (b0 + j) * cols + 32 * c0, cols, acc + j * 32, n);
            if (j < nb) micro1(wbuf[0], CHUNK_BLOCKS * 32, xs + (b0 + j) * cols + 32 * c0, cols, acc + j * 32, n);
        }
        for (int i = 0; i < 4; i++)
            for (size_t j = 0; j < nb; j++) {
                const float *a = acc + (i * BATCH_CHUNK + j) * 32;
                y[(b0 + j) * m->rows + r0 + i] = reduce32(_mm512_load_ps(a), _mm512_load_ps(a + 16));
            }
    }
}
