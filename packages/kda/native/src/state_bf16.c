/* state_bf16.c: bf16 <-> f32 for the optional bf16 state storage (exact widening, RNE rounding). */
#include "state_bf16.h"

void kda_bf16_widen(const uint16_t *src, float *dst, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = kda_bf16_to_f32(src[i]);
}

void kda_bf16_round(const float *src, uint16_t *dst, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = kda_f32_to_bf16(src[i]);
}
