/*
 * gemm_blocked_avx2.c: the blocked batched GEMM at AVX2 + FMA, in the exact order of gemm.h (see
 * gemm_blocked_avx512.c for the scheme). Between K blocks the lane vectors are parked in the
 * per-thread scratch (no bit changes).
 *
 * bf16 weights: 16 weights (one 32-byte load) widen to f32 with two cheap ops instead of four:
 * `vpslld 16` gives the even ones (k = 0, 2, .., 14 of the 16-group) and `vpand 0xFFFF0000` the odd
 * ones (the AND runs on any vector pipe; vpmovzxwd + vpslld per 8 weights kept the shuffle pipes,
 * which this core shares with one FMA pipe, as busy as the FMAs: 0.50-0.59 of the FMA peak at
 * n = 16-64). The activations are therefore read from a copy laid out the same way
 * (k3_gemm_bf16_pack_x_avx2: per 16-group the 8 even values, then the 8 odd ones, rows padded to a
 * multiple of 16 with zeros), made once per call by gemm.c. Each (b, r) keeps two ymm, E (lanes
 * 0, 2, .., 14) and O (lanes 1, 3, .., 15), each one FMA chain per lane in k order; they are put
 * back in lane order (two unpacks and two lane permutes, moves only) before the 16-lane tree.
 * Micro-kernel: 2 weight rows x 3 batch rows = 12 accumulators, 2 widened weight vectors, one
 * activation vector and the AND mask: the 16 ymm.
 *
 * f32 weights: the natural order, MR = 2 rows x NR = 3 batch rows, lanes 0-7 / 8-15 in two ymm.
 * Tails (cols % 16 values) load through a zero-padded copy and blend, so lanes past cols keep their
 * value exactly (no 0 * x that could turn -0 into +0 or inf into NaN).
 */
#pragma GCC target("avx2,fma")
#include <immintrin.h>
#include <stdint.h>
#include <string.h>
#include "k3_lane_sums.h"
#include "gemm.h"
#include "gemm_blocked.h"

#define INLINE static inline __attribute__((always_inline))
#define MR 2
#define NR 3

INLINE __m256 load_w8(const void *w, size_t idx, const int bf16) {
    if (bf16) {
        __m128i raw = _mm_loadu_si128((const __m128i *)((const uint16_t *)w + idx));
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(raw), 16));
    }
    return _mm256_loadu_ps((const float *)w + idx);
}

/* The last n (< 16) values of a row from index idx, as f32, zero padded to 16. */
static void tail16(const void *p, size_t idx, size_t n, int bf16, float out[16]) {
    memset(out, 0, 16 * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        if (bf16) {
            uint32_t wide = (uint32_t)((const uint16_t *)p)[idx + i] << 16;
            memcpy(&out[i], &wide, sizeof wide);
        } else {
            out[i] = ((const float *)p)[idx + i];
        }
    }
}

