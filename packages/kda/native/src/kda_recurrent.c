/*
 * kda_recurrent.c: the token-by-token recurrence (docs/architecture.md §2.5), heads split over the pool.
 *   S <- diag(alpha_t) S;  e = v_t - S^T k_t;  S <- S + beta_t k_t e^T;  o_t = S^T q_t (after the write)
 * alpha_t = k3_expf(g_t) (@k3/dense k3_exp.h), the same exp the chunked form uses for its decays.
 */
#include <stdlib.h>
#include "k3_kda.h"
#include "kda_simd.h"
#include "kda_fpmode.h"

typedef struct {
    const kda_kernels *kern;
    const float *q, *k, *v, *g, *beta;
    void *S;
    int state_bf16;
    float *o;
    size_t T, H, dk, dv;
    float *scratch;
    size_t scratch_per_task, n_tasks;
} recurrent_job;

static void recurrent_head(const recurrent_job *job, size_t h, float *scratch) {
    size_t H = job->H, dk = job->dk, dv = job->dv;
    size_t state_len = dk * dv;
    float *alpha = scratch, *e = alpha + dk, *work = e + dv;
    for (size_t t = 0; t < job->T; t++) {
        size_t at = t * H + h;
        job->kern->exp_diff(job->g + at * dk, NULL, alpha, dk);
        if (job->state_bf16) /* the bf16 state is what persists: it is rounded after every token */
            job->kern->step_head_bf16((uint16_t *)job->S + h * state_len, work, dk, dv, alpha, job->k + at * dk,
                                      job->q + at * dk, job->v + at * dv, job->beta[at], job->o + at * dv, e);
        else
            job->kern->step_head((float *)job->S + h * state_len, dk, dv, alpha, job->k + at * dk, job->q + at * dk,
                                 job->v + at * dv, job->beta[at], job->o + at * dv, e);
    }
}

/* Task i runs heads i, i + n_tasks, ...: one scratch per task, and each head's result does not
   depend on which task ran it. */
static void recurrent_task(void *ctx, int task) {
    const recurrent_job *job = ctx;
    unsigned mode = kda_flush_subnormals();
    for (size_t h = (size_t)task; h < job->H; h += job->n_tasks)
        recurrent_head(job, h, job->scratch + (size_t)task * job->scratch_per_task);
    kda_restore_fpmode(mode);
}

int k3_kda_recurrent(const float *q, const float *k, const float *v, const float *g, const float *beta, void *S,
                     int state_bf16, float *o, size_t T, size_t H, size_t dk, size_t dv) {
    size_t per_task = dk + dv + (state_bf16 ? dk * dv : 0);
    size_t n_tasks = (size_t)k3_kda_dense()->thread_count() * 4;
    if (n_tasks > H) n_tasks = H;
    float *scratch = malloc(n_tasks * per_task * sizeof(float));
    if (!scratch) return -1;
    recurrent_job job = {kda_kernels_current(), q, k, v, g, beta, S, state_bf16, o, T, H, dk, dv, scratch, per_task, n_tasks};
    k3_kda_dense()->parallel_for((int)n_tasks, recurrent_task, &job);
    free(scratch);
    return 0;
}
