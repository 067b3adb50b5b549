/*
 * matmul_prefill_avx512.c: the batched (prefill) AVX-512 kernel, blocked like @k3/dense's GEMM.
 *
 * Per task (a range of rows): row blocks of MC rows; column chunks of CHUNK_BLOCKS blocks (2048
 * columns). Each MC x 2048 chunk of weights is decoded ONCE into a panel (MC = 32: 128 KiB, L2) of bf16
 * pairs: dword l of a block row holds the even weight of lane l in its low half and the odd one in its
 * high half. That is exact (every scaled E2M1 weight has zero low 16 bits) and costs one vector store
 * per block row instead of two: on Zen 5 every zmm store takes about one FMA slot (measured: 8 stores
 * beside 24 FMAs add ~1.4 cycles each), while the shift / AND that unpack a half do not. Each lane half
 * is its own pass over the chunk: per activation tile (<= 6 activations, packed 24 KiB per half,
 * L1-resident while it is used against every 4-row group of the panel) a register-blocked 4 x NB
 * micro-kernel, per block 4 weight loads (+ a shift or an AND) and NB activation loads feeding 4 NB
 * FMAs, 64 blocks per pass. The two halves never mix before the final tree, so each lane keeps its fmaf
 * sequence (block after block, from +0); the accumulators are parked in a per-thread scratch between
 * passes (a store and a reload, no bit changes). Results are bit-identical to the other tiles and to
 * matvec. The even pass of the first tile decodes as it multiplies, and prefetches the next panel's
 * bytes one line per block (a burst of prefetches stalled the core). Each weight byte is read once per
 * batch chunk of BATCH_CHUNK activations.
 */
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl")
#include <immintrin.h>
#include <stdlib.h>
#include "k3_lane_sums.h"
#include "mxfp4.h"
#include "matmul_prefill.h"

#ifndef CHUNK_BLOCKS
#define CHUNK_BLOCKS 64 /* 2048 columns per chunk (each lane half is its own pass: 64 FMA steps) */
#endif
#ifndef MC
#define MC 32 /* rows per decoded panel (a multiple of 4): 32 x 2048 bf16 = 128 KiB */
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
/* The f32 weights of one lane half from a panel row of bf16 pairs (even: low words, odd: high words). */
static inline __attribute__((always_inline)) __m512 unpack_half(const uint32_t *p, const int half) {
    __m512i v = _mm512_load_si512((const void *)p);
    return _mm512_castsi512_ps(half ? _mm512_and_si512(v, _mm512_set1_epi32((int)0xFFFF0000u)) : _mm512_slli_epi32(v, 16));
}
/* One lane half of one 4-row group (x0 and acc already offset for the half): 4 rows x NB activations
   over n decoded blocks. w: block b, row i at w + (b * 4 + i) * 16 (bf16 pairs); activation j at
   x0 + (b * NB + j) * 16; acc[(i * BATCH_CHUNK + j) * 32]. first: start from +0; fold: the odd half of
   the last chunk, reduce into y[j * ldy + i] instead of parking. */
static inline __attribute__((always_inline)) void micro(const uint32_t *w, const int half, const float *x0, float *acc, size_t n,
                                                        const int NB, int first, int fold, float *y, size_t ldy) {
    FOR_J(ACC_DECL)
    FOR_J(ACC_LOAD)
    for (size_t b = 0; b < n; b++) {
        __m512 w0 = unpack_half(w + 64 * b, half), w1 = unpack_half(w + 64 * b + 16, half);
        __m512 w2 = unpack_half(w + 64 * b + 32, half), w3 = unpack_half(w + 64 * b + 48, half);
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

/* The even pass of the FIRST activation tile of a chunk, decoding as it goes: block b of row i comes
   from the packed bytes (row i at packed + i * row_bytes, its scales at scales + i * n_blocks), its even
   half is multiplied at once and both halves are stored to the panel (w) as bf16 pairs for the other
   passes, so the decode overlaps the FMAs instead of running as its own phase (it cost 27 % of the
   time at n = 16 as a phase, 1 thread). pf: the next panel's rows, one line prefetched per block. */
static inline __attribute__((always_inline)) void micro_decode(const uint8_t *packed, size_t row_bytes,
                                                               const uint8_t *scales, size_t n_blocks, uint32_t *w,
                                                               const float *x0, float *acc, size_t n,
                                                               const int NB, int first, const uint8_t *pf) {
    FOR_J(ACC_DECL)
    FOR_J(ACC_LOAD)
    for (size_t b = 0; b < n; b++) {
        /* one line of the next panel's 4 rows per block, spread out: a burst of prefetches stalls */
        _mm_prefetch((const char *)(pf + (b & 3) * row_bytes + (b >> 2) * 64), _MM_HINT_T0);
        __m512 wv[4];
        for (int i = 0; i < 4; i++) {
            __m512i q = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(packed + i * row_bytes + 16 * b)));
            __m512 t = _mm512_load_ps(k3_scaled_e2m1[scales[i * n_blocks + b]]);
            wv[i] = _mm512_permutexvar_ps(q, t);
            /* both halves as bf16 pairs (exact: every scaled weight has zero low 16 bits): one store, not two */
            __m512i odd = _mm512_castps_si512(_mm512_permutexvar_ps(_mm512_srli_epi32(q, 4), t));
            _mm512_store_si512((void *)(w + 64 * b + 16 * i), _mm512_or_si512(_mm512_srli_epi32(_mm512_castps_si512(wv[i]), 16), odd));
        }
        __m512 w0 = wv[0], w1 = wv[1], w2 = wv[2], w3 = wv[3];
        FOR_J(ACC_FMA)
    }
    FOR_J(ACC_STORE)
}