/* R rows x T batch rows over nv full 16-vectors, then `tail_n` (< 16) more values. */
INLINE void micro(const int R, const int T, const int bf16, const void *w, size_t ld, const float *x, size_t ldx,
                  size_t nv, size_t tail_n, int first, int last, float *acc, size_t acc_ts, float *y, size_t ldy) {
    __m256 lo[NR][MR], hi[NR][MR];
    _Pragma("GCC unroll 8") for (int t = 0; t < T; t++) {
        _Pragma("GCC unroll 8") for (int i = 0; i < R; i++) {
            lo[t][i] = first ? _mm256_setzero_ps() : _mm256_load_ps(acc + t * acc_ts + i * 16);
            hi[t][i] = first ? _mm256_setzero_ps() : _mm256_load_ps(acc + t * acc_ts + i * 16 + 8);
        }
    }
    for (size_t v = 0; v < nv; v++) {
        const size_t k = v * 16;
        __m256 wv[MR];
        _Pragma("GCC unroll 8") for (int i = 0; i < R; i++) wv[i] = load_w8(w, i * ld + k, bf16);
        _Pragma("GCC unroll 8") for (int t = 0; t < T; t++) {
            __m256 xv = _mm256_loadu_ps(x + t * ldx + k);
            _Pragma("GCC unroll 8") for (int i = 0; i < R; i++) lo[t][i] = _mm256_fmadd_ps(wv[i], xv, lo[t][i]);
        }
        _Pragma("GCC unroll 8") for (int i = 0; i < R; i++) wv[i] = load_w8(w, i * ld + k + 8, bf16);
        _Pragma("GCC unroll 8") for (int t = 0; t < T; t++) {
            __m256 xv = _mm256_loadu_ps(x + t * ldx + k + 8);
            _Pragma("GCC unroll 8") for (int i = 0; i < R; i++) hi[t][i] = _mm256_fmadd_ps(wv[i], xv, hi[t][i]);
        }
    }
    if (tail_n) {
        const size_t k = nv * 16;
        int32_t bits[16];
        for (int j = 0; j < 16; j++) bits[j] = (size_t)j < tail_n ? -1 : 0;
        const __m256 ml = _mm256_castsi256_ps(_mm256_loadu_si256((const __m256i *)bits));
        const __m256 mh = _mm256_castsi256_ps(_mm256_loadu_si256((const __m256i *)(bits + 8)));
        float wb[MR][16], xb[16];
        _Pragma("GCC unroll 8") for (int i = 0; i < R; i++) tail16((const char *)w + (size_t)i * ld * (bf16 ? 2 : 4), k, tail_n, bf16, wb[i]);
        _Pragma("GCC unroll 8") for (int t = 0; t < T; t++) {
            tail16(x + t * ldx, k, tail_n, 0, xb);
            const __m256 xl = _mm256_loadu_ps(xb), xh = _mm256_loadu_ps(xb + 8);
            _Pragma("GCC unroll 8") for (int i = 0; i < R; i++) {
                lo[t][i] = _mm256_blendv_ps(lo[t][i], _mm256_fmadd_ps(_mm256_loadu_ps(wb[i]), xl, lo[t][i]), ml);
                hi[t][i] = _mm256_blendv_ps(hi[t][i], _mm256_fmadd_ps(_mm256_loadu_ps(wb[i] + 8), xh, hi[t][i]), mh);
            }
        }
    }
    _Pragma("GCC unroll 8") for (int t = 0; t < T; t++) {
        _Pragma("GCC unroll 8") for (int i = 0; i < R; i++) {
            if (last) {
                y[t * ldy + i] = k3_lanes16_sum_avx2(lo[t][i], hi[t][i]);
            } else {
                _mm256_store_ps(acc + t * acc_ts + i * 16, lo[t][i]);
                _mm256_store_ps(acc + t * acc_ts + i * 16 + 8, hi[t][i]);
            }
        }
    }
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

/* ---------------------------------------------------------------- bf16, even / odd lanes */

/* E and O of one (b, r) back in lane order: lo = lanes 0-7, hi = lanes 8-15. */
INLINE void eo_to_lanes(__m256 e, __m256 o, __m256 *lo, __m256 *hi) {
    const __m256 ul = _mm256_unpacklo_ps(e, o), uh = _mm256_unpackhi_ps(e, o); /* lanes 0-3 8-11 | 4-7 12-15 */
    *lo = _mm256_permute2f128_ps(ul, uh, 0x20);
    *hi = _mm256_permute2f128_ps(ul, uh, 0x31);
}

/* R rows (w, ld apart) x T batch rows (packed x, ldx apart) over nv full 16-groups, then `tail_n`
   (< 16) more values (the last K block only). acc[t * acc_ts + i * 16]: E, then O (8 floats each). */
INLINE void micro_eo(const int R, const int T, const uint16_t *w, size_t ld, const float *x, size_t ldx, size_t nv,
                     size_t tail_n, int first, int last, float *acc, size_t acc_ts, float *y, size_t ldy,
                     prefetch_plan *pfp) {
    __m256 e[NR][MR], o[NR][MR];
    prefetch_plan pf = *pfp;
    const __m256i high = _mm256_set1_epi32((int)0xFFFF0000u);
    _Pragma("GCC unroll 8") for (int t = 0; t < T; t++) {
        _Pragma("GCC unroll 8") for (int i = 0; i < R; i++) {
            e[t][i] = first ? _mm256_setzero_ps() : _mm256_load_ps(acc + t * acc_ts + i * 16);
            o[t][i] = first ? _mm256_setzero_ps() : _mm256_load_ps(acc + t * acc_ts + i * 16 + 8);
        }
    }
    for (size_t v = 0; v < nv; v++) {
        const size_t k = v * 16;
        __m256 wv[MR];
        if (pf.row) prefetch_step(&pf);
        _Pragma("GCC unroll 8") for (int i = 0; i < R; i++)
            wv[i] = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_loadu_si256((const __m256i *)(w + i * ld + k)), 16));
        _Pragma("GCC unroll 8") for (int t = 0; t < T; t++) {
            __m256 xv = _mm256_load_ps(x + t * ldx + k);
            __asm__("" : "+x"(xv)); /* one load per activation vector, not one folded into each FMA */
            _Pragma("GCC unroll 8") for (int i = 0; i < R; i++) e[t][i] = _mm256_fmadd_ps(wv[i], xv, e[t][i]);
        }
        _Pragma("GCC unroll 8") for (int i = 0; i < R; i++)
            wv[i] = _mm256_castsi256_ps(_mm256_and_si256(_mm256_loadu_si256((const __m256i *)(w + i * ld + k)), high));
        _Pragma("GCC unroll 8") for (int t = 0; t < T; t++) {
            __m256 xv = _mm256_load_ps(x + t * ldx + k + 8);
            __asm__("" : "+x"(xv)); /* one load per activation vector, not one folded into each FMA */
            _Pragma("GCC unroll 8") for (int i = 0; i < R; i++) o[t][i] = _mm256_fmadd_ps(wv[i], xv, o[t][i]);
        }
    }
    *pfp = pf;
    if (tail_n) { /* zero-padded weights, E / O masks of the lanes that hold a value; x is zero-padded */
        const size_t k = nv * 16;
        int32_t me[8], mo[8];
        for (int j = 0; j < 8; j++) me[j] = (size_t)(2 * j) < tail_n ? -1 : 0, mo[j] = (size_t)(2 * j + 1) < tail_n ? -1 : 0;
        const __m256 mask_e = _mm256_castsi256_ps(_mm256_loadu_si256((const __m256i *)me));
        const __m256 mask_o = _mm256_castsi256_ps(_mm256_loadu_si256((const __m256i *)mo));
        _Pragma("GCC unroll 8") for (int i = 0; i < R; i++) {
            uint16_t wb[16] = {0};
            memcpy(wb, w + i * ld + k, tail_n * sizeof(uint16_t));
            const __m256i raw = _mm256_loadu_si256((const __m256i *)wb);
            const __m256 we = _mm256_castsi256_ps(_mm256_slli_epi32(raw, 16));
            const __m256 wo = _mm256_castsi256_ps(_mm256_and_si256(raw, high));
            _Pragma("GCC unroll 8") for (int t = 0; t < T; t++) {
                const __m256 xe = _mm256_load_ps(x + t * ldx + k), xo = _mm256_load_ps(x + t * ldx + k + 8);
                e[t][i] = _mm256_blendv_ps(e[t][i], _mm256_fmadd_ps(we, xe, e[t][i]), mask_e);
                o[t][i] = _mm256_blendv_ps(o[t][i], _mm256_fmadd_ps(wo, xo, o[t][i]), mask_o);
            }
        }
    }
    _Pragma("GCC unroll 8") for (int t = 0; t < T; t++) {
        _Pragma("GCC unroll 8") for (int i = 0; i < R; i++) {
            if (last) {
                __m256 lo, hi;
                eo_to_lanes(e[t][i], o[t][i], &lo, &hi);
                y[t * ldy + i] = k3_lanes16_sum_avx2(lo, hi);
            } else {
                _mm256_store_ps(acc + t * acc_ts + i * 16, e[t][i]);
                _mm256_store_ps(acc + t * acc_ts + i * 16 + 8, o[t][i]);
            }
        }
    }
}

