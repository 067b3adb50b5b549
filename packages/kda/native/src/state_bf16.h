/* state_bf16.h: widening and rounding of a bf16-stored KDA state (round to nearest even). */
#ifndef K3_KDA_STATE_BF16_H
#define K3_KDA_STATE_BF16_H
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Exact: a bf16 is the high half of an f32. */
static inline float kda_bf16_to_f32(uint16_t b) {
    uint32_t bits = (uint32_t)b << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* Round to nearest even; branch-free so loops over it vectorise. A NaN keeps its sign and stays a
   (quiet) NaN. */
static inline uint16_t kda_f32_to_bf16(float x) {
    uint32_t b;
    memcpy(&b, &x, sizeof b);
    uint32_t is_nan = (b & 0x7fffffffu) > 0x7f800000u;
    uint32_t rounded = (b + 0x7fffu + ((b >> 16) & 1u)) >> 16;
    uint32_t quiet = (b >> 16) | 0x0040u;
    return (uint16_t)(is_nan ? quiet : rounded);
}

void kda_bf16_widen(const uint16_t *src, float *dst, size_t n);
void kda_bf16_round(const float *src, uint16_t *dst, size_t n);

#endif
