/*
 * utf8.h: bounds-checked UTF-8 decoding for the pre-tokenizer. Input normally comes from
 * TextEncoder (always valid); anything malformed or truncated decodes as one byte of U+FFFD so a
 * hostile buffer can never make the splitter read past `end`.
 */
#ifndef K3_UTF8_H
#define K3_UTF8_H

#include <stddef.h>
#include <stdint.h>

static inline uint32_t k3_utf8_decode(const uint8_t *s, size_t i, size_t end, size_t *len) {
    uint8_t b0 = s[i];
    if (b0 < 0x80) { *len = 1; return b0; }
    if (b0 >= 0xC2 && b0 < 0xE0 && i + 1 < end && (s[i + 1] & 0xC0) == 0x80) {
        *len = 2;
        return ((uint32_t)(b0 & 0x1F) << 6) | (s[i + 1] & 0x3F);
    }
    if (b0 >= 0xE0 && b0 < 0xF0 && i + 2 < end && (s[i + 1] & 0xC0) == 0x80 && (s[i + 2] & 0xC0) == 0x80) {
        *len = 3;
        return ((uint32_t)(b0 & 0x0F) << 12) | ((uint32_t)(s[i + 1] & 0x3F) << 6) | (s[i + 2] & 0x3F);
    }
    if (b0 >= 0xF0 && b0 < 0xF5 && i + 3 < end && (s[i + 1] & 0xC0) == 0x80 && (s[i + 2] & 0xC0) == 0x80 &&
        (s[i + 3] & 0xC0) == 0x80) {
        *len = 4;
        return ((uint32_t)(b0 & 0x07) << 18) | ((uint32_t)(s[i + 1] & 0x3F) << 12) | ((uint32_t)(s[i + 2] & 0x3F) << 6) |
               (s[i + 3] & 0x3F);
    }
    *len = 1;
    return 0xFFFD;
}

#endif
