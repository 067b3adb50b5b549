/*
 * gemm_rounded_avx512bf16.c: the opt-in ROUNDED bf16 GEMM (gemm_rounded.h) on AVX512-BF16:
 * vdpbf16ps on bf16 weights x bf16-rounded activations, the way ggml's bf16 matmul works. NOT the
 * exact order of gemm.h: per (b, r), lane j of one zmm accumulates, per 32 k values,
 *   lane[j] += w[k+2j+1] x[k+2j+1]; lane[j] += w[k+2j] x[k+2j]   (vdpbf16ps; DAZ/FTZ, RNE)
 * in k order, then the 16 lanes fold in the k3_lanes16 tree. The tail (cols % 32) is zero padded
 * (0 x 0 adds +0). Deterministic for any thread count (threads split rows; blocking over K keeps
 * each chain, parked in the scratch as in gemm_blocked_avx512.c).
 * Micro-kernel: 4 weight rows x 6 batch rows, 24 accumulators; per 32 k values 4 + 6 loads and 24
 * vdpbf16ps, no widening at all. Near-equal batch tiles of at most NR rows, and the next MC x KC
 * weight block prefetched at an even rate while this one runs (12288x7168 n = 32, 2 threads: 338 ->
 * 446 GFLOP/s in one A/B run).
 */
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16")
#include <immintrin.h>
#include <stdint.h>
#include "k3_lane_sums.h"
#include "gemm_blocked.h"
#include "gemm_rounded.h"

#define INLINE static inline __attribute__((always_inline))
#define MR 4
#define NR 6
#define KC 2048 /* bf16 values per K block, a multiple of 32 */
#define MC 64

INLINE __m512 dp(__m512 acc, __m512i w, __m512i x) {
    return _mm512_dpbf16_ps(acc, (__m512bh)w, (__m512bh)x);
}

/* Software prefetch of the next weight block, spread over this block's micro calls (as in
   gemm_blocked_avx512.c): `per` lines every `every` steps, row after row. */
typedef struct {
    const char *row;
    size_t ld, col, end, rows_left;
    unsigned per, every, countdown;
} prefetch_plan;

INLINE void prefetch_step(prefetch_plan *pf) {
    if (--pf->countdown) return;
    pf->countdown = pf->every;
    for (unsigned j = 0; j < pf->per && pf->row; j++) {
        _mm_prefetch(pf->row + pf->col, _MM_HINT_T0);
        pf->col += 64;
        if (pf->col >= pf->end) {
            pf->col = 0;
            pf->row = pf->rows_left-- ? pf->row + pf->ld : NULL;
        }
    }
}

INLINE void micro(const int R, const int T, const uint16_t *w, size_t ld, const uint16_t *x, size_t ldx, size_t nv,
                  __mmask32 tail, int first, int last, float *acc, size_t acc_ts, float *y, size_t ldy,
                  prefetch_plan *pfp) {
    __m512 a[NR][MR];
    prefetch_plan pf = pfp ? *pfp : (prefetch_plan){0};
    _Pragma("GCC unroll 8") for (int t = 0; t < T; t++)
        _Pragma("GCC unroll 8") for (int i = 0; i < R; i++)
            a[t][i] = first ? _mm512_setzero_ps() : _mm512_load_ps(acc + t * acc_ts + i * 16);
    for (size_t v = 0; v < nv; v++) {
        const size_t k = v * 32;
        __m512i wv[MR];
        if (pf.row) prefetch_step(&pf);
        _Pragma("GCC unroll 8") for (int i = 0; i < R; i++) wv[i] = _mm512_loadu_si512(w + i * ld + k);
        _Pragma("GCC unroll 8") for (int t = 0; t < T; t++) {
            __m512i xv = _mm512_loadu_si512(x + t * ldx + k);
            _Pragma("GCC unroll 8") for (int i = 0; i < R; i++) a[t][i] = dp(a[t][i], wv[i], xv);
        }
    }
    if (pfp) *pfp = pf;
    if (tail) {
        const size_t k = nv * 32;
        __m512i wv[MR];
        _Pragma("GCC unroll 8") for (int i = 0; i < R; i++) wv[i] = _mm512_maskz_loadu_epi16(tail, w + i * ld + k);
        _Pragma("GCC unroll 8") for (int t = 0; t < T; t++) {
            __m512i xv = _mm512_maskz_loadu_epi16(tail, x + t * ldx + k);
            _Pragma("GCC unroll 8") for (int i = 0; i < R; i++) a[t][i] = dp(a[t][i], wv[i], xv);
        }
    }
    _Pragma("GCC unroll 8") for (int t = 0; t < T; t++)
        _Pragma("GCC unroll 8") for (int i = 0; i < R; i++) {
            if (last) y[t * ldy + i] = k3_lanes16_sum_avx512(a[t][i]);
            else _mm512_store_ps(acc + t * acc_ts + i * 16, a[t][i]);
        }
}

