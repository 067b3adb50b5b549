/*
 * matmul_prefill_avx512.c: the batched (prefill) AVX-512 kernel, 4 rows at a time.
 *
 * 4 rows are decoded once per column chunk (CHUNK_BLOCKS blocks = 1024 columns, 16 KiB of f32) into an
 * L1 buffer in the kernel's lane order: exactly the values the fp32 path multiplies. Then a register-
 * blocked f32 micro-kernel runs the whole batch over that buffer, one lane half at a time: the even
 * lanes (0-15) of 4 rows x NB activations (NB = 6: 24 accumulators, 4 weight vectors and one
 * activation vector live; per block 10 loads feed 24 FMAs), then the odd lanes (16-31). The two
 * halves never mix before the final tree, so splitting them keeps every lane's fmaf sequence (block
 * after block, from +0) unchanged; the accumulators live in a scratch between column chunks. Results
 * are bit-identical to the other tiles and to matvec.
 * Each weight byte is read once per batch chunk of BATCH_CHUNK activations.
 */
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl")
#include <immintrin.h>
#include <stdlib.h>
#include "k3_lane_sums.h"
#include "mxfp4.h"
#include "matmul_prefill.h"

#ifndef CHUNK_BLOCKS
#define CHUNK_BLOCKS 32  /* 1024 columns: 4 KiB of decoded weights per row */
#endif
#ifndef BATCH_CHUNK
#define BATCH_CHUNK 32   /* activations whose accumulators stay in scratch */
#endif

/* lanes 0-31: h = 16 folds the odd lanes onto the even ones, then the 16-lane tree */
static float reduce32(__m512 even, __m512 odd) { return k3_lanes16_sum_avx512(_mm512_add_ps(even, odd)); }

/* Decodes blocks [blk0, blk0 + n) of one row into out (32 floats per block: 16 even, 16 odd lanes).
   The same span `ahead` bytes (scales: `ahead_scales`) further on is prefetched: the row 4 rows down,
   which the next 4-row group decodes (short 512-byte pieces between long FMA phases are not followed
   by the hardware prefetcher). */
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

/* The accumulators are named variables (a<row><activation>), not an array: gcc keeps a 24-vector array
   on the stack and copies it in and out around every call's loop (27% of the micro-kernel's time,
   measured). Columns j >= NB fold away. */
#define FOR_J(X) X(0) X(1) X(2) X(3) X(4) X(5)
#define ACC_DECL(j) __m512 a0##j, a1##j, a2##j, a3##j;
#define ACC_AT(i, j) (acc + (i * BATCH_CHUNK + j) * 32)
#define ACC_LOAD(j)                                                                                          \
    if (NB > j) {                                                                                            \
        a0##j = _mm512_load_ps(ACC_AT(0, j)), a1##j = _mm512_load_ps(ACC_AT(1, j));                          \
        a2##j = _mm512_load_ps(ACC_AT(2, j)), a3##j = _mm512_load_ps(ACC_AT(3, j));                          \
    }
#define ACC_FMA(j)                                                                                           \
    if (NB > j) {                                                                                            \
        const __m512 xv = _mm512_load_ps(x0 + (b * NB + j) * 16);                                            \
        a0##j = _mm512_fmadd_ps(w0, xv, a0##j), a1##j = _mm512_fmadd_ps(w1, xv, a1##j);                      \
        a2##j = _mm512_fmadd_ps(w2, xv, a2##j), a3##j = _mm512_fmadd_ps(w3, xv, a3##j);                      \
    }
