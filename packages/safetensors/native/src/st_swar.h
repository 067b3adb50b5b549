/*
 * st_swar.h: 8-bytes-at-a-time scanning in plain C (no ISA-specific code). Finds the end of
 * the plain part of a JSON string: the first '"', '\\' or control byte (< 0x20).
 * The has-zero trick can flag false positives only above a true match, so the lowest flagged
 * byte is always the first real one.
 */
#ifndef ST_SWAR_H
#define ST_SWAR_H

#include <stdint.h>
#include <string.h>

#define ST_ONES 0x0101010101010101ull
#define ST_HIGHS 0x8080808080808080ull

static inline uint64_t st_zero_bytes(uint64_t v) { return (v - ST_ONES) & ~v & ST_HIGHS; }

static inline size_t st_plain_string_end(const uint8_t *b, size_t p, size_t n) {
    while (p + 8 <= n) {
        uint64_t w;
        memcpy(&w, b + p, 8);
        uint64_t hit = st_zero_bytes(w ^ (0x22 * ST_ONES)) | st_zero_bytes(w ^ (0x5c * ST_ONES)) |
                       ((w - 0x20 * ST_ONES) & ~w & ST_HIGHS);
        if (hit) return p + ((size_t)__builtin_ctzll(hit) >> 3);
        p += 8;
    }
    while (p < n && b[p] != '"' && b[p] != '\\' && b[p] >= 0x20) p++;
    return p;
}

#endif
