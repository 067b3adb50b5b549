/*
 * matmul_prefill_avx2.c: the batched (prefill) AVX2 kernel, 4 rows at a time.
 *
 * The AVX2 decode (decode_avx2.h: 11 vector ops per 32 weights) costs as much as 3 activations' FMAs,
 * so it is done once per batch chunk: 4 rows are decoded per column chunk (CHUNK_BLOCKS blocks = 1024
 * columns, 16 KiB of f32) into an L1 buffer, in the lanes' order (e0 e1 o0 o1: lanes 0-7, 8-15, 16-23,
 * 24-31, the split activations' order), exactly the values the fp32 path multiplies. Then a register-
 * blocked f32 micro-kernel runs the whole batch over that buffer one lane quarter (8 lanes) at a time:
 * 4 rows x NB activations (NB = 3: 12 accumulators, 3 activation vectors and one weight vector live,
 * 16 ymm; per block 7 loads feed 12 FMAs). The quarters never mix before the final tree, so each lane
 * keeps its fmaf sequence (block after block, from +0) and the bits equal matvec's; the accumulators
 * live in a scratch between column chunks and quarters. Each weight byte is read once per batch chunk
 * of BATCH_CHUNK activations.
 */
#pragma GCC target("avx2,fma")
#include <immintrin.h>
#include <stdlib.h>
#include "k3_lane_sums.h"
#include "mxfp4.h"
#include "decode_avx2.h"
#include "matmul_prefill.h"

#define CHUNK_BLOCKS 32 /* 1024 columns: 4 KiB of decoded weights per row */
#define BATCH_CHUNK 32  /* activations whose accumulators stay in scratch */
#define ROWS 4

/* Decodes blocks [blk0, blk0 + n) of one row into out (32 floats per block, lane order). The same span
   `ahead` bytes further on (the row the next 4-row group decodes) is prefetched. */
static void decode_blocks(const uint8_t *packed, const uint8_t *scales, size_t blk0, size_t n, size_t ahead,
                          size_t ahead_scales, float *out) {
    _mm_prefetch((const char *)(scales + ahead_scales + blk0), _MM_HINT_T0);
    for (size_t b = 0; b < n; b++) {
        if ((b & 3) == 0) _mm_prefetch((const char *)(packed + ahead + 16 * (blk0 + b)), _MM_HINT_T0);
        words32 v = decode_words(packed + 16 * (blk0 + b), scales[blk0 + b]);
        _mm256_store_ps(out + 32 * b, widen_lo(v.wa));
        _mm256_store_ps(out + 32 * b + 8, widen_hi(v.wa));
        _mm256_store_ps(out + 32 * b + 16, widen_lo(v.wb));
        _mm256_store_ps(out + 32 * b + 24, widen_hi(v.wb));
    }
}

/* Accumulators as named variables (a<row><activation>), not an array, so gcc keeps them in registers
   (the AVX-512 kernel measured a 27 % loss from an array copied through the stack). Columns j >= NB
   fold away. */
#define FOR_J(X) X(0) X(1) X(2)
#define ACC_DECL(j) __m256 a0##j, a1##j, a2##j, a3##j, x##j;
#define ACC_AT(i, j) (acc + (i * BATCH_CHUNK + j) * 32)
#define ACC_LOAD(j)                                                                                          \
    if (NB > j) {                                                                                            \
        a0##j = _mm256_load_ps(ACC_AT(0, j)), a1##j = _mm256_load_ps(ACC_AT(1, j));                          \
        a2##j = _mm256_load_ps(ACC_AT(2, j)), a3##j = _mm256_load_ps(ACC_AT(3, j));                          \
    }
#define X_LOAD(j)                                                                                            \
    if (NB > j) x##j = _mm256_load_ps(xt + (b * NB + j) * 8);
#define ROW_FMA(i)                                                                                           \
    {                                                                                                        \
        __m256 wv = _mm256_load_ps(w + i * CHUNK_BLOCKS * 32 + 32 * b);                                      \
        __asm__("" : "+x"(wv)); /* one load per row, not one folded into every FMA */                       \
        if (NB > 0) a##i##0 = _mm256_fmadd_ps(wv, x0, a##i##0);                                              \
        if (NB > 1) a##i##1 = _mm256_fmadd_ps(wv, x1, a##i##1);                                              \
        if (NB > 2) a##i##2 = _mm256_fmadd_ps(wv, x2, a##i##2);                                              \
    }
