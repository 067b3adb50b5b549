#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl")
/*
 * st_strend_avx512.c: the end of the plain part of a JSON string (first '"', '\\' or byte
 * < 0x20), 64 bytes per step; the last < 64 bytes through a masked load, which never touches
 * memory past n. Same answer as st_plain_string_end (st_swar.h).
 */
#include <immintrin.h>
#include "st_strend.h"

static uint64_t hits(__m512i v) {
    return _mm512_cmpeq_epi8_mask(v, _mm512_set1_epi8('"')) | _mm512_cmpeq_epi8_mask(v, _mm512_set1_epi8('\\')) |
           _mm512_cmple_epu8_mask(v, _mm512_set1_epi8(0x1f));
}

size_t st_string_end_avx512(const uint8_t *b, size_t p, size_t n) {
    while (p + 64 <= n) {
        uint64_t mask = hits(_mm512_loadu_si512((const void *)(b + p)));
        if (mask) return p + (size_t)__builtin_ctzll(mask);
        p += 64;
    }
    if (p >= n) return n;
    __mmask64 live = ~0ull >> (64 - (n - p)); /* n - p in [1, 63] */
    uint64_t mask = hits(_mm512_maskz_loadu_epi8(live, b + p)) & live;
    return mask ? p + (size_t)__builtin_ctzll(mask) : n;
}
