/* ops_mix.c: the residual stream's sums: a per-token weighted sum of source rows (K3's
   attention-residual mix) and the plain elementwise add (ops.h). Every value is independent, so a
   chunk's rows are split over the pool (same bits on any thread count); the mix accumulates each
   value in double and rounds it to float per source, in source order. */
#include "ops.h"
#include "pool.h"

typedef struct {
    const float *const *src;
    size_t n_src;
    const float *pi;
    size_t dim;
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

static void mix_rows_range(void *ctx, size_t r0, size_t r1) {
    for (size_t t = r0; t < r1; t++) mix_row(ctx, t);
}

void k3_mix_rows(const float *const *src, size_t n_src, const float *pi, size_t dim, size_t n_rows, float *out) {
    if (dim == 0) return;
    const size_t per_row = dim * (n_src ? n_src : 1);
    mix_job j = {src, n_src, pi, dim, out};
    k3_pool_for_ranges(n_rows, per_row >= K3_OPS_PIECE ? 1 : K3_OPS_PIECE / per_row, mix_rows_range, &j);
}

/* ---------------------------------------------------------------- add */

static void add_range(void *ctx, size_t lo, size_t hi) {
    const k3_pair_job *j = ctx;
    for (size_t i = lo; i < hi; i++) j->out[i] = j->a[i] + j->b[i];
}

void k3_add(const float *a, const float *b, float *out, size_t n) {
    k3_pair_job j = {a, b, out};
    k3_pool_for_ranges(n, K3_OPS_PIECE, add_range, &j);
}
