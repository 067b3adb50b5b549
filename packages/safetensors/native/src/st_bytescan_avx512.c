#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl")
/*
 * st_bytescan_avx512.c: the byte-class scans of st_bytescan.h, 64 bytes per step; the last
 * < 64 bytes through a masked load, which never touches memory past n. Same answers as the
 * scalar versions.
 */
#include <immintrin.h>
#include "st_bytescan.h"

static inline uint64_t string_hits(__m512i v) {
    return _mm512_cmpeq_epi8_mask(v, _mm512_set1_epi8('"')) | _mm512_cmpeq_epi8_mask(v, _mm512_set1_epi8('\\')) |
           _mm512_cmple_epu8_mask(v, _mm512_set1_epi8(0x1f));
}

static inline uint64_t ascii_hits(__m512i v) { return _mm512_movepi8_mask(v); }

/* The first byte at or after p that `hits` flags, else n (inlined with each hits function). */
static inline size_t scan(const uint8_t *b, size_t p, size_t n, uint64_t (*hits)(__m512i)) {
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

size_t st_string_end_avx512(const uint8_t *b, size_t p, size_t n) { return scan(b, p, n, string_hits); }

size_t st_ascii_end_avx512(const uint8_t *b, size_t p, size_t n) { return scan(b, p, n, ascii_hits); }
