/*
 * matmul_int8_vnni.c: the int8 path on AVX-512 VNNI (order in matmul_int8.h). One 64-byte load is a
 * 4-block group of one row; vpshufb maps codes to |LUT2| (unsigned), the weight's sign is moved onto
 * the activation with a masked subtract, and vpdpbusd sums 4 byte products per dword lane.
 */
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")
#include <immintrin.h>
#include "matmul_int8.h"

int k3_mxfp4_cpu_has_vnni(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512vnni");
}

static float reduce16(__m512 v) {
    __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(v),
                              _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    __m128 s1 = _mm_add_ss(s2, _mm_movehdup_ps(s2));
    return _mm_cvtss_f32(s1);
}

float k3_mxfp4_row_int8_vnni(const uint8_t *packed, const uint8_t *scales, size_t n_blocks,
                             const k3_int8_activations *a) {
    const __m512i magnitude = _mm512_broadcast_i32x4(_mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, 1, 2, 3, 4, 6, 8, 12));
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    /* vpshufb index: dword L takes byte L/4 of the four scale bytes (index bytes with bit 7 give 0) */
    const __m512i spread = _mm512_setr_epi32((int)0x80808000, (int)0x80808000, (int)0x80808000, (int)0x80808000,
                                             (int)0x80808001, (int)0x80808001, (int)0x80808001, (int)0x80808001,
                                             (int)0x80808002, (int)0x80808002, (int)0x80808002, (int)0x80808002,
                                             (int)0x80808003, (int)0x80808003, (int)0x80808003, (int)0x80808003);
    const __m512i lane_block = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    __m512 acc = _mm512_setzero_ps();
    for (size_t g = 0; g < a->groups; g++) {
        size_t left = n_blocks - 4 * g; /* blocks present in this group (1..4) */
        __mmask64 bytes = left >= 4 ? ~(__mmask64)0 : (((__mmask64)1 << (16 * left)) - 1);
        __mmask16 lanes = left >= 4 ? 0xFFFF : (__mmask16)((1u << (4 * left)) - 1);
        __m512i v = _mm512_maskz_loadu_epi8(bytes, packed + 64 * g);
        __m512i lo = _mm512_and_si512(v, low4);
        __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
        __m512i w_lo = _mm512_shuffle_epi8(magnitude, lo);
        __m512i w_hi = _mm512_shuffle_epi8(magnitude, hi);
        __m512i q_even = _mm512_loadu_si512(a->q_even + 64 * g);
        __m512i q_odd = _mm512_loadu_si512(a->q_odd + 64 * g);
        q_even = _mm512_mask_sub_epi8(q_even, _mm512_test_epi8_mask(v, _mm512_set1_epi8(0x08)), _mm512_setzero_si512(), q_even);
        q_odd = _mm512_mask_sub_epi8(q_odd, _mm512_test_epi8_mask(v, _mm512_set1_epi8((char)0x80)), _mm512_setzero_si512(), q_odd);
        __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w_lo, q_even);
        dot = _mm512_dpbusd_epi32(dot, w_hi, q_odd);
        /* factor_L = d_b * 2^(s_b - 128) for b = 4g + L/4, exact like ldexpf */
        uint32_t four = 0;
        for (size_t i = 0; i < 4 && i < left; i++) four |= (uint32_t)scales[4 * g + i] << (8 * i);
        __m512i s = _mm512_shuffle_epi8(_mm512_set1_epi32((int)four), spread);
        __m512 d = _mm512_permutexvar_ps(lane_block, _mm512_castps128_ps512(_mm_loadu_ps(a->d + 4 * g)));
        __m512 factor = _mm512_maskz_scalef_ps(lanes, d, _mm512_cvtepi32_ps(_mm512_sub_epi32(s, _mm512_set1_epi32(128))));
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), factor, acc);
    }
    return reduce16(acc);
}
