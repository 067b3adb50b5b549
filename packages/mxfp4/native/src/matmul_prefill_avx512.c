/*
 * matmul_prefill_avx512.c: the batched (prefill) AVX-512 kernel, blocked like @k3/dense's GEMM.
 *
 * Per task (a range of rows): row blocks of MC rows; column chunks of CHUNK_BLOCKS blocks (1024
 * columns). Each MC x 1024 chunk of weights is decoded ONCE into an f32 panel (MC = 32: 128 KiB,
 * L2-resident), exactly the values the fp32 path multiplies, and the whole batch chunk runs over it:
 * per activation tile (<= 6 activations, packed 24 KiB, L1-resident while it is used against every
 * 4-row group of the panel) a register-blocked 4 x NB micro-kernel, one lane half at a time: the even
 * lanes (0-15), then the odd ones (16-31); per block 4 weight loads (one 256-byte run of the panel) and
 * NB activation loads feed 4 NB FMAs. The two halves never mix before the final tree, so each lane keeps
 * its fmaf sequence (block after block, from +0); the accumulators are parked in a per-thread scratch
 * between column chunks (a store and a reload, no bit changes). Results are bit-identical to the other
 * tiles and to matvec. While a panel is decoded, the raw bytes of the next one are prefetched to L2.
 * Each weight byte is read once per batch chunk of BATCH_CHUNK activations.
 *
 * The previous layout decoded 4 rows into L1 and streamed the activation chunk (131 KiB) from L2 for
 * every 4-row group (0.50-0.64 of the 2-thread FMA peak at n >= 16, see the README).
 */
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl")
#include <immintrin.h>
#include <stdlib.h>
#include "k3_lane_sums.h"
#include "mxfp4.h"
#include "matmul_prefill.h"

#ifndef CHUNK_BLOCKS
#define CHUNK_BLOCKS 32 /* 1024 columns per chunk */
#endif
#ifndef MC
#define MC 32 /* rows per decoded panel (a multiple of 4): 32 x 1024 f32 = 128 KiB */
#endif
#ifndef BATCH_CHUNK
#define BATCH_CHUNK 64 /* activations whose accumulators stay in scratch (MC x 64 x 32 f32 = 256 KiB) */
#endif

/* lanes 0-31: h = 16 folds the odd lanes onto the even ones, then the 16-lane tree */
static float reduce32(__m512 even, __m512 odd) { return k3_lanes16_sum_avx512(_mm512_add_ps(even, odd)); }

/* The next panel's first rows and width, prefetched to L2 while the current one is decoded. */
typedef struct {
    const uint8_t *packed, *scales; /* row 0 of the next panel, or NULL */
    size_t rows, n;                 /* its rows and blocks */
} next_panel;

/* The accumulators are named variables (a<row><activation>), not an array: gcc keeps a 24-vector array
   on the stack and copies it in and out around every call's loop (27% of the micro-kernel's time,
   measured). Columns j >= NB fold away. */
