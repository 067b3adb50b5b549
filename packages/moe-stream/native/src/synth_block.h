/* synth_block.h: the precomputed blocks of `k3 synth` (packages/engine/src/synth.ts), built off the JS thread. */
#ifndef K3_SYNTH_BLOCK_H
#define K3_SYNTH_BLOCK_H

#include <stdint.h>

enum { K3_SYNTH_NORMAL_BF16 = 0, K3_SYNTH_NORMAL_F32 = 1, K3_SYNTH_NIBBLES = 2, K3_SYNTH_E8M0 = 3 };

/* Bytes per element of a kind (2, 4, 1, 1); 0 for an unknown kind. */
uint32_t k3_synth_elem_bytes(int kind);

/*
 * n elements of `kind` from the sfc32 stream whose state is `state` (a, b, c, d), written twice:
 * out[0, n*esize) and again at out[n*esize, 2*n*esize) (so any window of <= n elements is
 * contiguous). The bytes of synth.ts's encode() bit for bit (it is the reference): normal = mean +
 * std * Irwin-Hall-4 in double, rounded to f32 (then to bf16, nearest even); nibbles = the stream's
 * words as little-endian bytes; e8m0 = s + bit j of one word per 32 scales.
 */
void k3_synth_block(int kind, const uint32_t state[4], uint64_t n, double mean, double std, uint32_t s, uint8_t *out);

#endif
