/*
 * short_conv.c: depthwise causal conv + SiLU with carried state (docs/architecture.md §2.1).
 *   u_t[c] = SiLU( sum_{j=0..K-1} w[c][j] * x_{t-(K-1)+j}[c] ),  tap K-1 = the current token.
 * Inputs before this call come from `state` (the last K-1 pre-conv inputs, oldest first). The sum
 * runs j = 0, 1, ..., K-1 (separate multiply and add); SiLU is @k3/dense's (through k3_dense_api).
 */
#include <string.h>
#include "k3_kda.h"

/* The pre-conv input at position u of the sequence [state; x] (u < K-1 is in the state). */
static float tap_input(const float *x, const float *state, size_t u, size_t c, size_t C, size_t K) {
    return u < K - 1 ? state[u * C + c] : x[(u - (K - 1)) * C + c];
}

void k3_kda_short_conv(const float *x, const float *w, float *state, float *out, size_t T, size_t C, size_t K) {
    for (size_t t = 0; t < T; t++)
        for (size_t c = 0; c < C; c++) {
            float acc = 0.0f;
            for (size_t j = 0; j < K; j++) acc += w[c * K + j] * tap_input(x, state, t + j, c, C, K);
            out[t * C + c] = acc;
        }
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
}
