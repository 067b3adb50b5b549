/* state_bf16.c: bf16 <-> f32 for the optional bf16 state storage (exact widening, RNE rounding). */
#include <string.h>
#include "state_bf16.h"

void kda_bf16_widen(const uint16_t *src, float *dst, size_t n) {
    for (size_t i = 0; i < n; i++) {
        uint32_t bits = (uint32_t)src[i] << 16;
        memcpy(dst + i, &bits, sizeof bits);
    }
}

/* Branch-free so the compiler vectorises it; a NaN keeps its sign and stays a (quiet) NaN. */
void kda_bf16_round(const float *src, uint16_t *dst, size_t n) {
    for (size_t i = 0; i < n; i++) {
        uint32_t b;
        memcpy(&b, src + i, sizeof b);
        uint32_t is_nan = (b & 0x7fffffffu) > 0x7f800000u;
        uint32_t rounded = (b + 0x7fffu + ((b >> 16) & 1u)) >> 16;
        uint32_t quiet = (b >> 16) | 0x0040u;
        dst[i] = (uint16_t)(is_nan ? quiet : rounded);
    }
}
