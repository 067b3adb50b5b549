/*
 * mla_attend.c: causal softmax attention for MLA (absorbed latent or expanded cache), f32 math.
 *
 * Per (query t, head h): keys are visited in blocks of MLA_KEY_BLOCK positions aligned to absolute
 * positions 0, 64, 128, ...; online softmax keeps a running max m, sum l and unnormalised output
 * acc:  m' = max(m, scores), acc = acc * e^(m - m') + sum_s e^(score_s - m') v_s,  out = acc / l.
 * Scores are scale * dot(q, key) (@k3/dense dot_rows: the gemv order); exp is libm's expf (one implementation for all
 * SIMD levels). Nothing larger than one key block of scores is ever materialised. Tasks split
 * (token, head group) pairs; each task owns its outputs, so results do not depend on threads.
 */
#include <math.h>
#include <stdlib.h>
#include "k3_mla.h"

#define KB MLA_KEY_BLOCK

typedef struct {
    const float *q;
    size_t T, H, dq, dv;
    k3_mla_rows keys, values;
    size_t q_pos0;
    float scale;
    float *out;
    size_t heads_per_task, groups;
    float *scratch;
    size_t per_task, n_tasks;
} attend_job;

/* sc[r][s] = Q[r] . key[s] over the block's positions: @k3/dense's dot_rows (gemv order). */
static void block_scores(const attend_job *job, const float *Q, size_t nrows, size_t h0, size_t b0, size_t npos, float *sc) {
    const k3_mla_rows *k = &job->keys;
    const k3_dense_api *dense = k3_mla_dense();
    for (size_t r = 0; r < nrows; r += (k->head == 0 ? nrows : 1)) {
        size_t rows = k->head == 0 ? nrows : 1;
        size_t idx = k->offset + b0 * k->stride + (h0 + r) * k->head;
        if (k->bf16)
            dense->dot_rows_bf16(rows, npos, job->dq, Q + r * job->dq, job->dq, (const uint16_t *)k->data + idx, k->stride,
                                 sc + r * KB, KB);
        else
            dense->dot_rows_f32(rows, npos, job->dq, Q + r * job->dq, job->dq, (const float *)k->data + idx, k->stride,
                                sc + r * KB, KB);
    }
}

/* acc[r] += P[r] V over the block's positions: @k3/dense's gemm_acc (s ascending, one fmaf chain per value). */
static void block_values(const attend_job *job, const float *P, size_t nrows, size_t h0, size_t b0, size_t npos, float *acc) {
    const k3_mla_rows *v = &job->values;
    const k3_dense_api *dense = k3_mla_dense();
    for (size_t r = 0; r < nrows; r += (v->head == 0 ? nrows : 1)) {
        size_t rows = v->head == 0 ? nrows : 1;
        size_t idx = v->offset + b0 * v->stride + (h0 + r) * v->head;
        if (v->bf16)
            dense->gemm_acc_bf16(rows, job->dv, npos, P + r * KB, KB, (const uint16_t *)v->data + idx, v->stride,
                                 acc + r * job->dv, job->dv);
        else
            dense->gemm_acc_f32(rows, job->dv, npos, P + r * KB, KB, (const float *)v->data + idx, v->stride,
                                acc + r * job->dv, job->dv);
    }
}

/* Online-softmax update of one row with the block's raw scores; writes probabilities into P. */
static void softmax_update(float *sc, float *P, size_t npos, float scale, float *m, float *l, float *acc, size_t dv) {
    float mx = *m;
    for (size_t j = 0; j < npos; j++) {
        sc[j] = sc[j] * scale;
        if (sc[j] > mx) mx = sc[j];
    }
    float corr = expf(*m - mx);
    if (corr != 1.0f) {
        *l = *l * corr;
        for (size_t c = 0; c < dv; c++) acc[c] = acc[c] * corr;
    }
    float sum = *l;
    for (size_t j = 0; j < npos; j++) {
        P[j] = expf(sc[j] - mx);
        sum += P[j];
    }
    *l = sum;
    *m = mx;
}

static void attend_item(const attend_job *job, size_t item, float *scratch) {
    size_t t = item / job->groups, g = item % job->groups;
    size_t h0 = g * job->heads_per_task;
    size_t h1 = h0 + job->heads_per_task < job->H ? h0 + job->heads_per_task : job->H;
    size_t n = h1 - h0, dv = job->dv;
    float *m = scratch;
    float *l = m + n, *acc = l + n, *sc = acc + n * dv, *P = sc + n * KB;
    for (size_t r = 0; r < n; r++) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
    }
    for (size_t x = 0; x < n * dv; x++) acc[x] = 0.0f;
    const float *Q = job->q + (t * job->H + h0) * job->dq;
    size_t last = job->q_pos0 + t; /* inclusive */
    for (size_t b0 = 0; b0 <= last; b0 += KB) {
        size_t npos = last + 1 - b0 < KB ? last + 1 - b0 : KB;
        block_scores(job, Q, n, h0, b0, npos, sc);
        for (size_t r = 0; r < n; r++) softmax_update(sc + r * KB, P + r * KB, npos, job->scale, m + r, l + r, acc + r * dv, dv);
        block_values(job, P, n, h0, b0, npos, acc);
    }
    float *out = job->out + (t * job->H + h0) * dv;
    for (size_t r = 0; r < n; r++)
        for (size_t c = 0; c < dv; c++) out[r * dv + c] = acc[r * dv + c] / l[r];
}

/* Task i runs items i, i + n_tasks, ... (item = token x head group) with one scratch. */
static void attend_task(void *ctx, int task) {
    const attend_job *job = ctx;
    for (size_t item = (size_t)task; item < job->T * job->groups; item += job->n_tasks)
        attend_item(job, item, job->scratch + (size_t)task * job->per_task);
}

int k3_mla_attend(const float *q, size_t T, size_t H, size_t dq, size_t dv, const k3_mla_rows *keys,
                  const k3_mla_rows *values, size_t q_pos0, float scale, float *out) {
    if (T == 0 || H == 0) return 0;
    /* enough tasks to keep the pool busy when T is small (decode: split the heads) */
    size_t want = (size_t)k3_mla_dense()->thread_count() * 4;
    size_t groups = T >= want ? 1 : (want + T - 1) / T;
    if (groups > H) groups = H;
    size_t per = (H + groups - 1) / groups;
    groups = (H + per - 1) / per;
    size_t per_task = 2 * per + per * dv + 2 * per * KB;
    size_t n_tasks = want < T * groups ? want : T * groups;
    float *scratch = malloc(n_tasks * per_task * sizeof(float));
    if (!scratch) return -1;
    attend_job job = {q, T, H, dq, dv, *keys, *values, q_pos0, scale, out, per, groups, scratch, per_task, n_tasks};
    k3_mla_dense()->parallel_for((int)n_tasks, attend_task, &job);
    free(scratch);
    return 0;
}
