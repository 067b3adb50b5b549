/*
 * st_utf8.c: UTF-8 validation with Rust's str rules (no overlongs, no surrogates, <= U+10FFFF).
 * ASCII runs are skipped 32 (then 8) bytes at a time: headers are almost entirely ASCII.
 */
#include <string.h>
#include "k3_safetensors.h"

int64_t st_utf8_first_invalid(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        /* 32 bytes per step while all ASCII: one test for four words keeps the loop overhead
           off the ~135 MB a K3 checkpoint's headers and index.json hold. */
        if (i + 32 <= n) {
            uint64_t a, b, c, d;
            memcpy(&a, s + i, 8);
            memcpy(&b, s + i + 8, 8);
            memcpy(&c, s + i + 16, 8);
            memcpy(&d, s + i + 24, 8);
            if (((a | b | c | d) & 0x8080808080808080ull) == 0) {
                i += 32;
                continue;
            }
        }
        if (i + 8 <= n) {
            uint64_t w;
            memcpy(&w, s + i, 8);
            if ((w & 0x8080808080808080ull) == 0) {
                i += 8;
                continue;
            }
        }
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
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
