/*
 * gemm_blocked_avx2.c: the blocked batched GEMM at AVX2 + FMA, in the exact order of gemm.h (see
 * gemm_blocked_avx512.c for the scheme). The 16 lane partials of a (b, r) live in two ymm (lanes
 * 0-7 and 8-15), so the micro-kernel is MR = 2 weight rows x NR = 3 batch rows = 12 accumulators;
 * per 8 k values it widens MR weight vectors once and uses each NR times. Between K blocks the
 * lane vectors are parked in the per-thread scratch (no bit changes). The tail (cols % 16 values)
 * is loaded through a zero-padded copy and blended in, so lanes past cols keep their value exactly
 * (no 0 * x that could turn -0 into +0 or inf into NaN).
 */
#pragma GCC target("avx2,fma")
#include <immintrin.h>
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

typedef void (*micro_fn)(const void *w, size_t ld, const float *x, size_t ldx, size_t nv, size_t tail_n, int first,
                         int last, float *acc, size_t acc_ts, float *y, size_t ldy);

#define MICRO(R, T, B, NAME)                                                                                         \
    static void NAME(const void *w, size_t ld, const float *x, size_t ldx, size_t nv, size_t tail_n, int first,     \
                     int last, float *acc, size_t acc_ts, float *y, size_t ldy) {                                   \
        micro(R, T, B, w, ld, x, ldx, nv, tail_n, first, last, acc, acc_ts, y, ldy);                                \
    }
#define MICRO_ROW(R, B, P) MICRO(R, 1, B, P##_##R##_1) MICRO(R, 2, B, P##_##R##_2) MICRO(R, 3, B, P##_##R##_3)
MICRO_ROW(1, 1, mb) MICRO_ROW(2, 1, mb)
MICRO_ROW(1, 0, mf) MICRO_ROW(2, 0, mf)

#define ROW_TABLE(P, R) {P##_##R##_1, P##_##R##_2, P##_##R##_3}
static const micro_fn micro_bf16[MR][NR] = {ROW_TABLE(mb, 1), ROW_TABLE(mb, 2)};
static const micro_fn micro_f32[MR][NR] = {ROW_TABLE(mf, 1), ROW_TABLE(mf, 2)};

/* ---------------------------------------------------------------- blocking */

#define KC 1024 /* multiple of 16 */
#define MC 64   /* multiple of MR */

static void gemm_blocked(const int bf16, const void *w, size_t ld, const float *x, size_t ldx, float *y, size_t ldy,
                         size_t cols, size_t batch, size_t row_begin, size_t row_end) {
    const micro_fn(*table)[NR] = bf16 ? micro_bf16 : micro_f32;
    const size_t esize = bf16 ? 2 : 4;
    const size_t n_kb = cols <= KC ? 1 : (cols + KC - 1) / KC;
    float *acc = NULL;
    const size_t acc_ts = MC * 16;
    if (n_kb > 1) {
        acc = k3_gemm_scratch(batch * acc_ts * sizeof(float));
        if (!acc) {
            (bf16 ? k3_gemm_bf16_rows_avx2 : k3_gemm_f32_rows_avx2)(w, ld, x, ldx, y, ldy, cols, batch, row_begin,
                                                                    row_end);
            return;
        }
    }
    for (size_t r0 = row_begin; r0 < row_end; r0 += MC) {
        const size_t mc = row_end - r0 < MC ? row_end - r0 : MC;
        for (size_t kb = 0; kb < n_kb; kb++) {
            const size_t k0 = kb * KC;
            const size_t kc = cols - k0 < KC ? cols - k0 : KC;
            const int first = kb == 0, last = kb + 1 == n_kb;
            for (size_t t0 = 0; t0 < batch; t0 += NR) {
                const size_t tn = batch - t0 < NR ? batch - t0 : NR;
                for (size_t i0 = 0; i0 < mc; i0 += MR) {
                    const size_t rn = mc - i0 < MR ? mc - i0 : MR;
                    const char *wp = (const char *)w + ((r0 + i0) * ld + k0) * esize;
                    table[rn - 1][tn - 1](wp, ld, x + t0 * ldx + k0, ldx, kc / 16, kc % 16, first, last,
                                          acc ? acc + t0 * acc_ts + i0 * 16 : NULL, acc_ts, y + t0 * ldy + r0 + i0,
                                          ldy);
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