typedef void (*micro_fn)(const void *w, size_t ld, const float *x, size_t ldx, size_t nv, size_t tail_n, int first,
                         int last, float *acc, size_t acc_ts, float *y, size_t ldy, prefetch_plan *pf);

#define MICRO(R, T, B, NAME)                                                                                         \
    static void NAME(const void *w, size_t ld, const float *x, size_t ldx, size_t nv, size_t tail_n, int first,     \
                     int last, float *acc, size_t acc_ts, float *y, size_t ldy, prefetch_plan *pf) {                \
        (void)pf;                                                                                                    \
        micro(R, T, B, w, ld, x, ldx, nv, tail_n, first, last, acc, acc_ts, y, ldy);                                \
    }
#define MICRO_ROW(R, B, P) MICRO(R, 1, B, P##_##R##_1) MICRO(R, 2, B, P##_##R##_2) MICRO(R, 3, B, P##_##R##_3)
#define MICRO_EO(R, T, NAME)                                                                                         \
    static void NAME(const void *w, size_t ld, const float *x, size_t ldx, size_t nv, size_t tail_n, int first,     \
                     int last, float *acc, size_t acc_ts, float *y, size_t ldy, prefetch_plan *pf) {                \
        micro_eo(R, T, w, ld, x, ldx, nv, tail_n, first, last, acc, acc_ts, y, ldy, pf);                            \
    }
