/*
 * matmul_int8_vnni.c: the int8 path on AVX-512 VNNI (order in matmul_int8.h). One 64-byte load is a
 * 4-block group of one row; vpshufb maps codes to |LUT2| (unsigned), the weight's sign moves onto the
 * activation with a masked subtract, and vpdpbusd sums 4 byte products per dword lane. No
 * lane-crossing shuffle in the loop (those bound the fp32 path). 4 rows share the activation loads.
 */
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")
#include <immintrin.h>
#include "k3_lane_sums.h"
#include <string.h>
#include "matmul_int8.h"

int k3_mxfp4_cpu_has_vnni(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512vnni");
}


/* The 4 scale bytes of group g (fewer at the end of a row: missing ones read as 0, never past it). */
static uint32_t scale_bytes(const uint8_t *scales, size_t g, size_t left) {
    uint32_t four = 0;
    if (left >= 4) memcpy(&four, scales + 4 * g, 4);
    else
        for (size_t i = 0; i < left; i++) four |= (uint32_t)scales[4 * g + i] << (8 * i);
    return four;
}

void k3_mxfp4_rows4_int8_vnni(const k3_mxfp4_matrix *m, size_t r0, const k3_int8_activations *a, float out[4]) {
    const size_t n_blocks = m->cols / 32;
    const __m512i magnitude = _mm512_broadcast_i32x4(_mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, 1, 2, 3, 4, 6, 8, 12));
    const __m512i low4 = _mm512_set1_epi8(0x0F), bit3 = _mm512_set1_epi8(0x08), bit7 = _mm512_set1_epi8((char)0x80);
    const __m512i bias = _mm512_set1_epi32(128), ff = _mm512_set1_epi32(0xFF), zero = _mm512_setzero_si512();
    /* vpshufb index: dword L takes byte L/4 of the four scale bytes (index bytes with bit 7 give 0) */
    const __m512i spread = _mm512_setr_epi32((int)0x80808000, (int)0x80808000, (int)0x80808000, (int)0x80808000,
                                             (int)0x80808001, (int)0x80808001, (int)0x80808001, (int)0x80808001,
                                             (int)0x80808002, (int)0x80808002, (int)0x80808002, (int)0x80808002,
                                             (int)0x80808003, (int)0x80808003, (int)0x80808003, (int)0x80808003);
    const uint8_t *packed[4], *scales[4];
    __m512 acc[4];
    for (int i = 0; i < 4; i++) {
        packed[i] = m->packed + (r0 + i) * (m->cols / 2);
        scales[i] = m->scales + (r0 + i) * n_blocks;
        acc[i] = _mm512_setzero_ps();
    }
    for (size_t g = 0; g < a->groups; g++) {
        size_t left = n_blocks - 4 * g; /* blocks present in this group */
        __mmask64 bytes = left >= 4 ? ~(__mmask64)0 : (((__mmask64)1 << (16 * left)) - 1);
        __mmask16 lanes = left >= 4 ? 0xFFFF : (__mmask16)((1u << (4 * left)) - 1);
        __m512i q_even = _mm512_loadu_si512(a->q_even + 64 * g);
        __m512i q_odd = _mm512_loadu_si512(a->q_odd + 64 * g);
        __m512 d = _mm512_loadu_ps(a->d_lanes + 16 * g);
        for (int i = 0; i < 4; i++) {
            /* the same line two 4-row tiles ahead (rows are contiguous): DRAM latency stays hidden */
            _mm_prefetch((const char *)(packed[i] + 8 * (m->cols / 2) + 64 * g), _MM_HINT_T0);
            if ((g & 15) == 0) _mm_prefetch((const char *)(scales[i] + 8 * n_blocks + 4 * g), _MM_HINT_T0);
            __m512i v = _mm512_maskz_loadu_epi8(bytes, packed[i] + 64 * g);
            __m512i w_lo = _mm512_shuffle_epi8(magnitude, _mm512_and_si512(v, low4));
            __m512i w_hi = _mm512_shuffle_epi8(magnitude, _mm512_and_si512(_mm512_srli_epi16(v, 4), low4));
            __m512i x_lo = _mm512_mask_sub_epi8(q_even, _mm512_test_epi8_mask(v, bit3), zero, q_even);
            __m512i x_hi = _mm512_mask_sub_epi8(q_odd, _mm512_test_epi8_mask(v, bit7), zero, q_odd);
            __m512i dot = _mm512_dpbusd_epi32(zero, w_lo, x_lo);
            dot = _mm512_dpbusd_epi32(dot, w_hi, x_hi);
            __m512i s = _mm512_shuffle_epi8(_mm512_set1_epi32((int)scale_bytes(scales[i], g, left)), spread);
            __m512 factor = _mm512_maskz_scalef_ps(lanes, d, _mm512_cvtepi32_ps(_mm512_sub_epi32(s, bias)));
            /* 0xFF (refused at load) becomes NaN here too, as in the scalar reference */
            factor = _mm512_mask_mov_ps(factor, _mm512_cmpeq_epi32_mask(s, ff), _mm512_set1_ps(__builtin_nanf("")));
            acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), factor, acc[i]);
        }
    }
    for (int i = 0; i < 4; i++) out[i] = k3_lanes16_sum_avx512(acc[i]);
}

