/* decode_avx2.h: one MXFP4 block to f32 with AVX2 byte shuffles (the scheme is described in matmul_avx2.c).
   Shared by the matvec and the batched (prefill) AVX2 kernels; include after `#pragma GCC target("avx2,fma")`. */
#ifndef K3_MXFP4_DECODE_AVX2_H
#define K3_MXFP4_DECODE_AVX2_H
#include <immintrin.h>
#include "mxfp4.h"

/* One block (16 bytes, 32 weights) of one row as bf16 words: wa widens to lanes 0-7 / 8-15 (even
   elements), wb to 16-23 / 24-31 (odd). */
typedef struct {
    __m256i wa, wb;
} words32;

static inline __attribute__((always_inline)) words32 decode_words(const uint8_t *q, uint8_t scale) {
    const __m256i arrange = _mm256_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, 0, 1, 2, 3, 8, 9, 10, 11,
                                             4, 5, 6, 7, 12, 13, 14, 15, 4, 5, 6, 7, 12, 13, 14, 15);
    const __m256i low4 = _mm256_set1_epi8(0x0F), shifts = _mm256_setr_epi32(0, 0, 4, 4, 0, 0, 4, 4);
    __m256i t = _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)q)), arrange);
    __m256i codes = _mm256_and_si256(_mm256_srlv_epi32(t, shifts), low4);
    const __m128i *table = (const __m128i *)k3_bf16_bytes[scale];
    __m256i hi = _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(_mm_load_si128(table)), codes);
    __m256i lo = _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(_mm_load_si128(table + 1)), codes);
    words32 w = {_mm256_unpacklo_epi8(lo, hi), _mm256_unpackhi_epi8(lo, hi)};
    return w;
}

/* Widening a word vector to f32: the bf16 in the high half of each dword. */
static inline __m256 widen_lo(__m256i w) { return _mm256_castsi256_ps(_mm256_unpacklo_epi16(_mm256_setzero_si256(), w)); }
static inline __m256 widen_hi(__m256i w) { return _mm256_castsi256_ps(_mm256_unpackhi_epi16(_mm256_setzero_si256(), w)); }

#endif
