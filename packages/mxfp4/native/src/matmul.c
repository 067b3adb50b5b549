/* matmul.c: splits rows over the k3 pool (from @k3/dense's table) and picks the SIMD variant. */
#include <stdlib.h>
#include "mxfp4.h"

#define ROWS_PER_TASK_MIN 16

static const k3_dense_api *dense;

void k3_mxfp4_set_dense_api(const k3_dense_api *api) { dense = api; }
const k3_dense_api *k3_mxfp4_dense_api(void) { return dense; }

static k3_mxfp4_rows_fn variant_for(k3_simd_level level) {
    switch (level) {
        case K3_SIMD_AVX512: return k3_mxfp4_rows_avx512;
        case K3_SIMD_AVX2: return k3_mxfp4_rows_avx2;
        default: return k3_mxfp4_rows_scalar;
    }
}

typedef struct {
    k3_mxfp4_rows_fn rows_fn;
    const k3_mxfp4_matrix *m;
    const float *xs;
    float *y;
    size_t batch, rows_per_task;
} matmul_job;

static void matmul_task(void *ctx, int task_index) {
    const matmul_job *job = ctx;
    size_t begin = (size_t)task_index * job->rows_per_task;
    size_t end = begin + job->rows_per_task;
    if (end > job->m->rows) end = job->m->rows;
    job->rows_fn(job->m, job->xs, job->y, job->batch, begin, end);
}

void k3_mxfp4_rows_split(const k3_mxfp4_matrix *m, const float *xs, float *y, size_t batch, size_t row_begin,
                         size_t row_end) {
    if (row_begin >= row_end || batch == 0) return;
    if (m->cols == 0) {
        for (size_t b = 0; b < batch; b++)
            for (size_t r = row_begin; r < row_end; r++) y[b * m->rows + r] = 0.0f;
        return;
    }
    variant_for(dense->simd_level())(m, xs, y, batch, row_begin, row_end);
}

void k3_mxfp4_matmul_split(const k3_mxfp4_matrix *m, const float *xs, float *y, size_t batch) {
    if (m->rows == 0 || batch == 0) return;
    if (m->cols == 0) {
        for (size_t i = 0; i < m->rows * batch; i++) y[i] = 0.0f;
        return;
    }
    size_t tasks = (size_t)dense->thread_count() * 4;
    size_t per_task = (m->rows + tasks - 1) / tasks;
    if (per_task < ROWS_PER_TASK_MIN) per_task = ROWS_PER_TASK_MIN;
    per_task = (per_task + 3) / 4 * 4; /* whole 4-row tiles */
    matmul_job job = {variant_for(dense->simd_level()), m, xs, y, batch, per_task};
    dense->parallel_for((int)((m->rows + per_task - 1) / per_task), matmul_task, &job);
}

int k3_mxfp4_matmul(const k3_mxfp4_matrix *m, const float *x, float *y, size_t batch) {
    float *xs = malloc((m->cols * batch > 0 ? m->cols * batch : 1) * sizeof(float));
    if (!xs) return -1;
    k3_mxfp4_split_activations(x, m->cols, batch, xs);
    k3_mxfp4_matmul_split(m, xs, y, batch);
    free(xs);
    return 0;
}
