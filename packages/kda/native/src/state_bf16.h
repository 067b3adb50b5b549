/* state_bf16.h: widening and rounding of a bf16-stored KDA state (round to nearest even). */
#ifndef K3_KDA_STATE_BF16_H
#define K3_KDA_STATE_BF16_H
#include <stddef.h>
#include <stdint.h>

void kda_bf16_widen(const uint16_t *src, float *dst, size_t n);
void kda_bf16_round(const float *src, uint16_t *dst, size_t n);

#endif