#define ACC_STORE(j)                                                                                         \
    if (NB > j) {                                                                                            \
        _mm512_store_ps(ACC_AT(0, j), a0##j), _mm512_store_ps(ACC_AT(1, j), a1##j);                          \
        _mm512_store_ps(ACC_AT(2, j), a2##j), _mm512_store_ps(ACC_AT(3, j), a3##j);                          \
    }
/* One lane half (w, x0 and acc already offset by 0 or 16 floats): 4 rows x NB activations over n
   decoded blocks. w: row i at w + i * CHUNK_BLOCKS * 32; x: activation j at x0 + (b * NB + j) * 16;
   block stride 32 floats. acc[(i * BATCH_CHUNK + j) * 32]. */
static inline __attribute__((always_inline)) void micro(const float *w, const float *x0, float *acc, size_t n,
                                                        const int NB) {
    FOR_J(ACC_DECL)
    FOR_J(ACC_LOAD)
    for (size_t b = 0; b < n; b++) {
        __m512 w0 = _mm512_load_ps(w + 32 * b), w1 = _mm512_load_ps(w + CHUNK_BLOCKS * 32 + 32 * b);
        __m512 w2 = _mm512_load_ps(w + 2 * CHUNK_BLOCKS * 32 + 32 * b), w3 = _mm512_load_ps(w + 3 * CHUNK_BLOCKS * 32 + 32 * b);
        /* keep them in registers: gcc would otherwise fold a reload into every FMA */
        __asm__("" : "+v"(w0), "+v"(w1), "+v"(w2), "+v"(w3));
        FOR_J(ACC_FMA)
    }
    FOR_J(ACC_STORE)
}

#define MICRO(NB)                                                                                   \
    static void micro##NB(const float *w, const float *x, float *acc, size_t n) {                  \
        micro(w, x, acc, n, NB);                                                                    \
        micro(w + 16, x + n * NB * 16, acc + 16, n, NB);                                            \
    }
MICRO(6)
MICRO(5)
MICRO(4)
MICRO(3)
MICRO(2)
MICRO(1)
typedef void (*micro_fn)(const float *, const float *, float *, size_t);
static const micro_fn micro_by_nb[7] = {0, micro1, micro2, micro3, micro4, micro5, micro6};

/* Activation tiles: 6 wide while more than 8 are left, then 4s, then the rest (8 -> 4 + 4, 16 -> 6 + 6 + 4). */
static int tile_width(size_t left) {
    if (left > 8 || left == 6) return 6;
    if (left >= 4) return left == 5 ? 5 : 4;
    return (int)left;
}

/* The activations of one batch chunk, re-laid for the micro-kernel: per column chunk, per activation
   tile (widths from tile_width), per lane half, per block, the tile's rows' 16 lanes one after another,
   so each micro pass reads one sequential stream. n_blocks * 32 * nb floats. */
static void pack_activations(const float *xs, size_t cols, size_t nb, float *xp) {
    const size_t n_blocks = cols / 32;
    float *o = xp;
    for (size_t c0 = 0; c0 < n_blocks; c0 += CHUNK_BLOCKS) {
        size_t n = n_blocks - c0 < CHUNK_BLOCKS ? n_blocks - c0 : CHUNK_BLOCKS;
        for (size_t j0 = 0; j0 < nb;) {
            size_t w = (size_t)tile_width(nb - j0);
            for (int h = 0; h < 2; h++)
                for (size_t b = 0; b < n; b++)
                    for (size_t j = 0; j < w; j++) {
                        _mm512_store_ps(o, _mm512_loadu_ps(xs + (j0 + j) * cols + 32 * (c0 + b) + 16 * h));
                        o += 16;
                    }
            j0 += w;
        }
    }
}

/* Rows [r0, r0 + 4) for a batch chunk of nb activations packed in xp. */
static void rows4_packed(const k3_mxfp4_matrix *m, const float *xp, float *y, size_t nb, size_t r0) {
    static __thread float wbuf[4 * CHUNK_BLOCKS * 32] __attribute__((aligned(64)));
    static __thread float acc[4 * BATCH_CHUNK * 32] __attribute__((aligned(64)));
    const size_t cols = m->cols, n_blocks = cols / 32;
    const int has_next = r0 + 8 <= m->rows;
    const size_t ahead = has_next ? 4 * (cols / 2) : 0, ahead_scales = has_next ? 4 * n_blocks : 0;
    for (int i = 0; i < 4; i++)
        for (size_t j = 0; j < nb; j++)
            for (int l = 0; l < 32; l += 16) _mm512_store_ps(acc + (i * BATCH_CHUNK + j) * 32 + l, _mm512_setzero_ps());
    const float *x = xp;
    for (size_t c0 = 0; c0 < n_blocks; c0 += CHUNK_BLOCKS) {
        size_t n = n_blocks - c0 < CHUNK_BLOCKS ? n_blocks - c0 : CHUNK_BLOCKS;
        for (int i = 0; i < 4; i++)
            decode_blocks(m->packed + (r0 + i) * (cols / 2), m->scales + (r0 + i) * n_blocks, c0, n, ahead, ahead_scales,
                          wbuf + i * CHUNK_BLOCKS * 32);
        for (size_t j = 0; j < nb;) {
            int w = tile_width(nb - j);
            micro_by_nb[w](wbuf, x, acc + j * 32, n);
            x += n * 32 * (size_t)w;
            j += (size_t)w;
        }
    }
    for (int i = 0; i < 4; i++)
        for (size_t j = 0; j < nb; j++) {
            const float *a = acc + (i * BATCH_CHUNK + j) * 32;
            y[j * m->rows + r0 + i] = reduce32(_mm512_load_ps(a), _mm512_load_ps(a + 16));
        }
}

size_t k3_mxfp4_rows_prefill_avx512(const k3_mxfp4_matrix *m, const float *xs, float *y, size_t batch, size_t r0,
                                    size_t r1) {
    /* The packed activations of one batch chunk; grows to the largest chunk a pool thread has seen and
       is kept for the thread's life (pool threads live as long as the process). */
    static __thread float *xp;
    static __thread size_t xp_floats;
    const size_t need = BATCH_CHUNK * m->cols;
    if (r1 - r0 < 4) return r0;
    if (xp_floats < need) {
        float *grown = aligned_alloc(64, need * sizeof(float));
        if (!grown) { /* out of memory: the other tiles compute the same bits */
            return r0;
        }
        free(xp);
        xp = grown;
        xp_floats = need;
    }
    size_t r = r0;
    for (size_t b0 = 0; b0 < batch; b0 += BATCH_CHUNK) {
        size_t nb = batch - b0 < BATCH_CHUNK ? batch - b0 : BATCH_CHUNK;
        pack_activations(xs + b0 * m->cols, m->cols, nb, xp);
        for (r = r0; r + 4 <= r1; r += 4) rows4_packed(m, xp, y + b0 * m->rows, nb, r);
    }
    return r;
}
