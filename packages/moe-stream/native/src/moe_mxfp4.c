/* moe_mxfp4.c: a layer's MXFP4 experts in two pool dispatches (see moe_mxfp4.h). */
#include <string.h>
#include "moe_mxfp4.h"

/* Bytes of packed weights + scales one task streams: K3 gives 12 gate/up tasks (256 rows of w1 and
   of w3) and 6 down tasks (640 rows) per expert, enough to balance two threads even for a group of
   one expert. Bigger than moe_compute.c's 256 KiB because @k3/mxfp4's decode kernel prefetches 8 rows
   ahead from a task's start, so each task's first rows come from DRAM unprefetched: K3 decode, 16
   experts, bench/compute.bench.ts, 2 threads, 08:03-08:23 UTC, ms/token per run (noisy VM):
   256 KiB 8.61, 8.32; 512 KiB 7.71, 8.13; 1 MiB 7.76, 7.56, 8.25, 7.22; 2 MiB 9.17, 7.14, 7.86, 7.68. */
#define TASK_BYTES (1u << 20)
/* Floats reordered per step when φ's output is split in place (whole 32-blocks). */
#define SPLIT_CHUNK 256

typedef struct {
    const k3_dense_api *dense;
    const k3_mxfp4_api *mx;
    const k3_moe_mxfp4_batch *b;
    size_t block_a, blocks_a; /* gate/up rows per task, tasks per expert */
    size_t block_b, blocks_b; /* down rows per task, tasks per expert */
    float *XS, *G, *U, *Y;    /* work: split input rows, gate (then split φ), up, down outputs */
} mx_job;

/* Rows per task for rows of `row_bytes` each: whole 32-row groups (so φ's split stays inside a
   task's slice, and the kernels' 4-row tiles stay whole), at least one group. */
static size_t block_rows(size_t row_bytes, size_t n_rows) {
    size_t r = TASK_BYTES / row_bytes;
    r = r / 32 * 32;
    if (r < 32) r = 32;
    return r < n_rows ? r : n_rows;
}

static size_t matrix_row_bytes(size_t cols) { return cols / 2 + cols / 32; }

/* Flags expert e when v[0..n) holds a NaN (relaxed atomic: several tasks may flag one expert). */
static void flag_nan(const k3_moe_mxfp4_batch *b, const k3_moe_mxfp4_expert *e, const float *v, size_t n) {
    int found = 0;
    for (size_t i = 0; i < n; i++) found |= v[i] != v[i];
    if (found) __atomic_store_n(&b->nan[e - b->experts], (uint8_t)1, __ATOMIC_RELAXED);
}

/* ---------------------------------------------------------------- dispatch 1: gate, up, φ, split */

/* v[0..n) (n a multiple of 32) into the kernels' activation order, in place: per 32-block the even
   elements, then the odd ones (k3_mxfp4_api.split_activations on blocks of 32). */
static void split_in_place(const k3_mxfp4_api *mx, float *v, size_t n) {
    float tmp[SPLIT_CHUNK];
    for (size_t i = 0; i < n; i += SPLIT_CHUNK) {
        size_t c = n - i < SPLIT_CHUNK ? n - i : SPLIT_CHUNK;
        memcpy(tmp, v + i, c * sizeof(float));
        mx->split_activations(tmp, 32, c / 32, v + i);
    }
}

static void gate_up_task(void *ctx, int index) {
    const mx_job *job = ctx;
    const k3_moe_mxfp4_batch *b = job->b;
    const k3_moe_mxfp4_expert *e = &b->experts[(size_t)index / job->blocks_a];
    size_t r0 = ((size_t)index % job->blocks_a) * job->block_a;
    size_t n = b->inter - r0 < job->block_a ? b->inter - r0 : job->block_a;
    const float *XS = job->XS + e->row0 * b->in_dim;
    float *G = job->G + e->row0 * b->inter;
    float *U = job->U + e->row0 * b->inter;
    job->mx->rows_split(&e->w1, XS, G, e->rows, r0, r0 + n);
    job->mx->rows_split(&e->w3, XS, U, e->rows, r0, r0 + n);
    for (size_t i = 0; i < e->rows; i++) {
        float *g = G + i * b->inter + r0;
        const float *u = U + i * b->inter + r0;
        /* Checked before φ, as the per-expert path checks each matmul's output (φ need not keep a NaN). */
        flag_nan(b, e, g, n);
        flag_nan(b, e, u, n);
        if (b->act == K3_MOE_SITU) job->dense->situ_glu(g, u, g, n, b->beta1, b->beta2);
        else job->dense->silu_glu(g, u, g, n);
        split_in_place(job->mx, g, n); /* r0 and n are whole 32-blocks of the down matrix's input */
    }
}

/* ---------------------------------------------------------------- dispatch 2: down, scatter */

static void down_task(void *ctx, int index) {
    const mx_job *job = ctx;
    const k3_moe_mxfp4_batch *b = job->b;
    const k3_moe_mxfp4_expert *e = &b->experts[(size_t)index / job->blocks_b];
    size_t r0 = ((size_t)index % job->blocks_b) * job->block_b;
    size_t n = b->out_dim - r0 < job->block_b ? b->out_dim - r0 : job->block_b;
    const float *HS = job->G + e->row0 * b->inter;
    if (e->rows == 1) {
        /* One row: straight into its destination. */
        float *y = b->y + (size_t)b->y_row[e->row0] * b->out_dim;
        job->mx->rows_split(&e->w2, HS, y, 1, r0, r0 + n);
        flag_nan(b, e, y + r0, n);
        return;
    }
    float *Y = job->Y + e->row0 * b->out_dim;
    job->mx->rows_split(&e->w2, HS, Y, e->rows, r0, r0 + n);
    for (size_t i = 0; i < e->rows; i++) {
        flag_nan(b, e, Y + i * b->out_dim + r0, n);
        memcpy(b->y + (size_t)b->y_row[e->row0 + i] * b->out_dim + r0, Y + i * b->out_dim + r0, n * sizeof(float));
    }
}

/* ---------------------------------------------------------------- entry point */

void k3_moe_mxfp4_experts(const k3_dense_api *dense, const k3_mxfp4_api *mx, const k3_moe_mxfp4_batch *b) {
    if (b->n_experts == 0) return;
    const k3_moe_mxfp4_expert *last = &b->experts[b->n_experts - 1];
    size_t rows = last->row0 + last->rows;
    memset(b->nan, 0, b->n_experts);
    mx_job job = {.dense = dense, .mx = mx, .b = b};
    job.XS = b->work;
    job.G = job.XS + rows * b->in_dim;
    job.U = job.G + rows * b->inter;
    job.Y = job.U + rows * b->inter;
    /* Gather and split each input row once (k3_mxfp4_matmul splits the same row the same way). */
    for (size_t i = 0; i < rows; i++) mx->split_activations(b->x + (size_t)b->x_row[i] * b->in_dim, b->in_dim, 1, job.XS + i * b->in_dim);
    job.block_a = block_rows(2 * matrix_row_bytes(b->in_dim), b->inter);
    job.blocks_a = (b->inter + job.block_a - 1) / job.block_a;
    job.block_b = block_rows(matrix_row_bytes(b->inter), b->out_dim);
    job.blocks_b = (b->out_dim + job.block_b - 1) / job.block_b;
    dense->parallel_for((int)(b->n_experts * job.blocks_a), gate_up_task, &job);
    dense->parallel_for((int)(b->n_experts * job.blocks_b), down_task, &job);
}
