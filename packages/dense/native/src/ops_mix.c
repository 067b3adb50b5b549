/* ops_mix.c: the residual stream's sums: a per-token weighted sum of source rows (K3's
   attention-residual mix) and the plain elementwise add (ops.h). Every value is independent, so a
   chunk's rows are split over the pool (same bits on any thread count); the mix accumulates each
   value in double and rounds it to float per source, in source order. */
#include "ops.h"
#include "pool.h"

/* Values per pool task (rows x sources x dim), as the other pooled element-wise ops. */
#define MIX_PIECE 8192

typedef struct {
    const float *const *src;
    size_t n_src;
    const float *pi;
    size_t dim, n_rows, rows_per_task;
    float *out;
} mix_job;

static void mix_row(const mix_job *j, size_t t) {
    float *o = j->out + t * j->dim;
    for (size_t d = 0; d < j->dim; d++) o[d] = 0.0f;
    for (size_t i = 0; i < j->n_src; i++) {
        const double p = (double)j->pi[t * j->n_src + i];
        const float *v = j->src[i] + t * j->dim;
        for (size_t d = 0; d < j->dim; d++) o[d] = (float)((double)o[d] + p * (double)v[d]);
    }
}

static void mix_task(void *ctx, int task) {
    const mix_job *j = ctx;
    size_t r0 = (size_t)task * j->rows_per_task;
    size_t r1 = r0 + j->rows_per_task < j->n_rows ? r0 + j->rows_per_task : j->n_rows;
    for (size_t t = r0; t < r1; t++) mix_row(j, t);
}

void k3_mix_rows(const float *const *src, size_t n_src, const float *pi, size_t dim, size_t n_rows, float *out) {
    if (n_rows == 0 || dim == 0) return;
    size_t per_row = dim * (n_src ? n_src : 1);
    mix_job j = {src, n_src, pi, dim, n_rows, per_row >= MIX_PIECE ? 1 : MIX_PIECE / per_row, out};
    size_t tasks = (n_rows + j.rows_per_task - 1) / j.rows_per_task;
    if (tasks == 1) mix_task(&j, 0);
    else k3_pool_parallel_for((int)tasks, mix_task, &j);
}

/* ---------------------------------------------------------------- add */

typedef struct {
    const float *a, *b;
    float *out;
    size_t n;
} add_job;

static void add_task(void *ctx, int task) {
    const add_job *j = ctx;
    size_t lo = (size_t)task * MIX_PIECE;
    size_t hi = lo + MIX_PIECE < j->n ? lo + MIX_PIECE : j->n;
    for (size_t i = lo; i < hi; i++) j->out[i] = j->a[i] + j->b[i];
}

void k3_add(const float *a, const float *b, float *out, size_t n) {
    add_job j = {a, b, out, n};
    if (n <= MIX_PIECE) {
        add_task(&j, 0);
        return;
    }
    k3_pool_parallel_for((int)((n + MIX_PIECE - 1) / MIX_PIECE), add_task, &j);
}
