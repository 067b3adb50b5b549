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

static void int8_micro3(const uint8_t *w, size_t g, const k3_int8_activations *a, float *o) { int8_micro(w, g, a, o, 3); }
static void int8_micro2(const uint8_t *w, size_t g, const k3_int8_activations *a, float *o) { int8_micro(w, g, a, o, 2); }
static void int8_micro1(const uint8_t *w, size_t g, const k3_int8_activations *a, float *o) { int8_micro(w, g, a, o, 1); }

void k3_mxfp4_int8_rows4_batch_vnni(const uint8_t *wbuf, size_t groups, const k3_int8_activations *acts, size_t batch,
                                    float *y, size_t rows, size_t r0) {
    float out[12];
    for (size_t b = 0; b < batch;) {
        size_t nb = batch - b >= 3 ? 3 : batch - b;
        (nb == 3 ? int8_micro3 : nb == 2 ? int8_micro2 : int8_micro1)(wbuf, groups, acts + b, out);
        for (int i = 0; i < 4; i++)
            for (size_t j = 0; j < nb; j++) y[(b + j) * rows + r0 + (size_t)i] = out[i * (int)nb + (int)j];
        b += nb;
    }
}