/* ---------------------------------------------------------------- batched (the order above, Y[b] = matvec) */

/* Rows r0 .. r0+3, every group, into wbuf (k3_int8_wbuf_bytes per row and group): the unsigned weights
   LUT2 + 12 of the low and high nibbles (64 bytes each) and 2^(s-128) per lane (16 floats; NaN for
   0xFF, 0 for the lanes of a short last group). */
void k3_mxfp4_int8_decode4_vnni(const k3_mxfp4_matrix *m, size_t r0, size_t groups, uint8_t *wbuf) {
    const size_t n_blocks = m->cols / 32;
    const __m512i table = _mm512_broadcast_i32x4(_mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
    const __m512i low4 = _mm512_set1_epi8(0x0F), bias = _mm512_set1_epi32(128), ff = _mm512_set1_epi32(0xFF);
    const __m512i spread = _mm512_setr_epi32((int)0x80808000, (int)0x80808000, (int)0x80808000, (int)0x80808000,
                                             (int)0x80808001, (int)0x80808001, (int)0x80808001, (int)0x80808001,
                                             (int)0x80808002, (int)0x80808002, (int)0x80808002, (int)0x80808002,
                                             (int)0x80808003, (int)0x80808003, (int)0x80808003, (int)0x80808003);
    for (int i = 0; i < 4; i++) {
        const uint8_t *packed = m->packed + (r0 + i) * (m->cols / 2), *scales = m->scales + (r0 + i) * n_blocks;
        for (size_t g = 0; g < groups; g++) {
            uint8_t *o = wbuf + (i * groups + g) * K3_INT8_WBUF_BYTES;
            size_t left = n_blocks - 4 * g;
            __mmask64 bytes = left >= 4 ? ~(__mmask64)0 : (((__mmask64)1 << (16 * left)) - 1);
            __mmask16 lanes = left >= 4 ? 0xFFFF : (__mmask16)((1u << (4 * left)) - 1);
            /* the next 4-row group's line (rows are contiguous): decode reads short 1.8 KB row pieces
               between long VNNI phases, which the hardware prefetcher alone leaves exposed */
            if (r0 + 8 <= m->rows) {
                _mm_prefetch((const char *)(packed + 4 * (m->cols / 2) + 64 * g), _MM_HINT_T0);
                if ((g & 15) == 0) _mm_prefetch((const char *)(scales + 4 * n_blocks + 4 * g), _MM_HINT_T0);
            }
            __m512i v = _mm512_maskz_loadu_epi8(bytes, packed + 64 * g);
            _mm512_store_si512((__m512i *)o, _mm512_shuffle_epi8(table, _mm512_and_si512(v, low4)));
            _mm512_store_si512((__m512i *)(o + 64), _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(v, 4), low4)));
            __m512i s = _mm512_shuffle_epi8(_mm512_set1_epi32((int)scale_bytes(scales, g, left)), spread);
            __m512 p2 = _mm512_maskz_scalef_ps(lanes, _mm512_set1_ps(1.0f), _mm512_cvtepi32_ps(_mm512_sub_epi32(s, bias)));
            p2 = _mm512_mask_mov_ps(p2, _mm512_cmpeq_epi32_mask(s, ff), _mm512_set1_ps(__builtin_nanf("")));
            _mm512_store_ps((float *)(o + 128), p2);
        }
    }
}

/* 4 decoded rows x NB activation rows over every group; out[(i * NB + j)] = row i, activation j. */
static inline __attribute__((always_inline)) void int8_micro(const uint8_t *wbuf, size_t groups,
                                                             const k3_int8_activations *a, float *out, const int NB) {
    __m512 acc[4][4];
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < NB; j++) acc[i][j] = _mm512_setzero_ps();
    for (size_t g = 0; g < groups; g++) {
        __m512i wl[4], wh[4];
        for (int i = 0; i < 4; i++) {
            wl[i] = _mm512_load_si512((const __m512i *)(wbuf + (i * groups + g) * K3_INT8_WBUF_BYTES));
            wh[i] = _mm512_load_si512((const __m512i *)(wbuf + (i * groups + g) * K3_INT8_WBUF_BYTES + 64));
        }
        for (int j = 0; j < NB; j++) {
            __m512i xe = _mm512_loadu_si512(a[j].q_even + 64 * g);
            __m512i xo = _mm512_loadu_si512(a[j].q_odd + 64 * g);
            __m512i nc = _mm512_loadu_si512(a[j].neg12_sums + 16 * g);
            __m512 d = _mm512_loadu_ps(a[j].d_lanes + 16 * g);
            for (int i = 0; i < 4; i++) {
                __m512i dot = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(nc, wl[i], xe), wh[i], xo);
                __m512 f = _mm512_mul_ps(d, _mm512_load_ps((const float *)(wbuf + (i * groups + g) * K3_INT8_WBUF_BYTES + 128)));
                acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), f, acc[i][j]);
            }
        }
    }
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < NB; j++) out[i * NB + j] = k3_lanes16_sum_avx512(acc[i][j]);
}

