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

typedef struct {
    const float *x, *w, *state;
    float *out;
    size_t T, C, K, blocks, n_tasks;
    float *wt; /* n_tasks x K x CONV_BLOCK */
} conv_job;

/* Blocks task, task + n_tasks, ...: conv, then SiLU of the block's channels (elementwise: the same
   values whichever thread runs them). */
static void conv_task(void *ctx, int task) {
    const conv_job *job = ctx;
    float *wt = job->wt + (size_t)task * job->K * CONV_BLOCK;
    for (size_t b = (size_t)task; b < job->blocks; b += job->n_tasks) {
        size_t c0 = b * CONV_BLOCK;
        size_t n = job->C - c0 < CONV_BLOCK ? job->C - c0 : CONV_BLOCK;
        transpose_taps(job->w, c0, n, job->K, wt);
        conv_block(job->x, job->state, wt, job->out, job->T, job->C, job->K, c0, n);
        for (size_t t = 0; t < job->T; t++) k3_kda_dense()->silu(job->out + t * job->C + c0, job->out + t * job->C + c0, n);
    }
}

int k3_kda_short_conv(const float *x, const float *w, float *state, float *out, size_t T, size_t C, size_t K) {
    if (T == 0 || C == 0) return 0;
    size_t blocks = (C + CONV_BLOCK - 1) / CONV_BLOCK;
    size_t n_tasks = (size_t)k3_kda_dense()->thread_count() * 2;
    if (n_tasks > blocks) n_tasks = blocks;
    float *wt = malloc(n_tasks * K * CONV_BLOCK * sizeof(float));
    if (!wt) return -1;
    conv_job job = {x, w, state, out, T, C, K, blocks, n_tasks, wt};
    k3_kda_dense()->parallel_for((int)n_tasks, conv_task, &job);
    free(wt);
    /* New state = the last K-1 entries of [state; x] (after every task has read the old one). Rows
       are copied oldest first, and a row of the old state is only read before it is overwritten
       (source index >= destination index). */
    for (size_t r = 0; r + 1 < K; r++) {
        size_t u = T + r;
        if (u < K - 1)
            memmove(state + r * C, state + u * C, C * sizeof(float));
        else
            memcpy(state + r * C, x + (u - (K - 1)) * C, C * sizeof(float));
    }
    return 0;
}
