/*
 * gemm_blocked_avx512.c: the register- and cache-blocked AVX-512 GEMM for batches (prefill), in
 * the exact order of gemm.h.
 *
 * Every (b, r) keeps ONE zmm of 16 lane partials, lane[k % 16], fed in k order; the k range is cut
 * into blocks of KC (a multiple of 16) and the lane vectors are parked in a scratch buffer between
 * blocks (a store and a reload, which changes no bit), so blocking over K leaves each lane's FMA
 * chain exactly the scalar one. The fold (k3_lanes16_sum_avx512) runs once, after the last block.
 * The tail vector (cols % 16 values) is masked and only ever in the last block.
 *
 * Micro-kernel: MR = 6 weight rows x NR = 4 batch rows = 24 accumulators; per 16 k values 6 weight
 * vectors and 4 activation vectors feed 24 FMAs.
 * Loop order per task (a range of rows): row blocks of MC rows; K blocks of KC; groups of MR rows;
 * batch tiles of at most NR rows, near-equal (5 = 3 + 2). The group's weights stay in L1 while every
 * batch tile streams past them: from 3 batch tiles on, the first tile reads the bf16 rows, widens them
 * and also stores them to a 24 KiB f32 panel (L1-resident: the one buffer is reused for every group),
 * and the other tiles read the panel, so each weight vector is widened once per call instead of once
 * per batch tile.
 * The operand streamed from L2 is the activations (the n x KC block, <= 256 KiB, L2-resident), 4
 * vectors per 24 FMAs. Why that way round (C harness, Xeon with AVX-512, 2 vCPU, 2026-12-02): with
 * the activations in L1 and the weights streamed (the earlier 4 x 6 tile), every batch tile widened
 * each weight vector again (vpermw takes the same port as the second FMA on this core: one slot in
 * seven) or, widened once to an f32 panel in L2, paid its write-allocate traffic; in-cache the 4 x 6
 * ran 0.64-0.73 of the per-core FMA peak.
 * While a block runs, the micro calls prefetch the NEXT block line by line at an even rate
 * (prefetch_plan): without it the whole block came from DRAM in a burst during the first batch tile
 * (Zen 5: n = 16 ran 0.39-0.51 of the FMA peak instead of 0.54-0.72 at 12288x7168 / 33792x7168, 2
 * threads). The prefetch asks for L2 (prefetcht2), not L1: the next block is not read until this one
 * is done.
 */
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl")
#include <immintrin.h>
#include <stdint.h>
#include <stdlib.h>
#include "k3_lane_sums.h"
#include "gemm.h"
#include "gemm_blocked.h"

#define INLINE static inline __attribute__((always_inline))
#ifndef MR
#define MR 6 /* weight rows of the micro-kernel */
#endif
#ifndef NR
#define NR 4 /* batch rows of the micro-kernel */
#endif

/*
 * 16 bf16 weights to f32 with ONE op: a zero-masked word permute puts weight j in the high half of
 * dword j (exactly the bits vpmovzxwd + vpslld give, one vector op instead of two; in cache the
 * 4x6 tile ran 1.05-1.14x with it, A/B below). Full vectors use a plain load (no mask).
 */
INLINE __m512 load_w(const void *w, size_t idx, __mmask16 m, const int bf16) {
    if (bf16) {
        const __m256i raw = m == 0xFFFF ? _mm256_loadu_si256((const __m256i *)((const uint16_t *)w + idx))
                                        : _mm256_maskz_loadu_epi16(m, (const uint16_t *)w + idx);
        const __m512i to_high = _mm512_set_epi16(15, 0, 14, 0, 13, 0, 12, 0, 11, 0, 10, 0, 9, 0, 8, 0,
                                                 7, 0, 6, 0, 5, 0, 4, 0, 3, 0, 2, 0, 1, 0, 0, 0);
        return _mm512_castsi512_ps(
            _mm512_maskz_permutexvar_epi16(0xAAAAAAAAu, to_high, _mm512_castsi256_si512(raw)));
    }
    return _mm512_maskz_loadu_ps(m, (const float *)w + idx);
}

/*
 * Software prefetch of the NEXT weight block (the MC rows x KC values the loop reaches after this
 * one), spread evenly over the micro calls of this block (`per` lines every `every` k steps, row
 * after row), so DRAM is read at an even rate instead of in a burst when a block starts.
 */
