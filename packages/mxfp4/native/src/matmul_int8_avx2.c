/*
 * matmul_int8_avx2.c: the int8 path on AVX2 without VNNI (order in matmul_int8.h; same bits as the
 * scalar reference and the VNNI kernels). The weights are the unsigned LUT2 + 12 (vpshufb on the
 * nibbles); vpmaddubsw multiplies them by the signed activations and sums pairs (|sum| <= 2 * 24 * 127,
 * no saturation), the even and odd int16 sums are added (<= 12192), vpmaddwd sums them per 4 bytes into
 * the dword of lane L, and -12 * sum(q) of those bytes (precomputed per activation row) makes the dot
 * exact. Each row's 64-byte group is decoded once for up to 4 activation rows (8 accumulators); the
 * block factors 2^(s-128) come from a table (k3_pow2_minus128), two broadcasts per 2 blocks.
 */
#pragma GCC target("avx2,fma")
#include <immintrin.h>
#include <string.h>
#include "k3_lane_sums.h"
#include "matmul_int8.h"

typedef struct {
    __m256i wl[2], wh[2]; /* unsigned weights of the low / high nibbles, per 32-byte half */
    __m256 p2[2];         /* 2^(s-128) of the half's two blocks (lanes 0-3, 4-7) */
} group_weights;

static inline __attribute__((always_inline)) void decode_group(const uint8_t *src, const float f[4], group_weights *w) {
    const __m256i table = _mm256_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0,
                                           12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0);
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    for (int h = 0; h < 2; h++) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(src + 32 * h));
        w->wl[h] = _mm256_shuffle_epi8(table, _mm256_and_si256(v, low4));
        w->wh[h] = _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(v, 4), low4));
        w->p2[h] = _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_broadcast_ss(&f[2 * h])), _mm_broadcast_ss(&f[2 * h + 1]), 1);
    }
}

static inline __attribute__((always_inline)) __m256 group_fma(const group_weights *w, const k3_int8_activations *a, size_t g,
                                                             int h, __m256 acc) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i xe = _mm256_loadu_si256((const __m256i *)(a->q_even + 64 * g + 32 * h));
    __m256i xo = _mm256_loadu_si256((const __m256i *)(a->q_odd + 64 * g + 32 * h));
    __m256i pairs = _mm256_add_epi16(_mm256_maddubs_epi16(w->wl[h], xe), _mm256_maddubs_epi16(w->wh[h], xo));
    __m256i dot = _mm256_add_epi32(_mm256_madd_epi16(pairs, ones), _mm256_loadu_si256((const __m256i *)(a->neg12_sums + 16 * g + 8 * h)));
    __m256 f = _mm256_mul_ps(_mm256_loadu_ps(a->d_lanes + 16 * g + 8 * h), w->p2[h]);
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), f, acc);
}

/* Rows this far ahead are prefetched one line per group: a row is a short 1.8-3.6 KB stream, and
   without it DRAM latency left this kernel at 0.60-0.69 of the AVX2 fp32 matvec (Intel Xeon, 1 thread). */
#define PREFETCH_ROWS 8

/* Row r against activation rows b0 .. b0 + NB - 1 (NB <= 4, a compile-time constant at each call). */
static inline __attribute__((always_inline)) void row_acts(const k3_mxfp4_matrix *m, size_t r, const k3_int8_activations *acts,
                                                           size_t b0, float *y, const int NB) {
    const size_t n_blocks = m->cols / 32, groups = (n_blocks + 3) / 4, full = n_blocks / 4;
    const uint8_t *packed = m->packed + r * (m->cols / 2), *scales = m->scales + r * n_blocks;
    const int ahead = r + PREFETCH_ROWS < m->rows;
    __m256 acc[4][2];
    for (int j = 0; j < NB; j++) acc[j][0] = acc[j][1] = _mm256_setzero_ps();
    for (size_t g = 0; g < groups; g++) {
        const uint8_t *src = packed + 64 * g;
        uint8_t tail[64];
        float f[4];
        if (ahead) {
            _mm_prefetch((const char *)(packed + 64 * g + PREFETCH_ROWS * (m->cols / 2)), _MM_HINT_T0);
            if ((g & 15) == 0) _mm_prefetch((const char *)(scales + PREFETCH_ROWS * n_blocks + 4 * g), _MM_HINT_T0);
        }
        if (g < full) {
            for (int b = 0; b < 4; b++) f[b] = k3_pow2_minus128[scales[4 * g + b]];
        } else { /* a short last group: the missing bytes read as 0 and their factors are 0, never past the row */
            size_t left = n_blocks - 4 * g;
            memset(tail, 0, sizeof tail);
            memcpy(tail, src, 16 * left);
            src = tail;
            for (size_t b = 0; b < 4; b++) f[b] = b < left ? k3_pow2_minus128[scales[4 * g + b]] : 0.0f;
        }
        group_weights w;
        decode_group(src, f, &w);
        for (int j = 0; j < NB; j++)
            for (int h = 0; h < 2; h++) acc[j][h] = group_fma(&w, &acts[b0 + (size_t)j], g, h, acc[j][h]);
    }
    for (int j = 0; j < NB; j++) y[(b0 + (size_t)j) * m->rows + r] = k3_lanes16_sum_avx2(acc[j][0], acc[j][1]);
}