#define FOR_J(X) X(0) X(1) X(2) X(3) X(4) X(5)
#define ACC_DECL(j) __m512 a0##j, a1##j, a2##j, a3##j;
#define ACC_AT(i, j) (acc + (i * BATCH_CHUNK + j) * 32)
#define ACC_LOAD(j)                                                                                          \
    if (NB > j) {                                                                                            \
        if (first) {                                                                                         \
            a0##j = a1##j = a2##j = a3##j = _mm512_setzero_ps();                                             \
        } else {                                                                                             \
            a0##j = _mm512_load_ps(ACC_AT(0, j)), a1##j = _mm512_load_ps(ACC_AT(1, j));                      \
            a2##j = _mm512_load_ps(ACC_AT(2, j)), a3##j = _mm512_load_ps(ACC_AT(3, j));                      \
        }                                                                                                    \
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
/* the odd half of the last chunk: fold with the parked even half (16 floats before) into y */
#define ACC_REDUCE(j)                                                                                        \
    if (NB > j) {                                                                                            \
        y[j * ldy + 0] = reduce32(_mm512_load_ps(ACC_AT(0, j) - 16), a0##j);                                 \
        y[j * ldy + 1] = reduce32(_mm512_load_ps(ACC_AT(1, j) - 16), a1##j);                                 \
        y[j * ldy + 2] = reduce32(_mm512_load_ps(ACC_AT(2, j) - 16), a2##j);                                 \
        y[j * ldy + 3] = reduce32(_mm512_load_ps(ACC_AT(3, j) - 16), a3##j);                                 \
    }
/* One lane half of one 4-row group (w, x0 and acc already offset for the half): 4 rows x NB
   activations over n decoded blocks. w: block b, row i at w + (b * 4 + i) * 16; activation j at
   x0 + (b * NB + j) * 16; acc[(i * BATCH_CHUNK + j) * 32]. first: start from +0; fold: the odd half of
   the last chunk, reduce into y[j * ldy + i] instead of parking. */
static inline __attribute__((always_inline)) void micro(const float *w, const float *x0, float *acc, size_t n,
                                                        const int NB, int first, int fold, float *y, size_t ldy) {
    FOR_J(ACC_DECL)
    FOR_J(ACC_LOAD)
    for (size_t b = 0; b < n; b++) {
        __m512 w0 = _mm512_load_ps(w + 64 * b), w1 = _mm512_load_ps(w + 64 * b + 16);
        __m512 w2 = _mm512_load_ps(w + 64 * b + 32), w3 = _mm512_load_ps(w + 64 * b + 48);
        /* keep them in registers: gcc would otherwise fold a reload into every FMA */
        __asm__("" : "+v"(w0), "+v"(w1), "+v"(w2), "+v"(w3));
        FOR_J(ACC_FMA)
    }
    if (fold) {
        FOR_J(ACC_REDUCE)
    } else {
        FOR_J(ACC_STORE)
    }
}

/* The same for the FIRST activation tile of a chunk, decoding as it goes: block b of row i comes from
   the packed bytes (row i at packed + i * row_bytes, its scales at scales + i * n_blocks), is multiplied
   at once and stored to the panel (w) for the other tiles, so the decode overlaps the FMAs instead of
   running as its own phase (it cost 27 % of the time at n = 16 as a phase, 1 thread). */
static inline __attribute__((always_inline)) void micro_decode(const uint8_t *packed, size_t row_bytes,
                                                               const uint8_t *scales, size_t n_blocks, const int half,
                                                               float *w, const float *x0, float *acc, size_t n,
                                                               const int NB, int first, int fold, float *y, size_t ldy) {
    FOR_J(ACC_DECL)
    FOR_J(ACC_LOAD)
    for (size_t b = 0; b < n; b++) {
        __m512 wv[4];
        for (int i = 0; i < 4; i++) {
            __m512i q = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(packed + i * row_bytes + 16 * b)));
            if (half) q = _mm512_srli_epi32(q, 4);
            wv[i] = _mm512_permutexvar_ps(q, _mm512_load_ps(k3_scaled_e2m1[scales[i * n_blocks + b]]));
            _mm512_store_ps(w + 64 * b + 16 * i, wv[i]);
        }
        __m512 w0 = wv[0], w1 = wv[1], w2 = wv[2], w3 = wv[3];
        FOR_J(ACC_FMA)
    }
    if (fold) {
        FOR_J(ACC_REDUCE)
    } else {
        FOR_J(ACC_STORE)
    }
}

#define MICRO_DECODE(NB)                                                                                       \
    static void micro_decode##NB(const uint8_t *packed, size_t row_bytes, const uint8_t *scales, size_t n_blocks, \
                                 float *w, const float *x, float *acc, size_t n, int first, int last, float *y,    \
                                 size_t ldy) {                                                                     \
        micro_decode(packed, row_bytes, scales, n_blocks, 0, w, x, acc, n, NB, first, 0, y, ldy);                  \
        micro_decode(packed, row_bytes, scales, n_blocks, 1, w + n * 64, x + n * NB * 16, acc + 16, n, NB, first,  \
                     last, y, ldy);                                                                                \
    }
MICRO_DECODE(6)
MICRO_DECODE(5)
MICRO_DECODE(4)
MICRO_DECODE(3)
MICRO_DECODE(2)
MICRO_DECODE(1)
typedef void (*micro_decode_fn)(const uint8_t *, size_t, const uint8_t *, size_t, float *, const float *, float *,
                                size_t, int, int, float *, size_t);
static const micro_decode_fn micro_decode_by_nb[7] = {0,              micro_decode1, micro_decode2, micro_decode3,
                                                      micro_decode4, micro_decode5, micro_decode6};

#define MICRO(NB)                                                                                              \
    static void micro##NB(const float *w, const float *x, float *acc, size_t n, int first, int last, float *y, \
                          size_t ldy) {                                                                        \
        micro(w, x, acc, n, NB, first, 0, y, ldy);                                                             \
        micro(w + n * 64, x + n * NB * 16, acc + 16, n, NB, first, last, y, ldy);                              \
    }
MICRO(6)
MICRO(5)
MICRO(4)
MICRO(3)
MICRO(2)
MICRO(1)
typedef void (*micro_fn)(const float *, const float *, float *, size_t, int, int, float *, size_t);
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

/* Rows [r0, r0 + mc) (mc <= MC, a multiple of 4) for a batch chunk of nb activations packed in xp;
   rows [r0 + mc, r_end) follow (their first panel is prefetched). */
static void row_block(const k3_mxfp4_matrix *m, const float *xp, float *y, size_t nb, size_t r0, size_t mc,
                      size_t r_end, float *panel, float *acc) {
    const size_t cols = m->cols, n_blocks = cols / 32;
    for (size_t c0 = 0; c0 < n_blocks; c0 += CHUNK_BLOCKS) {
        const size_t n = n_blocks - c0 < CHUNK_BLOCKS ? n_blocks - c0 : CHUNK_BLOCKS;
        const int first = c0 == 0, last = c0 + n == n_blocks;
        next_panel nx = {NULL, NULL, 0, 0};
        if (!last) {
            nx.rows = mc, nx.n = n_blocks - c0 - n < CHUNK_BLOCKS ? n_blocks - c0 - n : CHUNK_BLOCKS;
            nx.packed = m->packed + r0 * (cols / 2) + 16 * (c0 + n), nx.scales = m->scales + r0 * n_blocks + c0 + n;
        } else if (r0 + mc < r_end) {
            nx.rows = r_end - (r0 + mc) < MC ? r_end - (r0 + mc) : MC, nx.n = n_blocks < CHUNK_BLOCKS ? n_blocks : CHUNK_BLOCKS;
            nx.packed = m->packed + (r0 + mc) * (cols / 2), nx.scales = m->scales + (r0 + mc) * n_blocks;
        }
        const float *x = xp + 32 * c0 * nb; /* every earlier chunk is CHUNK_BLOCKS wide */
        for (size_t j = 0; j < nb;) {
            const int w = tile_width(nb - j);
            for (size_t g = 0; g < mc / 4; g++) {
                float *wg = panel + g * 2 * n * 64, *ag = acc + (g * 4 * BATCH_CHUNK + j) * 32;
                float *yg = y + j * m->rows + r0 + g * 4;
                if (j == 0) { /* the first tile decodes the group into the panel; the next panel's bytes to L2 */
                    if (nx.packed)
                        for (size_t i = 4 * g; i < 4 * g + 4 && i < nx.rows; i++) {
                            const char *p = (const char *)(nx.packed + i * (cols / 2));
                            const char *sc = (const char *)(nx.scales + i * n_blocks);
                            for (size_t off = 0; off < 16 * nx.n; off += 64) _mm_prefetch(p + off, _MM_HINT_T2);
                            _mm_prefetch(sc, _MM_HINT_T2);
                            _mm_prefetch(sc + nx.n - 1, _MM_HINT_T2);
                        }
                    micro_decode_by_nb[w](m->packed + (r0 + 4 * g) * (cols / 2) + 16 * c0, cols / 2,
                                          m->scales + (r0 + 4 * g) * n_blocks + c0, n_blocks, wg, x, ag, n, first, last,
                                          yg, m->rows);
                } else {
                    micro_by_nb[w](wg, x, ag, n, first, last, yg, m->rows);
                }
            }
            x += n * 32 * (size_t)w;
            j += (size_t)w;
        }
    }
}

size_t k3_mxfp4_rows_prefill_avx512(const k3_mxfp4_matrix *m, const float *xs, float *y, size_t batch, size_t r0,
                                    size_t r1) {
    /* One per-thread scratch: the packed activations of one batch chunk, the decoded panel and the
       parked accumulators; grows to the largest a pool thread has seen and is kept for the thread's
       life (pool threads live as long as the process). */
    static __thread float *scratch;
    static __thread size_t scratch_floats;
    const size_t panel_floats = MC * CHUNK_BLOCKS * 32, acc_floats = MC * BATCH_CHUNK * 32;
    const size_t need = BATCH_CHUNK * m->cols + panel_floats + acc_floats;
    const size_t r_end = r0 + (r1 - r0) / 4 * 4;
    if (r_end == r0) return r0;
    if (scratch_floats < need) {
        float *grown = aligned_alloc(64, need * sizeof(float));
        if (!grown) return r0; /* out of memory: the other tiles compute the same bits */
        free(scratch);
        scratch = grown;
        scratch_floats = need;
    }
    float *panel = scratch, *acc = panel + panel_floats, *xp = acc + acc_floats;
    for (size_t b0 = 0; b0 < batch; b0 += BATCH_CHUNK) {
        const size_t nb = batch - b0 < BATCH_CHUNK ? batch - b0 : BATCH_CHUNK;
        pack_activations(xs + b0 * m->cols, m->cols, nb, xp);
        for (size_t r = r0; r < r_end; r += MC)
            row_block(m, xp, y + b0 * m->rows, nb, r, r_end - r < MC ? r_end - r : MC, r_end, panel, acc);
    }
    return r_end;
}