typedef struct {
    const char *row;  /* the row being prefetched, or NULL when done / nothing to do */
    size_t ld;        /* bytes between rows */
    size_t col, end;  /* next byte offset in the row, end of the row segment */
    size_t rows_left; /* rows after this one */
    unsigned per, every, countdown;
} prefetch_plan;

INLINE void prefetch_step(prefetch_plan *pf) {
    if (--pf->countdown) return;
    pf->countdown = pf->every;
    for (unsigned j = 0; j < pf->per && pf->row; j++) {
        _mm_prefetch(pf->row + pf->col, _MM_HINT_T2); /* to L2 only: T0 filled L1 with the NEXT block */
        pf->col += 64;
        if (pf->col >= pf->end) {
            pf->col = 0;
            pf->row = pf->rows_left-- ? pf->row + pf->ld : NULL;
        }
    }
}

/*
 * Where a micro call reads its weights (`mode`):
 *   ROWS:  row-major rows of W (w, ld apart), bf16 widened in the loop or f32;
 *   PACK:  bf16 rows of W like ROWS, and every widened vector is also stored to the f32 panel;
 *   PANEL: the f32 panel a PACK call of the same group wrote: step v, row i at w + (v * MR + i) * 16.
 */
enum { ROWS = 0, PACK = 1, PANEL = 2 };
/* The panel from 3 batch tiles on (n >= 9): at 2 tiles storing it cost as much as widening again
   (3072x3584 n = 8, 1 thread: 0.89x of the 4 x 6 kernel with it, 1.00x without). */
#define PANEL_MIN_TILES 2
#define X_AHEAD 4 /* steps of 16 activations prefetched ahead of the FMAs (the operand read from L2) */

/* The R weight vectors of step v (m: its lanes) as f32, from where `mode` says; PACK also stores them. */
INLINE void weights(const int R, const int bf16, const int mode, const void *w, size_t ld, float *panel, size_t v,
                    __mmask16 m, __m512 wv[MR]) {
    _Pragma("GCC unroll 8")
    for (int i = 0; i < R; i++) {
        if (mode == PANEL) {
            wv[i] = _mm512_load_ps((const float *)w + (v * MR + i) * 16);
        } else {
            wv[i] = load_w(w, i * ld + v * 16, m, bf16);
        }
        if (mode == PACK) _mm512_store_ps(panel + (v * MR + i) * 16, wv[i]);
    }
}

/*
 * R rows x T batch rows (x, ldx apart) over nv full vectors + an optional masked tail (tail != 0).
 * acc[t * acc_ts + i * 16] holds the lane vector of (t, i) between K blocks.
 */
INLINE void micro(const int R, const int T, const int bf16, const int mode, const void *w, size_t ld, float *panel,
                  const float *x, size_t ldx, size_t nv, __mmask16 tail, int first, int last, float *acc,
                  size_t acc_ts, float *y, size_t ldy, prefetch_plan *pfp) {
    __m512 a[NR][MR];
    prefetch_plan pf = *pfp;
    _Pragma("GCC unroll 8")
    for (int t = 0; t < T; t++)
        _Pragma("GCC unroll 8")
        for (int i = 0; i < R; i++)
            a[t][i] = first ? _mm512_setzero_ps() : _mm512_load_ps(acc + t * acc_ts + i * 16);
    for (size_t v = 0; v < nv; v++) {
        const size_t k = v * 16;
        __m512 wv[MR];
        if (pf.row) prefetch_step(&pf);
        weights(R, bf16, mode, w, ld, panel, v, 0xFFFF, wv);
        _Pragma("GCC unroll 8")
        for (int t = 0; t < T; t++) {
            _mm_prefetch((const char *)(x + t * ldx + k + X_AHEAD * 16), _MM_HINT_T0);
            __m512 xv = _mm512_loadu_ps(x + t * ldx + k);
            __asm__("" : "+v"(xv)); /* in a register: gcc would otherwise fold a reload into each of the R FMAs */
            _Pragma("GCC unroll 8")
            for (int i = 0; i < R; i++) a[t][i] = _mm512_fmadd_ps(wv[i], xv, a[t][i]);
        }
    }
    *pfp = pf;
    if (tail) {
        const size_t k = nv * 16;
        __m512 wv[MR];
        weights(R, bf16, mode, w, ld, panel, nv, tail, wv);
        _Pragma("GCC unroll 8")
        for (int t = 0; t < T; t++) {
            __m512 xv = _mm512_maskz_loadu_ps(tail, x + t * ldx + k);
            _Pragma("GCC unroll 8")
            for (int i = 0; i < R; i++) a[t][i] = _mm512_mask3_fmadd_ps(wv[i], xv, a[t][i], tail);
        }
    }
    if (last) {
        _Pragma("GCC unroll 8")
        for (int t = 0; t < T; t++)
            _Pragma("GCC unroll 8")
            for (int i = 0; i < R; i++) y[t * ldy + i] = k3_lanes16_sum_avx512(a[t][i]);
    } else {
        _Pragma("GCC unroll 8")
        for (int t = 0; t < T; t++)
            _Pragma("GCC unroll 8")
            for (int i = 0; i < R; i++) _mm512_store_ps(acc + t * acc_ts + i * 16, a[t][i]);
    }
}