#define ACC_STORE(j)                                                                                         \
    if (NB > j) {                                                                                            \
        _mm256_store_ps(ACC_AT(0, j), a0##j), _mm256_store_ps(ACC_AT(1, j), a1##j);                          \
        _mm256_store_ps(ACC_AT(2, j), a2##j), _mm256_store_ps(ACC_AT(3, j), a3##j);                          \
    }

/* One lane quarter (w, xt and acc already offset by q * 8 floats): 4 rows x NB activations over n
   decoded blocks. w: row i at w + i * CHUNK_BLOCKS * 32, block stride 32 floats; x: activation j of
   block b at xt + (b * NB + j) * 8; acc[(i * BATCH_CHUNK + j) * 32]. */
static inline __attribute__((always_inline)) void micro(const float *w, const float *xt, float *acc, size_t n,
                                                        const int NB) {
    FOR_J(ACC_DECL)
    FOR_J(ACC_LOAD)
    for (size_t b = 0; b < n; b++) {
        FOR_J(X_LOAD)
        ROW_FMA(0) ROW_FMA(1) ROW_FMA(2) ROW_FMA(3)
    }
    FOR_J(ACC_STORE)
}

#define MICRO(NB)                                                                                   \
    static void micro##NB(const float *w, const float *x, float *acc, size_t n) {                  \
        for (int q = 0; q < 4; q++) micro(w + 8 * q, x + q * n * NB * 8, acc + 8 * q, n, NB);      \
    }
MICRO(3)
MICRO(2)
MICRO(1)
typedef void (*micro_fn)(const float *, const float *, float *, size_t);
static const micro_fn micro_by_nb[4] = {0, micro1, micro2, micro3};

/* Activation tiles: 3 wide, a last 4 as 2 + 2 (a 1-wide tile does 4 FMAs per 5 loads). */
static int tile_width(size_t left) {
    if (left == 4) return 2;
    return left >= 3 ? 3 : (int)left;
}

/* The activations of one batch chunk, re-laid for the micro-kernel: per column chunk, per activation
   tile, per lane quarter, per block, the tile's activations' 8 lanes one after another (one sequential
   stream per micro pass). n_blocks * 32 * nb floats. */
static void pack_activations(const float *xs, size_t cols, size_t nb, float *xp) {
    const size_t n_blocks = cols / 32;
    float *o = xp;
    for (size_t c0 = 0; c0 < n_blocks; c0 += CHUNK_BLOCKS) {
        size_t n = n_blocks - c0 < CHUNK_BLOCKS ? n_blocks - c0 : CHUNK_BLOCKS;
        for (size_t j0 = 0; j0 < nb;) {
            size_t w = (size_t)tile_width(nb - j0);
            for (int q = 0; q < 4; q++)
                for (size_t b = 0; b < n; b++)
                    for (size_t j = 0; j < w; j++) {
                        _mm256_store_ps(o, _mm256_loadu_ps(xs + (j0 + j) * cols + 32 * (c0 + b) + 8 * q));
                        o += 8;
                    }
            j0 += w;
        }
    }
}

/* Rows [r0, r0 + 4) for a batch chunk of nb activations packed in xp. */
static void rows4_packed(const k3_mxfp4_matrix *m, const float *xp, float *y, size_t nb, size_t r0) {
    static __thread float wbuf[ROWS * CHUNK_BLOCKS * 32] __attribute__((aligned(64)));
    static __thread float acc[ROWS * BATCH_CHUNK * 32] __attribute__((aligned(64)));
    const size_t cols = m->cols, n_blocks = cols / 32;
    const int has_next = r0 + 2 * ROWS <= m->rows;
    const size_t ahead = has_next ? ROWS * (cols / 2) : 0, ahead_scales = has_next ? ROWS * n_blocks : 0;
    for (int i = 0; i < ROWS; i++)
        for (size_t j = 0; j < nb; j++)
            for (int l = 0; l < 32; l += 8) _mm256_store_ps(acc + (i * BATCH_CHUNK + j) * 32 + l, _mm256_setzero_ps());
    const float *x = xp;
    for (size_t c0 = 0; c0 < n_blocks; c0 += CHUNK_BLOCKS) {
        size_t n = n_blocks - c0 < CHUNK_BLOCKS ? n_blocks - c0 : CHUNK_BLOCKS;
        for (int i = 0; i < ROWS; i++)
            decode_blocks(m->packed + (r0 + i) * (cols / 2), m->scales + (r0 + i) * n_blocks, c0, n, ahead, ahead_scales,
                          wbuf + i * CHUNK_BLOCKS * 32);
        for (size_t j = 0; j < nb;) {
            int w = tile_width(nb - j);
            micro_by_nb[w](wbuf, x, acc + j * 32, n);
            x += n * 32 * (size_t)w;
            j += (size_t)w;
        }
    }
    for (int i = 0; i < ROWS; i++)
        for (size_t j = 0; j < nb; j++) {
            const float *a = acc + (i * BATCH_CHUNK + j) * 32;
            __m256 e0 = _mm256_load_ps(a), e1 = _mm256_load_ps(a + 8), o0 = _mm256_load_ps(a + 16), o1 = _mm256_load_ps(a + 24);
            y[j * m->rows + r0 + i] = k3_lanes16_sum_avx2(_mm256_add_ps(e0, o0), _mm256_add_ps(e1, o1)); /* h = 16, then the tree */
        }
}

size_t k3_mxfp4_rows_prefill_avx2(const k3_mxfp4_matrix *m, const float *xs, float *y, size_t batch, size_t r0,
                                  size_t r1) {
    /* The packed activations of one batch chunk; grows to the largest chunk a pool thread has seen and
       is kept for the thread's life (pool threads live as long as the process). */
    static __thread float *xp;
    static __thread size_t xp_floats;
    const size_t need = BATCH_CHUNK * m->cols;
    if (r1 - r0 < ROWS) return r0;
    if (xp_floats < need) {
        float *grown = aligned_alloc(64, need * sizeof(float));
        if (!grown) return r0; /* out of memory: the other tiles compute the same bits */
        free(xp);
        xp = grown;
        xp_floats = need;
    }
    size_t r = r0;
    for (size_t b0 = 0; b0 < batch; b0 += BATCH_CHUNK) {
        size_t nb = batch - b0 < BATCH_CHUNK ? batch - b0 : BATCH_CHUNK;
        pack_activations(xs + b0 * m->cols, m->cols, nb, xp);
        for (r = r0; r + ROWS <= r1; r += ROWS) rows4_packed(m, xp, y + b0 * m->rows, nb, r);
    }
    return r;
}
