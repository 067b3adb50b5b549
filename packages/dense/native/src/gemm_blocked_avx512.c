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
 * Micro-kernel: MR weight rows x NR batch rows = 24 accumulators. Per 16 k values it loads and
 * widens MR weight vectors once and uses each against NR activation vectors (and each activation
 * vector against MR weight vectors).
 * Loop order per task (a range of rows): row blocks of MC rows; K blocks of KC; batch tiles of at
 * most NR rows, near-equal (16 = 6 + 5 + 5); row tiles of MR rows. The NR x KC activation panel
 * (24 KiB at NR = 6, KC = 1024) stays in L1 while the MC x KC weight block (bf16: 128 KiB) stays in
 * L2 for every batch tile, so weights come from DRAM once per call. While a block runs, the micro
 * calls prefetch the NEXT block line by line at an even rate (prefetch_plan): without it the whole
 * block came from DRAM in a burst during the first batch tile (n = 16 ran 0.39-0.51 of the FMA
 * peak instead of 0.54-0.72 at 12288x7168 / 33792x7168, 2 threads). The prefetch asks for L2
 * (prefetcht2), not L1: the next block is not read until this one is done, and in L1 it only evicted
 * the activation panel. vpermw widening + the L2 hint, A/B in one exclusive hold (2026-12-02 04:40 UTC,
 * 2 threads, interleaved, best of >= 0.15 s each): 768x7168 (L3-hot) 1.06-1.10x, 12288x7168
 * 1.01-1.08x, 7168x33792 1.08-1.10x at n = 16 / 32 / 64, same bits. Tried and dropped in the same
 * stretch: KC 2048 / MC 32 (0.93-1.03x), KC 512 / MC 128 (0.93-0.99x), a 3x8 tile (0.45x: gcc
 * turned every activation into a memory operand, 27 loads per 24 FMAs, and spilled).
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
#define MR 4
#endif
#ifndef NR
#define NR 6
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
 * R rows (w, ld apart) x T batch rows (x, ldx apart) over nv full vectors + an optional masked
 * tail (tail != 0). acc[t * acc_ts + i * 16] holds the lane vector of (t, i) between K blocks.
 */
INLINE void micro(const int R, const int T, const int bf16, const void *w, size_t ld, const float *x, size_t ldx,
                  size_t nv, __mmask16 tail, int first, int last, float *acc, size_t acc_ts, float *y, size_t ldy,
                  prefetch_plan *pfp) {
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
        _Pragma("GCC unroll 8")
        for (int i = 0; i < R; i++) wv[i] = load_w(w, i * ld + k, 0xFFFF, bf16);
        _Pragma("GCC unroll 8")
        for (int t = 0; t < T; t++) {
            __m512 xv = _mm512_loadu_ps(x + t * ldx + k);
            _Pragma("GCC unroll 8")
            for (int i = 0; i < R; i++) a[t][i] = _mm512_fmadd_ps(wv[i], xv, a[t][i]);
        }
    }
    *pfp = pf;
    if (tail) {
        const size_t k = nv * 16;
        __m512 wv[MR];
        _Pragma("GCC unroll 8")
        for (int i = 0; i < R; i++) wv[i] = load_w(w, i * ld + k, tail, bf16);
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

typedef void (*micro_fn)(const void *w, size_t ld, const float *x, size_t ldx, size_t nv, __mmask16 tail, int first,
                         int last, float *acc, size_t acc_ts, float *y, size_t ldy, prefetch_plan *pf);

#define MICRO(R, T, B, NAME)                                                                                         \
    static void NAME(const void *w, size_t ld, const float *x, size_t ldx, size_t nv, __mmask16 tail, int first,    \
                     int last, float *acc, size_t acc_ts, float *y, size_t ldy, prefetch_plan *pf) {                \
        micro(R, T, B, w, ld, x, ldx, nv, tail, first, last, acc, acc_ts, y, ldy, pf);                              \
    }
#define MICRO_ROW(R, B, P)                                                                                           \
    MICRO(R, 1, B, P##_##R##_1) MICRO(R, 2, B, P##_##R##_2) MICRO(R, 3, B, P##_##R##_3)                             \
    MICRO(R, 4, B, P##_##R##_4) MICRO(R, 5, B, P##_##R##_5) MICRO(R, 6, B, P##_##R##_6)
MICRO_ROW(1, 1, mb) MICRO_ROW(2, 1, mb) MICRO_ROW(3, 1, mb) MICRO_ROW(4, 1, mb)
MICRO_ROW(1, 0, mf) MICRO_ROW(2, 0, mf) MICRO_ROW(3, 0, mf) MICRO_ROW(4, 0, mf)

#define ROW_TABLE(P, R) {P##_##R##_1, P##_##R##_2, P##_##R##_3, P##_##R##_4, P##_##R##_5, P##_##R##_6}
static const micro_fn micro_bf16[MR][NR] = {ROW_TABLE(mb, 1), ROW_TABLE(mb, 2), ROW_TABLE(mb, 3), ROW_TABLE(mb, 4)};
static const micro_fn micro_f32[MR][NR] = {ROW_TABLE(mf, 1), ROW_TABLE(mf, 2), ROW_TABLE(mf, 3), ROW_TABLE(mf, 4)};

/* ---------------------------------------------------------------- blocking */

#ifndef KC
#define KC 1024 /* multiple of 16 */
#endif
#ifndef MC
#define MC 64 /* multiple of MR */
#endif

/* Batch tiles of near-equal size, none above NR (8 = 4 + 4, 16 = 6 + 5 + 5). */
static size_t batch_tiles(size_t batch) { return (batch + NR - 1) / NR; }
static size_t tile_begin(size_t batch, size_t tiles, size_t t) { return batch * t / tiles; }

static void gemm_blocked(const int bf16, const void *w, size_t ld, const float *x, size_t ldx, float *y, size_t ldy,
                         size_t cols, size_t batch, size_t row_begin, size_t row_end) {
    const micro_fn(*table)[NR] = bf16 ? micro_bf16 : micro_f32;
    const size_t esize = bf16 ? 2 : 4;
    const size_t n_kb = cols <= KC ? 1 : (cols + KC - 1) / KC;
    const size_t tiles = batch_tiles(batch);
    float *acc = NULL;
    const size_t acc_ts = MC * 16; /* floats between batch rows in the scratch */
    if (n_kb > 1) {
        acc = k3_gemm_scratch(batch * acc_ts * sizeof(float));
        if (!acc) { /* out of memory: the unblocked kernel (same order, same bits) */
            (bf16 ? k3_gemm_bf16_rows_avx512 : k3_gemm_f32_rows_avx512)(w, ld, x, ldx, y, ldy, cols, batch, row_begin,
                                                                        row_end);
            return;
        }
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
            for (size_t t = 0; t < tiles; t++) {
                const size_t t0 = tile_begin(batch, tiles, t), tn = tile_begin(batch, tiles, t + 1) - t0;
                for (size_t i0 = 0; i0 < mc; i0 += MR) {
                    const size_t rn = mc - i0 < MR ? mc - i0 : MR;
                    const char *wp = wb + ((r0 + i0) * ld + k0) * esize;
                    table[rn - 1][tn - 1](wp, ld, x + t0 * ldx + k0, ldx, nv, tail, first, last,
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
