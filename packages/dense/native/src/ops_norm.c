/* ops_norm.c: RMSNorm and L2 normalisation (reduction order in ops.h). Rows are independent, so
   a prefill chunk's rows are split over the pool (same bits on any thread count). */
#include <math.h>
#include "ops.h"
#include "pool.h"

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
    size_t dim;
    float eps, scale;
} norm_job;

/* sqrt(mean(x^2) + eps): RMSNorm's divisor of a row. */
static float rms_denom(const norm_job *j, const float *xr) { return sqrtf(sum_of_squares(xr, j->dim) / (float)j->dim + j->eps); }

static void rms_norm_rows(void *ctx, size_t r0, size_t r1) {
    const norm_job *j = ctx;
    for (size_t r = r0; r < r1; r++) {
        const float *xr = j->x + r * j->dim;
        float *o = j->out + r * j->dim;
        float denom = rms_denom(j, xr);
        for (size_t k = 0; k < j->dim; k++) o[k] = j->w[k] * (xr[k] / denom);
    }
}

/* out[r] = (float) sum_d (double) (w[d] * (x[d] / denom)): each normed value exactly as rms_norm_rows
   makes it, summed in double in index order. */
static void rms_norm_dot_rows(void *ctx, size_t r0, size_t r1) {
    const norm_job *j = ctx;
    for (size_t r = r0; r < r1; r++) {
        const float *xr = j->x + r * j->dim;
        float denom = rms_denom(j, xr);
        double s = 0.0;
        for (size_t k = 0; k < j->dim; k++) {
            float v = j->w[k] * (xr[k] / denom);
            s += (double)v;
        }
        j->out[r] = (float)s;
    }
}

static void l2_normalize_rows(void *ctx, size_t r0, size_t r1) {
    const norm_job *j = ctx;
    for (size_t r = r0; r < r1; r++) {
        const float *xr = j->x + r * j->dim;
        float *o = j->out + r * j->dim;
        float denom = sqrtf(sum_of_squares(xr, j->dim) + j->eps);
        for (size_t k = 0; k < j->dim; k++) o[k] = (xr[k] / denom) * j->scale;
    }
}

/* The job's n_rows rows in ranges of about K3_OPS_PIECE values. */
static void run_rows(norm_job *j, size_t n_rows, k3_range_fn rows) {
    if (j->dim == 0) return;
    k3_pool_for_ranges(n_rows, j->dim >= K3_OPS_PIECE ? 1 : K3_OPS_PIECE / j->dim, rows, j);
}

void k3_rms_norm(const float *x, const float *w, float eps, float *out, size_t dim, size_t n_rows) {
    norm_job j = {.x = x, .w = w, .out = out, .dim = dim, .eps = eps};
    run_rows(&j, n_rows, rms_norm_rows);
}

void k3_rms_norm_dot(const float *x, const float *w, float eps, size_t dim, size_t n_rows, float *out) {
    norm_job j = {.x = x, .w = w, .out = out, .dim = dim, .eps = eps};
    run_rows(&j, n_rows, rms_norm_dot_rows);
}

void k3_l2_normalize_scaled(const float *x, float *out, size_t dim, float eps, float scale, size_t n_rows) {
    norm_job j = {.x = x, .out = out, .dim = dim, .eps = eps, .scale = scale};
    run_rows(&j, n_rows, l2_normalize_rows);
}

void k3_l2_normalize(const float *x, float *out, size_t dim, float eps, size_t n_rows) {
    k3_l2_normalize_scaled(x, out, dim, eps, 1.0f, n_rows);
}