typedef void (*micro_fn)(const uint16_t *w, size_t ld, const uint16_t *x, size_t ldx, size_t nv, __mmask32 tail,
                         int first, int last, float *acc, size_t acc_ts, float *y, size_t ldy, prefetch_plan *pf);

#define MICRO(R, T)                                                                                                  \
    static void m_##R##_##T(const uint16_t *w, size_t ld, const uint16_t *x, size_t ldx, size_t nv, __mmask32 tail, \
                            int first, int last, float *acc, size_t acc_ts, float *y, size_t ldy, prefetch_plan *pf) {\
        micro(R, T, w, ld, x, ldx, nv, tail, first, last, acc, acc_ts, y, ldy, pf);                                 \
    }
#define MICRO_ROW(R) MICRO(R, 1) MICRO(R, 2) MICRO(R, 3) MICRO(R, 4) MICRO(R, 5) MICRO(R, 6)
MICRO_ROW(1) MICRO_ROW(2) MICRO_ROW(3) MICRO_ROW(4)
#define ROW_TABLE(R) {m_##R##_1, m_##R##_2, m_##R##_3, m_##R##_4, m_##R##_5, m_##R##_6}
static const micro_fn table[MR][NR] = {ROW_TABLE(1), ROW_TABLE(2), ROW_TABLE(3), ROW_TABLE(4)};

void k3_gemm_bf16_rounded_rows_avx512bf16(const uint16_t *w, size_t ld, const uint16_t *xb, size_t ldx, float *y,
                                          size_t ldy, size_t cols, size_t batch, size_t row_begin, size_t row_end) {
    const size_t n_kb = cols <= KC ? 1 : (cols + KC - 1) / KC;
    const size_t tiles = (batch + NR - 1) / NR; /* near-equal batch tiles of at most NR rows */
    float *acc = NULL;
    const size_t acc_ts = MC * 16;
    if (n_kb > 1) {
        acc = k3_gemm_scratch(batch * acc_ts * sizeof(float));
        if (!acc) { /* out of memory: one K block per micro call (same chains, same bits) */
            for (size_t r = row_begin; r < row_end; r++)
                for (size_t b = 0; b < batch; b++)
                    table[0][0](w + r * ld, ld, xb + b * ldx, ldx, cols / 32,
                                (__mmask32)((1ull << (cols % 32)) - 1), 1, 1, NULL, 0, y + b * ldy + r, ldy, NULL);
            return;
        }
    }
    for (size_t r0 = row_begin; r0 < row_end; r0 += MC) {
        const size_t mc = row_end - r0 < MC ? row_end - r0 : MC;
        for (size_t kb = 0; kb < n_kb; kb++) {
            const size_t k0 = kb * KC;
            const size_t kc = cols - k0 < KC ? cols - k0 : KC;
            const __mmask32 tail = (__mmask32)((1ull << (kc % 32)) - 1);
            const int first = kb == 0, last = kb + 1 == n_kb;
            /* the block after this one: the same rows in the next K block, else the next rows at k = 0 */
            size_t nr0 = r0, nk0 = k0 + KC, nmc = mc;
            if (kb + 1 == n_kb) nr0 = r0 + MC, nk0 = 0, nmc = nr0 < row_end ? row_end - nr0 : 0;
            if (nmc > MC) nmc = MC;
            prefetch_plan pf = {0};
            const size_t nv = kc / 32;
            if (nmc) {
                const size_t nkc = cols - nk0 < KC ? cols - nk0 : KC;
                const char *base = (const char *)(w + nr0 * ld + nk0);
                const size_t lines = nmc * ((nkc * 2 + 63) / 64 + 1);
                const size_t steps = tiles * ((mc + MR - 1) / MR) * (nv ? nv : 1);
                pf.row = (const char *)((uintptr_t)base & ~(uintptr_t)63);
                pf.ld = ld * 2;
                pf.end = (size_t)(base - pf.row) + nkc * 2;
                pf.rows_left = nmc - 1;
                pf.per = (unsigned)((lines + steps - 1) / steps);
                pf.every = (unsigned)(steps * pf.per / lines);
                if (pf.every < 1) pf.every = 1;
                pf.countdown = pf.every;
            }
            for (size_t t = 0; t < tiles; t++) {
                const size_t t0 = batch * t / tiles, tn = batch * (t + 1) / tiles - t0;
                for (size_t i0 = 0; i0 < mc; i0 += MR) {
                    const size_t rn = mc - i0 < MR ? mc - i0 : MR;
                    table[rn - 1][tn - 1](w + (r0 + i0) * ld + k0, ld, xb + t0 * ldx + k0, ldx, nv, tail, first,
                                          last, acc ? acc + t0 * acc_ts + i0 * 16 : NULL, acc_ts,
                                          y + t0 * ldy + r0 + i0, ldy, &pf);
                }
            }
        }
    }
}
