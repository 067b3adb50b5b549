/* ops_norm.c: RMSNorm and L2 normalisation (reduction order in ops.h). Rows are independent, so
   a prefill chunk's rows are split over the pool (same bits on any thread count). */
#include <math.h>
#include "ops.h"
#include "pool.h"

/* Values per pool task: a [64, 12288] KDA chunk's q is 96 tasks, a decode row stays inline. */
#define NORM_PIECE 8192

static float sum_of_squares(const float *x, size_t dim) {
    float lane[16] = {0};
    for (size_t k = 0; k < dim; k++) lane[k % 16] = fmaf(x[k], x[k], lane[k % 16]);
    for (int h = 8; h >= 1; h /= 2)
        for (int i = 0; i < h; i++) lane[i] += lane[i + h];
    return lane[0];
}

typedef struct {
    const float *x, *w;
    float *out;
    size_t dim, n_rows, rows_per_task;
    float eps, scale;
} norm_job;

static void rms_norm_rows(const norm_job *j, size_t r0, size_t r1) {
    for (size_t r = r0; r < r1; r++) {
        const float *xr = j->x + r * j->dim;
        float *o = j->out + r * j->dim;
        float denom = sqrtf(sum_of_squares(xr, j->dim) / (float)j->dim + j->eps);
        for (size_t k = 0; k < j->dim; k++) o[k] = j->w[k] * (xr[k] / denom);
    }
}

static void l2_normalize_rows(const norm_job *j, size_t r0, size_t r1) {
    for (size_t r = r0; r < r1; r++) {
        const float *xr = j->x + r * j->dim;
        float *o = j->out + r * j->dim;
        float denom = sqrtf(sum_of_squares(xr, j->dim) + j->eps);
        for (size_t k = 0; k < j->dim; k++) o[k] = (xr[k] / denom) * j->scale;
    }
}

/* out[r] = (float) sum_d (double) (w[d] * (x[d] / denom)): each normed value exactly as rms_norm_rows
   makes it, summed in double in index order. */
static void rms_norm_dot_rows(const norm_job *j, size_t r0, size_t r1) {
    for (size_t r = r0; r < r1; r++) {
        const float *xr = j->x + r * j->dim;
        float denom = sqrtf(sum_of_squares(xr, j->dim) / (float)j->dim + j->eps);
        double s = 0.0;
        for (size_t k = 0; k < j->dim; k++) {
            float v = j->w[k] * (xr[k] / denom);
            s += (double)v;
        }
        j->out[r] = (float)s;
    }
}

static void rms_norm_dot_task(void *ctx, int task) {
    const norm_job *j = ctx;
    size_t r0 = (size_t)task * j->rows_per_task;
    size_t r1 = r0 + j->rows_per_task < j->n_rows ? r0 + j->rows_per_task : j->n_rows;
    rms_norm_dot_rows(j, r0, r1);
}

static void rms_norm_task(void *ctx, int task) {
    const norm_job *j = ctx;
    size_t r0 = (size_t)task * j->rows_per_task;
    size_t r1 = r0 + j->rows_per_task < j->n_rows ? r0 + j->rows_per_task : j->n_rows;
    rms_norm_rows(j, r0, r1);
}

static void l2_normalize_task(void *ctx, int task) {
    const norm_job *j = ctx;
    size_t r0 = (size_t)task * j->rows_per_task;
    size_t r1 = r0 + j->rows_per_task < j->n_rows ? r0 + j->rows_per_task : j->n_rows;
    l2_normalize_rows(j, r0, r1);
}

/* Runs `task` over the job's rows in pieces of about NORM_PIECE values (inline when one piece). */
static void run_rows(norm_job *j, void (*task)(void *, int)) {
    if (j->n_rows == 0) return;
    j->rows_per_task = j->dim >= NORM_PIECE ? 1 : NORM_PIECE / j->dim;
    size_t tasks = (j->n_rows + j->rows_per_task - 1) / j->rows_per_task;
    if (tasks == 1) task(j, 0);
    else k3_pool_parallel_for((int)tasks, task, j);
}

void k3_rms_norm(const float *x, const float *w, float eps, float *out, size_t dim, size_t n_rows) {
    norm_job j = {.x = x, .w = w, .out = out, .dim = dim, .n_rows = n_rows, .eps = eps};
    run_rows(&j, rms_norm_task);
}

void k3_rms_norm_dot(const float *x, const float *w, float eps, size_t dim, size_t n_rows, float *out) {
    norm_job j = {.x = x, .w = w, .out = out, .dim = dim, .n_rows = n_rows, .eps = eps};
    run_rows(&j, rms_norm_dot_task);
}

void k3_l2_normalize_scaled(const float *x, float *out, size_t dim, float eps, float scale, size_t n_rows) {
    norm_job j = {.x = x, .out = out, .dim = dim, .n_rows = n_rows, .eps = eps, .scale = scale};
    run_rows(&j, l2_normalize_task);
}

void k3_l2_normalize(const float *x, float *out, size_t dim, float eps, size_t n_rows) {
    k3_l2_normalize_scaled(x, out, dim, eps, 1.0f, n_rows);
}
