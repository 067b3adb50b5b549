/* moe_compute.c: a layer's dense experts in two pool dispatches, and their weighted sum (see moe_compute.h). */
#include <string.h>
#include "moe_compute.h"

/* Bytes of weights one task streams: big enough that a task's start costs little, small enough that
   two threads stay balanced over one decode token's experts (8 x 3 x 4.7 MB at the 48B's widths).
   bench/compute.bench.ts (48B decode layer, routed experts against their memory floor), builds
   alternated in one stretch on the Xeon VM, 2026-12-03: 256 KiB 1.23x, 1.22x; 1 MiB 1.18x, 1.18x. */
#define TASK_BYTES (1024u << 10)

typedef struct {
    const k3_dense_api *api;
    const k3_moe_batch *b;
    size_t block_a, blocks_a; /* gate/up rows per task, tasks per expert */
    size_t block_b, blocks_b; /* down rows per task, tasks per expert */
    float *X, *G, *U, *Y;     /* work: gathered rows, gate (then φ), up, down outputs */
} moe_job;

size_t k3_moe_work_floats(size_t rows, size_t in_dim, size_t inter, size_t out_dim) {
    return rows * (in_dim + 2 * inter + out_dim);
}

/* Rows per task for rows of `row_bytes` each (whole 16-row tiles of the bf16 GEMV, at least one). */
static size_t block_rows(size_t row_bytes, size_t n_rows) {
    size_t r = row_bytes ? TASK_BYTES / row_bytes : n_rows;
    r = r / 16 * 16;
    if (r < 16) r = 16;
    return r < n_rows ? r : n_rows;
}

/* ---------------------------------------------------------------- one product */

/* C[i][r0 + j] = W[r0 + j] . A[i] for i < m, j < n: A [m, k] (stride k), C row stride ldc. */
static void rows_product(const moe_job *job, const void *w, size_t r0, size_t n, size_t k, const float *A, size_t m,
                         float *C, size_t ldc) {
    const k3_dense_api *api = job->api;
    if (job->b->bf16) {
        const uint16_t *W = (const uint16_t *)w + r0 * k;
        if (m == 1) api->gemv_bf16(W, k, A, C + r0, n, k); /* inside a task: runs inline */
        else api->dot_rows_bf16(m, n, k, A, k, W, k, C + r0, ldc);
    } else {
        api->dot_rows_f32(m, n, k, A, k, (const float *)w + r0 * k, k, C + r0, ldc);
    }
}

/* ---------------------------------------------------------------- dispatch 1: gate, up, φ */

static void gate_up_task(void *ctx, int index) {
    const moe_job *job = ctx;
    const k3_moe_batch *b = job->b;
    const k3_moe_expert *e = &b->experts[(size_t)index / job->blocks_a];
    size_t r0 = ((size_t)index % job->blocks_a) * job->block_a;
    size_t n = b->inter - r0 < job->block_a ? b->inter - r0 : job->block_a;
    const float *X = job->X + e->row0 * b->in_dim;
    float *G = job->G + e->row0 * b->inter;
    float *U = job->U + e->row0 * b->inter;
    rows_product(job, e->w1, r0, n, b->in_dim, X, e->rows, G, b->inter);
    rows_product(job, e->w3, r0, n, b->in_dim, X, e->rows, U, b->inter);
    for (size_t i = 0; i < e->rows; i++) {
        float *g = G + i * b->inter + r0;
        const float *u = U + i * b->inter + r0;
        if (b->act == K3_MOE_SITU) job->api->situ_glu(g, u, g, n, b->beta1, b->beta2);
        else job->api->silu_glu(g, u, g, n);
    }
}

/* ---------------------------------------------------------------- dispatch 2: down, scatter */

static void down_task(void *ctx, int index) {
    const moe_job *job = ctx;
    const k3_moe_batch *b = job->b;
    const k3_moe_expert *e = &b->experts[(size_t)index / job->blocks_b];
    size_t r0 = ((size_t)index % job->blocks_b) * job->block_b;
    size_t n = b->out_dim - r0 < job->block_b ? b->out_dim - r0 : job->block_b;
    const float *H = job->G + e->row0 * b->inter;
    if (e->rows == 1) {
        /* One row: straight into its destination. */
        rows_product(job, e->w2, r0, n, b->inter, H, 1, b->y + (size_t)b->y_row[e->row0] * b->out_dim, b->out_dim);
        return;
    }
    float *Y = job->Y + e->row0 * b->out_dim;
    rows_product(job, e->w2, r0, n, b->inter, H, e->rows, Y, b->out_dim);
    for (size_t i = 0; i < e->rows; i++)
        memcpy(b->y + (size_t)b->y_row[e->row0 + i] * b->out_dim + r0, Y + i * b->out_dim + r0, n * sizeof(float));
}

/* ---------------------------------------------------------------- entry points */

void k3_moe_experts(const k3_dense_api *api, const k3_moe_batch *b) {
    if (b->n_experts == 0) return;
    const k3_moe_expert *last = &b->experts[b->n_experts - 1];
    size_t rows = last->row0 + last->rows;
    size_t wsize = b->bf16 ? 2 : 4;
    moe_job job = {.api = api, .b = b};
    job.X = b->work;
    job.G = job.X + rows * b->in_dim;
    job.U = job.G + rows * b->inter;
    job.Y = job.U + rows * b->inter;
    for (size_t i = 0; i < rows; i++)
        memcpy(job.X + i * b->in_dim, b->x + (size_t)b->x_row[i] * b->in_dim, b->in_dim * sizeof(float));
    job.block_a = block_rows(2 * b->in_dim * wsize, b->inter);
    job.blocks_a = (b->inter + job.block_a - 1) / job.block_a;
    job.block_b = block_rows(b->inter * wsize, b->out_dim);
    job.blocks_b = (b->out_dim + job.block_b - 1) / job.block_b;
    api->parallel_for((int)(b->n_experts * job.blocks_a), gate_up_task, &job);
    api->parallel_for((int)(b->n_experts * job.blocks_b), down_task, &job);
}

void k3_moe_add(float *out, const float *a, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = out[i] + a[i];
}

void k3_moe_mix(const float *slots, const float *w, size_t tokens, size_t k, size_t dim, float *out, const float *add) {
    for (size_t t = 0; t < tokens; t++) {
        float *acc = out + t * dim;
        for (size_t d = 0; d < dim; d++) acc[d] = 0.0f;
        for (size_t j = 0; j < k; j++) {
            const float wj = w[t * k + j];
            const float *y = slots + (t * k + j) * dim;
            for (size_t d = 0; d < dim; d++) {
                float term = wj * y[d];
                acc[d] = acc[d] + term;
            }
        }
    }
    if (add) k3_moe_add(out, add, tokens * dim);
}
