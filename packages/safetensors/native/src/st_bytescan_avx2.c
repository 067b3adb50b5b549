#pragma GCC target("avx2")
/*
 * st_bytescan_avx2.c: the byte-class scans of st_bytescan.h, 32 bytes per step; the scalar
 * versions finish the last < 32 bytes, so every answer is the scalar one.
 */
#include <immintrin.h>
#include "st_bytescan.h"
#include "st_swar.h"

size_t st_string_end_avx2(const uint8_t *b, size_t p, size_t n) {
    const __m256i quote = _mm256_set1_epi8('"'), backslash = _mm256_set1_epi8('\\'), control_max = _mm256_set1_epi8(0x1f);
    while (p + 32 <= n) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(b + p));
        __m256i control = _mm256_cmpeq_epi8(_mm256_min_epu8(v, control_max), v); /* v <= 0x1f, unsigned */
        __m256i hit = _mm256_or_si256(_mm256_or_si256(_mm256_cmpeq_epi8(v, quote), _mm256_cmpeq_epi8(v, backslash)), control);
        uint32_t mask = (uint32_t)_mm256_movemask_epi8(hit);
        if (mask) return p + (size_t)__builtin_ctz(mask);
        p += 32;
    }
    return st_plain_string_end(b, p, n);
}

size_t st_ascii_end_avx2(const uint8_t *b, size_t p, size_t n) {
    while (p + 32 <= n) {
        uint32_t mask = (uint32_t)_mm256_movemask_epi8(_mm256_loadu_si256((const __m256i *)(b + p)));
        if (mask) return p + (size_t)__builtin_ctz(mask);
        p += 32;
    }
    return st_ascii_end_scalar(b, p, n);
}
