/*
 * st_utf8.c: UTF-8 validation with Rust's str rules (no overlongs, no surrogates, <= U+10FFFF).
 * ASCII runs are skipped by st_ascii_end (SWAR, AVX2 or AVX-512): headers are almost all ASCII.
 */
#include "k3_safetensors.h"
#include "st_bytescan.h"

int64_t st_utf8_first_invalid(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        i = st_ascii_end(s, i, n); /* headers are almost entirely ASCII */
        if (i >= n) break;
        uint8_t c = s[i];
        size_t need;
        uint8_t lo = 0x80, hi = 0xbf;
        if (c >= 0xc2 && c <= 0xdf)
            need = 1;
        else if (c >= 0xe0 && c <= 0xef) {
            need = 2;
            if (c == 0xe0) lo = 0xa0;
            else if (c == 0xed) hi = 0x9f;
        } else if (c >= 0xf0 && c <= 0xf4) {
            need = 3;
            if (c == 0xf0) lo = 0x90;
            else if (c == 0xf4) hi = 0x8f;
        } else
            return (int64_t)i;
        if (i + need >= n) return (int64_t)i;
        if (s[i + 1] < lo || s[i + 1] > hi) return (int64_t)i;
        for (size_t k = 2; k <= need; k++)
            if (s[i + k] < 0x80 || s[i + k] > 0xbf) return (int64_t)i;
        i += need + 1;
    }
    return -1;
}