#define MICRO_DECODE(NB)                                                                                       \
    static void micro_decode##NB(const uint8_t *packed, size_t row_bytes, const uint8_t *scales, size_t n_blocks, \
                                 uint32_t *w, const float *x, float *acc, size_t n, int first, const uint8_t *pf) { \
        micro_decode(packed, row_bytes, scales, n_blocks, w, x, acc, n, NB, first, pf);                            \
    }
MICRO_DECODE(6)
MICRO_DECODE(5)
MICRO_DECODE(4)
MICRO_DECODE(3)
MICRO_DECODE(2)
MICRO_DECODE(1)
typedef void (*micro_decode_fn)(const uint8_t *, size_t, const uint8_t *, size_t, uint32_t *, const float *,
                                float *, size_t, int, const uint8_t *);
static const micro_decode_fn micro_decode_by_nb[7] = {0,              micro_decode1, micro_decode2, micro_decode3,
                                                      micro_decode4, micro_decode5, micro_decode6};

#define MICRO(NB, H)                                                                                           \
    static void micro##NB##_##H(const uint32_t *w, const float *x, float *acc, size_t n, int first, int fold,    \
                                float *y, size_t ldy) {                                                          \
        micro(w, H, x, acc, n, NB, first, fold, y, ldy);                                                         \
    }
MICRO(6, 0)
MICRO(5, 0)
MICRO(4, 0)
MICRO(3, 0)
MICRO(2, 0)
MICRO(1, 0)
MICRO(6, 1)
MICRO(5, 1)
MICRO(4, 1)
MICRO(3, 1)
MICRO(2, 1)
MICRO(1, 1)
typedef void (*micro_fn)(const uint32_t *, const float *, float *, size_t, int, int, float *, size_t);
static const micro_fn micro_by_nb[2][7] = {{0, micro1_0, micro2_0, micro3_0, micro4_0, micro5_0, micro6_0},
                                           {0, micro1_1, micro2_1, micro3_1, micro4_1, micro5_1, micro6_1}};

/* Activation tiles: 6 wide while more than 8 are left, then 4s, then the rest (8 -> 4 + 4, 16 -> 6 + 6 + 4). */
static int tile_width(size_t left) {
    if (left > 8 || left == 6) return 6;
    if (left >= 4) return left == 5 ? 5 : 4;
    return (int)left;
}

/* The activations of one batch chunk, re-laid for the micro-kernel: per column chunk, per lane half,
   per activation tile (widths from tile_width), per block, the tile's rows' 16 lanes one after another,
   so each micro pass reads one sequential stream. n_blocks * 32 * nb floats. */
static void pack_activations(const float *xs, size_t cols, size_t nb, float *xp) {
    const size_t n_blocks = cols / 32;
    float *o = xp;
    for (size_t c0 = 0; c0 < n_blocks; c0 += CHUNK_BLOCKS) {
        size_t n = n_blocks - c0 < CHUNK_BLOCKS ? n_blocks - c0 : CHUNK_BLOCKS;
        for (int h = 0; h < 2; h++)
            for (size_t j0 = 0; j0 < nb;) {
                size_t w = (size_t)tile_width(nb - j0);
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
   rows [r0 + mc, r_end) follow (their first panel is prefetched). Per column chunk: the even half's
   passes over every tile, then the odd half's (the odd passes of the last chunk fold into y). */
static void row_block(const k3_mxfp4_matrix *m, const float *xp, float *y, size_t nb, size_t r0, size_t mc,
                      size_t r_end, uint32_t *panel, float *acc) {
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
        for (int h = 0; h < 2; h++) {
            for (size_t j = 0; j < nb;) {
                const int w = tile_width(nb - j);
                for (size_t g = 0; g < mc / 4; g++) {
                    uint32_t *wg = panel + g * n * 64;
                    float *ag = acc + (g * 4 * BATCH_CHUNK + j) * 32 + 16 * h;
                    float *yg = y + j * m->rows + r0 + g * 4;
                    if (h == 0 && j == 0) { /* the first pass decodes the group (both halves); the next panel's bytes are prefetched */
                        const uint8_t *pf = m->packed + (r0 + 4 * g) * (cols / 2) + 16 * c0; /* harmless */
                        if (nx.packed && 4 * g < nx.rows) {
                            pf = nx.packed + 4 * g * (cols / 2);
                            for (size_t i = 4 * g; i < 4 * g + 4 && i < nx.rows; i++)
                                _mm_prefetch((const char *)(nx.scales + i * n_blocks), _MM_HINT_T0);
                        }
                        micro_decode_by_nb[w](m->packed + (r0 + 4 * g) * (cols / 2) + 16 * c0, cols / 2,
                                              m->scales + (r0 + 4 * g) * n_blocks + c0, n_blocks, wg, x, ag, n, first, pf);
                    } else {
                        micro_by_nb[h][w](wg, x, ag, n, first, last && h == 1, yg, m->rows);
                    }
                }
                x += n * 16 * (size_t)w;
                j += (size_t)w;
            }
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
    const size_t panel_floats = MC * CHUNK_BLOCKS * 16, acc_floats = MC * BATCH_CHUNK * 32;
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
    uint32_t *panel = (uint32_t *)scratch;
    float *acc = scratch + panel_floats, *xp = acc + acc_floats;
    for (size_t b0 = 0; b0 < batch; b0 += BATCH_CHUNK) {
        const size_t nb = batch - b0 < BATCH_CHUNK ? batch - b0 : BATCH_CHUNK;
        pack_activations(xs + b0 * m->cols, m->cols, nb, xp);
        for (size_t r = r0; r < r_end; r += MC)
            row_block(m, xp, y + b0 * m->rows, nb, r, r_end - r < MC ? r_end - r : MC, r_end, panel, acc);
    }
    return r_end;
}
