/*
 * kda_gate.c: the KDA forget gate in log space (docs/architecture.md §2.3), A_log per HEAD.
 *   K3  (form 0): g[h,d] = lower_bound * sigmoid(exp(A_log[h]) * (z[h,d] + dt_bias[h,d]))   in (lb, 0)
 *   48B (form 1): g[h,d] = -exp(A_log[h]) * softplus(z[h,d] + dt_bias[h,d])                  <= 0
 * softplus(y) = max(y, 0) + log1p(exp(-|y|)) (no threshold cut-off). One implementation for all levels.
 */
#include <math.h>
#include "k3_kda.h"

static float sigmoidf(float y) { return 1.0f / (1.0f + expf(-y)); }

static float softplusf(float y) { return fmaxf(y, 0.0f) + log1pf(expf(-fabsf(y))); }

typedef struct {
    const float *z_raw, *dt_bias, *a_log;
    float *g;
    size_t rows, H, dk, per_task; /* rows = T x H, each of dk channels */
    int form;
    float lower_bound;
} gate_job;

/* Rows [task x per_task, ...) of (token, head); elementwise, so any split gives the same values. */
static void gate_task(void *ctx, int task) {
    const gate_job *job = ctx;
    size_t begin = (size_t)task * job->per_task;
    size_t end = begin + job->per_task < job->rows ? begin + job->per_task : job->rows;
    for (size_t row = begin; row < end; row++) {
        size_t h = row % job->H;
        float rate = expf(job->a_log[h]);
        const float *z_row = job->z_raw + row * job->dk;
        const float *bias = job->dt_bias + h * job->dk;
        float *g_row = job->g + row * job->dk;
        for (size_t d = 0; d < job->dk; d++) {
            float z = z_row[d] + bias[d];
            g_row[d] = job->form == 0 ? job->lower_bound * sigmoidf(rate * z) : -rate * softplusf(z);
        }
    }
}

void k3_kda_gate(const float *z_raw, const float *dt_bias, const float *a_log, float *g, size_t T, size_t H,
                 size_t dk, int form, float lower_bound) {
    size_t rows = T * H;
    if (rows == 0) return;
    size_t n_tasks = (size_t)k3_kda_dense()->thread_count() * 4;
    size_t per_task = (rows + n_tasks - 1) / n_tasks;
    gate_job job = {z_raw, dt_bias, a_log, g, rows, H, dk, per_task, form, lower_bound};
    k3_kda_dense()->parallel_for((int)((rows + per_task - 1) / per_task), gate_task, &job);
}
