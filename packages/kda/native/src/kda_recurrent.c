/*
 * kda_recurrent.c: the token-by-token recurrence (architecture.md 2.5), heads split over the pool.
 *   S <- diag(alpha_t) S;  e = v_t - S^T k_t;  S <- S + beta_t k_t e^T;  o_t = S^T q_t (after the write)
 * alpha_t = kexp(g_t) (kda_exp.h), the same exp the chunked form uses for its decays.
 */
#include <stdlib.h>
#include "k3_kda.h"
#include "kda_simd.h"
#include "state_bf16.h"

typedef struct {
    const kda_kernels *kern;
    const float *q, *k, *v, *g, *beta;
    void *S;
    int state_bf16;
    float *o;
    size_t T, H, dk, dv;
    float *scratch;
    size_t scratch_per_head;
} recurrent_job;

static void recurrent_head(void *ctx, int task) {
    const recurrent_job *job = ctx;
    size_t h = (size_t)task, H = job->H, dk = job->dk, dv = job->dv;
    size_t state_len = dk * dv;
    float *alpha = job->scratch + h * job->scratch_per_head, *e = alpha + dk;
    float *S;
    if (job->state_bf16) {
        S = e + dv;
        kda_bf16_widen((const uint16_t *)job->S + h * state_len, S, state_len);
    } else {
        S = (float *)job->S + h * state_len;
    }
    for (size_t t = 0; t < job->T; t++) {
        size_t at = t * H + h;
        job->kern->exp_diff(job->g + at * dk, NULL, alpha, dk);
        job->kern->step_head(S, dk, dv, alpha, job->k + at * dk, job->q + at * dk, job->v + at * dv, job->beta[at],
                             job->o + at * dv, e);
        if (job->state_bf16) { /* the bf16 state is what persists: round it after every token */
            kda_bf16_round(S, (uint16_t *)job->S + h * state_len, state_len);
            kda_bf16_widen((const uint16_t *)job->S + h * state_len, S, state_len);
        }
    }
}

int k3_kda_recurrent(const float *q, const float *k, const float *v, const float *g, const float *beta, void *S,
                     int state_bf16, float *o, size_t T, size_t H, size_t dk, size_t dv) {
    size_t per_head = dk + dv + (state_bf16 ? dk * dv : 0);
    float *scratch = malloc(H * per_head * sizeof(float));
    if (!scratch) return -1;
    recurrent_job job = {kda_kernels_current(), q, k, v, g, beta, S, state_bf16, o, T, H, dk, dv, scratch, per_head};
    k3_kda_dense()->parallel_for((int)H, recurrent_head, &job);
    free(scratch);
    return 0;
}