void k3_mxfp4_int8_row_avx2(const k3_mxfp4_matrix *m, size_t r, const k3_int8_activations *acts, size_t batch, float *y) {
    size_t b = 0;
    for (; b + 4 <= batch; b += 4) row_acts(m, r, acts, b, y, 4);
    switch (batch - b) {
        case 3: row_acts(m, r, acts, b, y, 3); break;
        case 2: row_acts(m, r, acts, b, y, 2); break;
        case 1: row_acts(m, r, acts, b, y, 1); break;
        default: break;
    }
}

/* ---------------------------------------------------------------- activations (same bits as the scalar quantiser) */

void k3_mxfp4_quantize_activations_avx2(const float *x, size_t cols, k3_int8_activations *out) {
    const size_t n_blocks = cols / 32;
    memset(out->q_even, 0, out->groups * 64);
    memset(out->q_odd, 0, out->groups * 64);
    memset(out->d, 0, out->groups * 4 * sizeof(float));
    memset(out->d_lanes, 0, out->groups * 16 * sizeof(float));
    memset(out->neg12_sums, 0, out->groups * 16 * sizeof(int32_t));
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF)), inf = _mm256_set1_ps(__builtin_inff());
    const __m256i deinterleave = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
    for (size_t b = 0; b < n_blocks; b++) {
        __m256 v[4], a[4];
        int bad = 0;
        for (int i = 0; i < 4; i++) {
            v[i] = _mm256_loadu_ps(x + 32 * b + 8 * i);
            a[i] = _mm256_and_ps(v[i], abs_mask);
            bad |= _mm256_movemask_ps(_mm256_cmp_ps(a[i], inf, _CMP_NLT_UQ)); /* inf or NaN */
        }
        float d;
        if (bad) d = __builtin_nanf("");
        else {
            __m256 mx = _mm256_max_ps(_mm256_max_ps(a[0], a[1]), _mm256_max_ps(a[2], a[3]));
            __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
            m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
            float amax = _mm_cvtss_f32(_mm_max_ss(m4, _mm_movehdup_ps(m4)));
            d = amax / 127.0f;
            if (amax != 0.0f) {
                __m256 dv = _mm256_set1_ps(d);
                __m256i q[4];
                for (int i = 0; i < 4; i++) /* elements 8i .. 8i+7 -> [4 even | 4 odd] */
                    q[i] = _mm256_permutevar8x32_epi32(
                        _mm256_cvtps_epi32(_mm256_round_ps(_mm256_div_ps(v[i], dv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)),
                        deinterleave);
                /* int16 per half: [even 0-7 | odd 0-7], [even 8-15 | odd 8-15]; then bytes [even 0-15 | odd 0-15] */
                __m256i bytes = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
                _mm_storeu_si128((__m128i *)(out->q_even + 16 * b), _mm256_castsi256_si128(bytes));
                _mm_storeu_si128((__m128i *)(out->q_odd + 16 * b), _mm256_extracti128_si256(bytes, 1));
                /* lane 4b + l covers bytes 4l .. 4l+3 = elements 8l .. 8l+7 = q[l] */
                __m256i s = _mm256_hadd_epi32(_mm256_hadd_epi32(q[0], q[1]), _mm256_hadd_epi32(q[2], q[3]));
                __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
                _mm_storeu_si128((__m128i *)(out->neg12_sums + 4 * b), _mm_mullo_epi32(s4, _mm_set1_epi32(-12)));
            }
        }
        out->d[b] = d;
        for (int l = 0; l < 4; l++) out->d_lanes[4 * b + l] = d;
    }
}
