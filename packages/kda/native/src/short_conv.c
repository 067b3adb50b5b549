/*
 * short_conv.c: depthwise causal conv + SiLU with carried state (docs/architecture.md §2.1).
 *   u_t[c] = SiLU( sum_{j=0..K-1} w[c][j] * x_{t-(K-1)+j}[c] ),  tap K-1 = the current token.
 * Inputs before this call come from `state` (the last K-1 pre-conv inputs, oldest first). The sum
 * runs j = 0, 1, ..., K-1 (separate multiply and add); SiLU is @k3/dense's (through k3_dense_api).
 */
#include <stdlib.h>
#include <string.h>
#include "k3_kda.h"

/* Channels per block: the taps' weights of a block, transposed, stay in L1 (K x 512 floats). */
#define CONV_BLOCK 512

/* The pre-conv input row at position u of the sequence [state; x] (u < K-1 is in the state). */
static const float *tap_row(const float *x, const float *state, size_t u, size_t C, size_t K) {
    return u < K - 1 ? state + u * C : x + (u - (K - 1)) * C;
}

/* w [C][K] -> wt [K][n] for channels c0..c0+n: each tap's weights contiguous, so the sum below runs
   over contiguous channels (vectorised) in the same order per channel: j = 0, 1, ..., K-1. */
static void transpose_taps(const float *w, size_t c0, size_t n, size_t K, float *wt) {
    for (size_t c = 0; c < n; c++)
        for (size_t j = 0; j < K; j++) wt[j * n + c] = w[(c0 + c) * K + j];
}

static void conv_block(const float *x, const float *state, const float *wt, float *out, size_t T, size_t C, size_t K,
                       size_t c0, size_t n) {
    for (size_t t = 0; t < T; t++) {
        float *o = out + t * C + c0;
        for (size_t c = 0; c < n; c++) o[c] = 0.0f;
        for (size_t j = 0; j < K; j++) {
            const float *in = tap_row(x, state, t + j, C, K) + c0;
            const float *wj = wt + j * n;
            for (size_t c = 0; c < n; c++) o[c] = o[c] + wj[c] * in[c];
        }
    }
}

int k3_kda_short_conv(const float *x, const float *w, float *state, float *out, size_t T, size_t C, size_t K) {
    float *wt = malloc(K * CONV_BLOCK * sizeof(float));
    if (!wt) return -1;
    for (size_t c0 = 0; c0 < C; c0 += CONV_BLOCK) {
        size_t n = C - c0 < CONV_BLOCK ? C - c0 : CONV_BLOCK;
        transpose_taps(w, c0, n, K, wt);
        conv_block(x, state, wt, out, T, C, K, c0, n);
    }
    free(wt);
    k3_kda_dense()->silu(out, out, T * C);
    /* New state = the last K-1 entries of [state; x]. Rows are copied oldest first, and a row of
       the old state is only read before it is overwritten (source index >= destination index). */
    for (size_t r = 0; r + 1 < K; r++) {
        size_t u = T + r;
        if (u < K - 1)
            memmove(state + r * C, state + u * C, C * sizeof(float));
        else
            memcpy(state + r * C, x + (u - (K - 1)) * C, C * sizeof(float));
    }
    return 0;
}