#define MICRO_EO_ROW(R) MICRO_EO(R, 1, mb_##R##_1) MICRO_EO(R, 2, mb_##R##_2) MICRO_EO(R, 3, mb_##R##_3)
MICRO_EO_ROW(1) MICRO_EO_ROW(2)
MICRO_ROW(1, 0, mf) MICRO_ROW(2, 0, mf)

#define ROW_TABLE(P, R) {P##_##R##_1, P##_##R##_2, P##_##R##_3}
static const micro_fn micro_bf16[MR][NR] = {ROW_TABLE(mb, 1), ROW_TABLE(mb, 2)};
static const micro_fn micro_f32[MR][NR] = {ROW_TABLE(mf, 1), ROW_TABLE(mf, 2)};

/* ---------------------------------------------------------------- activations for the bf16 kernel */

/* Row stride of the even / odd copy: cols rounded up to a whole 16-group. */
static size_t packed_ld(size_t cols) { return (cols + 15) / 16 * 16; }

/* x [batch, cols] (rows ldx apart) -> xp [batch, packed_ld(cols)]: per 16-group the 8 even values,
   then the 8 odd ones; the last group zero-padded. */
static void pack_x_eo(const float *x, size_t ldx, size_t cols, size_t batch, float *xp) {
    const size_t ldp = packed_ld(cols);
    for (size_t b = 0; b < batch; b++) {
        const float *xr = x + b * ldx;
        float *o = xp + b * ldp;
        size_t k = 0;
        for (; k + 16 <= cols; k += 16) {
            const __m256 a = _mm256_loadu_ps(xr + k), c = _mm256_loadu_ps(xr + k + 8);
            /* shuffle_ps picks 0 2 (0x88) / 1 3 (0xDD) of each 128-bit half: a0 a2 c0 c2 | a4 a6 c4 c6; the
               64-bit permute 0xD8 puts them in order */
            const __m256 e = _mm256_shuffle_ps(a, c, 0x88), od = _mm256_shuffle_ps(a, c, 0xDD);
            _mm256_storeu_ps(o + k, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(e), 0xD8)));
            _mm256_storeu_ps(o + k + 8, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(od), 0xD8)));
        }
        if (k < cols) {
            for (int j = 0; j < 16; j++) o[k + j] = 0.0f;
            for (size_t j = 0; k + j < cols; j++) o[k + (j & 1 ? 8 : 0) + j / 2] = xr[k + j];
        }
    }
}

/* ---------------------------------------------------------------- blocking */

#define KC 1024 /* multiple of 16 */
#define MC 64   /* multiple of MR */

