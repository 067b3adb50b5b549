/* state_bf16.c: bf16 <-> f32 for the optional bf16 state storage (exact widening, RNE rounding). */
#include <string.h>
#include "state_bf16.h"

void kda_bf16_widen(const uint16_t *src, float *dst, size_t n) {
    for (size_t i = 0; i < n; i++) {
        uint32_t bits = (uint32_t)src[i] << 16;
        memcpy(dst + i, &bits, sizeof bits);
    }
}

void kda_bf16_round(const float *src, uint16_t *dst, size_t n) {
    for (size_t i = 0; i < n; i++) {
        uint32_t b;
        memcpy(&b, src + i, sizeof b);
        if ((b & 0x7f800000u) == 0x7f800000u && (b & 0x007fffffu) != 0)
            dst[i] = (uint16_t)((b >> 16) | 0x0040u); /* NaN stays NaN */
        else
            dst[i] = (uint16_t)((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
    }
}