static void int8_micro4(const uint8_t *w, size_t g, const k3_int8_activations *a, float *o) { int8_micro(w, g, a, o, 4); }
static void int8_micro3(const uint8_t *w, size_t g, const k3_int8_activations *a, float *o) { int8_micro(w, g, a, o, 3); }
static void int8_micro2(const uint8_t *w, size_t g, const k3_int8_activations *a, float *o) { int8_micro(w, g, a, o, 2); }
static void int8_micro1(const uint8_t *w, size_t g, const k3_int8_activations *a, float *o) { int8_micro(w, g, a, o, 1); }

void k3_mxfp4_int8_rows4_batch_vnni(const uint8_t *wbuf, size_t groups, const k3_int8_activations *acts, size_t batch,
                                    float *y, size_t rows, size_t r0) {
    float out[16];
    for (size_t b = 0; b < batch;) {
        /* 3 wide (12 accumulators, no spill), 4 when exactly 4 are left (n = 4 needs no 1-wide tail) */
        size_t nb = batch - b == 4 ? 4 : batch - b >= 3 ? 3 : batch - b;
        (nb == 4 ? int8_micro4 : nb == 3 ? int8_micro3 : nb == 2 ? int8_micro2 : int8_micro1)(wbuf, groups, acts + b, out);
        for (int i = 0; i < 4; i++)
            for (size_t j = 0; j < nb; j++) y[(b + j) * rows + r0 + (size_t)i] = out[i * (int)nb + (int)j];
        b += nb;
    }
}

/* ---------------------------------------------------------------- activation quantisation (AVX-512)
   The same bits as k3_mxfp4_quantize_activations: max|x| is exact, d = amax / 127 is the same f32
   division, x / d is a correctly rounded vdivps and vrndscaleps rounds to nearest even like nearbyintf. */
void k3_mxfp4_quantize_activations_avx512(const float *x, size_t cols, k3_int8_activations *out) {
    const size_t n_blocks = cols / 32;
    memset(out->q_even, 0, out->groups * 64);
    memset(out->q_odd, 0, out->groups * 64);
    memset(out->d, 0, out->groups * 4 * sizeof(float));
    memset(out->d_lanes, 0, out->groups * 16 * sizeof(float));
    memset(out->neg12_sums, 0, out->groups * 16 * sizeof(int32_t));
    const __m512i even_idx = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd_idx = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    const __m512 abs_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7FFFFFFF));
    const __m512 inf = _mm512_set1_ps(__builtin_inff());
    for (size_t b = 0; b < n_blocks; b++) {
        __m512 lo = _mm512_loadu_ps(x + 32 * b), hi = _mm512_loadu_ps(x + 32 * b + 16);
        __m512 alo = _mm512_and_ps(lo, abs_mask), ahi = _mm512_and_ps(hi, abs_mask);
        /* non-finite (|x| >= inf, or NaN: unordered) anywhere -> d = NaN, q = 0 */
        __mmask16 bad = _mm512_cmp_ps_mask(alo, inf, _CMP_NLT_UQ) | _mm512_cmp_ps_mask(ahi, inf, _CMP_NLT_UQ);
        float d;
        if (bad) d = __builtin_nanf("");
        else {
            float amax = _mm512_reduce_max_ps(_mm512_max_ps(alo, ahi));
            d = amax / 127.0f;
            if (amax != 0.0f) {
                __m512 dv = _mm512_set1_ps(d);
                __m512 e = _mm512_permutex2var_ps(lo, even_idx, hi), o = _mm512_permutex2var_ps(lo, odd_idx, hi);
                __m512i qe = _mm512_cvtps_epi32(_mm512_roundscale_ps(_mm512_div_ps(e, dv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
                __m512i qo = _mm512_cvtps_epi32(_mm512_roundscale_ps(_mm512_div_ps(o, dv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
                _mm_storeu_si128((__m128i *)(out->q_even + 16 * b), _mm512_cvtepi32_epi8(qe));
                _mm_storeu_si128((__m128i *)(out->q_odd + 16 * b), _mm512_cvtepi32_epi8(qo));
                /* lane 4b + j/4 sums bytes j = 4l .. 4l+3: sum each group of 4 dwords */
                __m512i sum = _mm512_add_epi32(qe, qo);
                int32_t t[16];
                _mm512_storeu_si512(t, sum);
                for (int l = 0; l < 4; l++) out->neg12_sums[4 * b + l] = -12 * (t[4 * l] + t[4 * l + 1] + t[4 * l + 2] + t[4 * l + 3]);
            }
        }
        out->d[b] = d;
        for (int l = 0; l < 4; l++) out->d_lanes[4 * b + l] = d;
    }
}