static void gemm_blocked(const int bf16, const void *w, size_t ld, const float *x, size_t ldx, float *y, size_t ldy,
                         size_t cols, size_t batch, size_t row_begin, size_t row_end) {
    const micro_fn(*table)[NR] = bf16 ? micro_bf16 : micro_f32;
    const size_t esize = bf16 ? 2 : 4;
    const size_t n_kb = cols <= KC ? 1 : (cols + KC - 1) / KC;
    const size_t acc_ts = MC * 16;
    const size_t acc_floats = n_kb > 1 ? batch * acc_ts : 0, xp_floats = bf16 ? batch * packed_ld(cols) : 0;
    float *acc = NULL;
    if (acc_floats + xp_floats) {
        float *scratch = k3_gemm_scratch((acc_floats + xp_floats) * sizeof(float));
        if (!scratch) { /* out of memory: the row kernel (same order, same bits) on the caller's activations */
            (bf16 ? k3_gemm_bf16_rows_avx2 : k3_gemm_f32_rows_avx2)(w, ld, x, ldx, y, ldy, cols, batch, row_begin,
                                                                    row_end);
            return;
        }
        if (acc_floats) acc = scratch;
        if (bf16) { /* the even / odd copy the bf16 micro-kernel reads, once per task */
            float *xp = scratch + acc_floats;
            pack_x_eo(x, ldx, cols, batch, xp);
            x = xp, ldx = packed_ld(cols);
        }
    }
    const char *wb = w;
    const size_t tiles = (batch + NR - 1) / NR;
    for (size_t r0 = row_begin; r0 < row_end; r0 += MC) {
        const size_t mc = row_end - r0 < MC ? row_end - r0 : MC;
        for (size_t kb = 0; kb < n_kb; kb++) {
            const size_t k0 = kb * KC;
            const size_t kc = cols - k0 < KC ? cols - k0 : KC;
            const int first = kb == 0, last = kb + 1 == n_kb;
            /* the block after this one: the same rows in the next K block, else the next rows at k = 0
               (bf16 only: the f32 micro-kernel takes no plan) */
            size_t nr0 = r0, nk0 = k0 + KC, nmc = bf16 ? mc : 0;
            if (kb + 1 == n_kb) nr0 = r0 + MC, nk0 = 0, nmc = bf16 && nr0 < row_end ? row_end - nr0 : 0;
            if (nmc > MC) nmc = MC;
            prefetch_plan pf = {0};
            if (nmc) {
                const size_t nkc = cols - nk0 < KC ? cols - nk0 : KC;
                const char *base = wb + (nr0 * ld + nk0) * esize;
                const size_t lines = nmc * ((nkc * esize + 63) / 64 + 1);
                const size_t steps = tiles * ((mc + MR - 1) / MR) * (kc / 16 ? kc / 16 : 1);
                pf.row = (const char *)((uintptr_t)base & ~(uintptr_t)63);
                pf.ld = ld * esize;
                pf.end = (size_t)(base - pf.row) + nkc * esize;
                pf.rows_left = nmc - 1;
                pf.per = (unsigned)((lines + steps - 1) / steps);
                pf.every = (unsigned)(steps * pf.per / lines);
                if (pf.every < 1) pf.every = 1;
                pf.countdown = pf.every;
            }
            for (size_t t0 = 0; t0 < batch; t0 += NR) {
                const size_t tn = batch - t0 < NR ? batch - t0 : NR;
                for (size_t i0 = 0; i0 < mc; i0 += MR) {
                    const size_t rn = mc - i0 < MR ? mc - i0 : MR;
                    const char *wp = wb + ((r0 + i0) * ld + k0) * esize;
                    table[rn - 1][tn - 1](wp, ld, x + t0 * ldx + k0, ldx, kc / 16, kc % 16, first, last,
                                          acc ? acc + t0 * acc_ts + i0 * 16 : NULL, acc_ts, y + t0 * ldy + r0 + i0,
                                          ldy, &pf);
                }
            }
        }
    }
}

void k3_gemm_bf16_blocked_avx2(const void *w, size_t ld, const float *x, size_t ldx, float *y, size_t ldy,
                               size_t cols, size_t batch, size_t row_begin, size_t row_end) {
    gemm_blocked(1, w, ld, x, ldx, y, ldy, cols, batch, row_begin, row_end);
}

void k3_gemm_f32_blocked_avx2(const void *w, size_t ld, const float *x, size_t ldx, float *y, size_t ldy,
                              size_t cols, size_t batch, size_t row_begin, size_t row_end) {
    gemm_blocked(0, w, ld, x, ldx, y, ldy, cols, batch, row_begin, row_end);
}