typedef void (*micro_fn)(const void *w, size_t ld, float *panel, const float *x, size_t ldx, size_t nv,
                         __mmask16 tail, int first, int last, float *acc, size_t acc_ts, float *y, size_t ldy,
                         prefetch_plan *pf);

#define MICRO(R, T, B, MODE, NAME)                                                                                  \
    static void NAME(const void *w, size_t ld, float *panel, const float *x, size_t ldx, size_t nv, __mmask16 tail, \
                     int first, int last, float *acc, size_t acc_ts, float *y, size_t ldy, prefetch_plan *pf) {   \
        micro(R, T, B, MODE, w, ld, panel, x, ldx, nv, tail, first, last, acc, acc_ts, y, ldy, pf);                \
    }
#define MICRO_ROW(R, B, MODE, P)                                                                                     \
    MICRO(R, 1, B, MODE, P##_##R##_1) MICRO(R, 2, B, MODE, P##_##R##_2) MICRO(R, 3, B, MODE, P##_##R##_3)           \
    MICRO(R, 4, B, MODE, P##_##R##_4)
#define MICRO_TABLE(B, MODE, P)                                                                                      \
    MICRO_ROW(1, B, MODE, P) MICRO_ROW(2, B, MODE, P) MICRO_ROW(3, B, MODE, P) MICRO_ROW(4, B, MODE, P)              \
    MICRO_ROW(5, B, MODE, P) MICRO_ROW(6, B, MODE, P)
MICRO_TABLE(1, ROWS, mb)
MICRO_TABLE(0, ROWS, mf)
MICRO_TABLE(1, PACK, mk)
MICRO_TABLE(0, PANEL, mp)

#define ROW_TABLE(P, R) {P##_##R##_1, P##_##R##_2, P##_##R##_3, P##_##R##_4}
#define TABLE(P) {ROW_TABLE(P, 1), ROW_TABLE(P, 2), ROW_TABLE(P, 3), ROW_TABLE(P, 4), ROW_TABLE(P, 5), ROW_TABLE(P, 6)}
static const micro_fn micro_bf16[MR][NR] = TABLE(mb);
static const micro_fn micro_f32[MR][NR] = TABLE(mf);
static const micro_fn micro_pack[MR][NR] = TABLE(mk);
static const micro_fn micro_panel[MR][NR] = TABLE(mp);

/* ---------------------------------------------------------------- blocking */

#ifndef KC
#define KC 1024 /* multiple of 16 */
#endif
#ifndef MC
#define MC 48 /* multiple of MR */
#endif

/* Batch tiles of near-equal size, none above NR (5 = 3 + 2, 16 = 4 x 4). */
static size_t batch_tiles(size_t batch) { return (batch + NR - 1) / NR; }
static size_t tile_begin(size_t batch, size_t tiles, size_t t) { return batch * t / tiles; }

static void gemm_blocked(const int bf16, const void *w, size_t ld, const float *x, size_t ldx, float *y, size_t ldy,
                         size_t cols, size_t batch, size_t row_begin, size_t row_end) {
    const size_t esize = bf16 ? 2 : 4;
    const size_t n_kb = cols <= KC ? 1 : (cols + KC - 1) / KC;
    const size_t tiles = batch_tiles(batch);
    /* bf16 with 3+ batch tiles: the first tile widens the group into the f32 panel, the others read it */
    const int use_panel = bf16 && tiles > PANEL_MIN_TILES;
    const size_t acc_ts = MC * 16; /* floats between batch rows in the scratch */
    const size_t acc_floats = n_kb > 1 ? batch * acc_ts : 0;
    const size_t panel_floats = use_panel ? MR * (KC + 16) : 0; /* + 16: the masked tail vector */
    float *acc = NULL, *panel = NULL;
    if (acc_floats + panel_floats) {
        float *scratch = k3_gemm_scratch((acc_floats + panel_floats) * sizeof(float));
        if (!scratch) { /* out of memory: the unblocked kernel (same order, same bits) */
            (bf16 ? k3_gemm_bf16_rows_avx512 : k3_gemm_f32_rows_avx512)(w, ld, x, ldx, y, ldy, cols, batch, row_begin,
                                                                        row_end);
            return;
        }
        panel = scratch;
        if (acc_floats) acc = scratch + panel_floats;
    }
    const char *wb = w;
    for (size_t r0 = row_begin; r0 < row_end; r0 += MC) {
        const size_t mc = row_end - r0 < MC ? row_end - r0 : MC;
        for (size_t kb = 0; kb < n_kb; kb++) {
            const size_t k0 = kb * KC;
            const size_t kc = cols - k0 < KC ? cols - k0 : KC;
            const size_t nv = kc / 16;
            const __mmask16 tail = (__mmask16)((1u << (kc % 16)) - 1);
            const int first = kb == 0, last = kb + 1 == n_kb;
            /* the block after this one: the same rows in the next K block, else the next rows at k = 0 */
            size_t nr0 = r0, nk0 = k0 + KC, nmc = mc;
            if (kb + 1 == n_kb) nr0 = r0 + MC, nk0 = 0, nmc = nr0 < row_end ? row_end - nr0 : 0;
            if (nmc > MC) nmc = MC;
            prefetch_plan pf = {0};
            if (nmc) {
                const size_t nkc = cols - nk0 < KC ? cols - nk0 : KC;
                const char *base = wb + (nr0 * ld + nk0) * esize;
                const size_t lines = nmc * ((nkc * esize + 63) / 64 + 1);
                const size_t steps = tiles * ((mc + MR - 1) / MR) * (nv ? nv : 1);
                pf.row = (const char *)((uintptr_t)base & ~(uintptr_t)63);
                pf.ld = ld * esize;
                pf.end = (size_t)(base - pf.row) + nkc * esize;
                pf.rows_left = nmc - 1;
                pf.per = (unsigned)((lines + steps - 1) / steps);
                pf.every = (unsigned)(steps * pf.per / lines);
                if (pf.every < 1) pf.every = 1;
                pf.countdown = pf.every;
            }
            for (size_t i0 = 0; i0 < mc; i0 += MR) {
                const size_t rn = mc - i0 < MR ? mc - i0 : MR;
                const char *wp = wb + ((r0 + i0) * ld + k0) * esize;
                for (size_t t = 0; t < tiles; t++) {
                    const size_t t0 = tile_begin(batch, tiles, t), tn = tile_begin(batch, tiles, t + 1) - t0;
                    const micro_fn(*table)[NR] = !use_panel ? (bf16 ? micro_bf16 : micro_f32)
                                                 : t == 0   ? micro_pack
                                                            : micro_panel;
                    table[rn - 1][tn - 1](use_panel && t > 0 ? (const void *)panel : (const void *)wp, ld, panel,
                                          x + t0 * ldx + k0, ldx, nv, tail, first, last,
                                          acc ? acc + t0 * acc_ts + i0 * 16 : NULL, acc_ts, y + t0 * ldy + r0 + i0,
                                          ldy, &pf);
                }
            }
        }
    }
}

void k3_gemm_bf16_blocked_avx512(const void *w, size_t ld, const float *x, size_t ldx, float *y, size_t ldy,
                                 size_t cols, size_t batch, size_t row_begin, size_t row_end) {
    gemm_blocked(1, w, ld, x, ldx, y, ldy, cols, batch, row_begin, row_end);
}

void k3_gemm_f32_blocked_avx512(const void *w, size_t ld, const float *x, size_t ldx, float *y, size_t ldy,
                                size_t cols, size_t batch, size_t row_begin, size_t row_end) {
    gemm_blocked(0, w, ld, x, ldx, y, ldy, cols, batch, row_begin, row_end);
}
