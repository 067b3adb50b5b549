/* gemm.c: splits rows over the pool and picks the variant for the current SIMD level; dot rows at that level. */
#include "gemm.h"
#include "cpu.h"
#include "pool.h"
#include "gemm_blocked.h"
#include <stdlib.h>

#define ROWS_PER_TASK_MIN 16

typedef struct {
    k3_gemm_rows_fn rows_fn;
    const void *w;
    size_t ld;
    const float *x;
    float *y;
    size_t rows, cols, batch, rows_per_task;
} gemm_job;

/*
 * The batch goes to a kernel in pieces of at most BATCH_PIECE rows (each (batch row, output) is its own
 * chain, so the pieces change no bit): past ~64 rows the blocked kernels' parked accumulators (batch x
 * 48 x 64 B) and activation block (batch x 1024 x 4 B) outgrow L2. Xeon VM, 1 thread, 3072x7168 bf16:
 * n = 1024 ran 58.8 GFLOP/s in one call against 129.7 at n = 64, and 131.8 in pieces of 64 (32: 122.3,
 * 128: 125.5). A prefill chunk above 64 tokens reaches here with its whole batch (the shared expert).
 */
#define BATCH_PIECE 64

static void in_pieces(k3_gemm_rows_fn fn, const void *w, size_t ld, const float *x, size_t ldx, float *y, size_t ldy,
                      size_t cols, size_t batch, size_t row_begin, size_t row_end) {
    for (size_t b0 = 0; b0 < batch; b0 += BATCH_PIECE) {
        const size_t bn = batch - b0 < BATCH_PIECE ? batch - b0 : BATCH_PIECE;
        fn(w, ld, x + b0 * ldx, ldx, y + b0 * ldy, ldy, cols, bn, row_begin, row_end);
    }
}

static void gemm_task(void *ctx, int task_index) {
    const gemm_job *job = ctx;
    size_t begin = (size_t)task_index * job->rows_per_task;
    size_t end = begin + job->rows_per_task;
    if (end > job->rows) end = job->rows;
    in_pieces(job->rows_fn, job->w, job->ld, job->x, job->cols, job->y, job->rows, job->cols, job->batch, begin, end);
}

/* From this batch on the threaded entries run the blocked kernels (same bits, see gemm_blocked.h). */
#define BLOCKED_BATCH_MIN 2

static k3_gemm_rows_fn blocked_variant(k3_simd_level level, k3_weight_type type) {
    switch (level) {
        case K3_SIMD_AVX512: return type == K3_WEIGHT_BF16 ? k3_gemm_bf16_blocked_avx512 : k3_gemm_f32_blocked_avx512;
        case K3_SIMD_AVX2: return type == K3_WEIGHT_BF16 ? k3_gemm_bf16_blocked_avx2 : k3_gemm_f32_blocked_avx2;
        default: return k3_gemm_rows_variant(level, type);
    }
}

static void run(k3_weight_type type, const void *w, size_t ld, const float *x, float *y, size_t rows, size_t cols,
                size_t batch) {
    if (rows == 0 || batch == 0) return;
    size_t tasks = (size_t)k3_pool_thread_count() * 4;
    size_t per_task = (rows + tasks - 1) / tasks;
    if (per_task < ROWS_PER_TASK_MIN) per_task = ROWS_PER_TASK_MIN;
    per_task = (per_task + 3) / 4 * 4; /* whole 4-row tiles */
    gemm_job job = {k3_gemm_rows_variant(k3_cpu_level(), type), w, ld, x, y, rows, cols, batch, per_task};
    if (batch >= BLOCKED_BATCH_MIN) job.rows_fn = blocked_variant(k3_cpu_level(), type);
    k3_pool_parallel_for((int)((rows + per_task - 1) / per_task), gemm_task, &job);
}

/* ---------------------------------------------------------------- scratch of the blocked kernels */

static _Thread_local void *scratch;
static _Thread_local size_t scratch_bytes;

void *k3_gemm_scratch(size_t bytes) {
    if (bytes <= scratch_bytes) return scratch;
    size_t want = (bytes + 65535) / 65536 * 65536;
    void *p = aligned_alloc(64, want);
    if (!p) return NULL;
    free(scratch);
    scratch = p;
    scratch_bytes = want;
    return p;
}

void k3_gemm_bf16(const uint16_t *w, size_t ld, const float *x, float *y, size_t rows, size_t cols, size_t batch) {
    run(K3_WEIGHT_BF16, w, ld, x, y, rows, cols, batch);
}

void k3_gemm_f32(const float *w, size_t ld, const float *x, float *y, size_t rows, size_t cols, size_t batch) {
    run(K3_WEIGHT_F32, w, ld, x, y, rows, cols, batch);
}

void k3_gemv_f32(const float *w, size_t ld, const float *x, float *y, size_t rows, size_t cols) {
    run(K3_WEIGHT_F32, w, ld, x, y, rows, cols, 1);
}

/* Dot rows from two A rows on run the blocked kernel of the level (same bits as the row kernel,
   gemm_blocked.h): it widens each bf16 weight once per batch tile instead of once per A row,
   1.4x the row kernel at m = 64, k = 7168 (shared experts and bf16 experts in prefill). */
static void dot_rows(k3_weight_type type, size_t m, size_t n, size_t k, const float *A, size_t lda, const void *B,
                     size_t ldb, float *C, size_t ldc) {
    if (m < BLOCKED_BATCH_MIN) {
        k3_dot_rows_at(k3_cpu_level(), type, m, n, k, A, lda, B, ldb, C, ldc);
        return;
    }
    if (n == 0) return;
    in_pieces(blocked_variant(k3_cpu_level(), type), B, ldb, A, lda, C, ldc, k, m, 0, n);
}

void k3_dot_rows_f32(size_t m, size_t n, size_t k, const float *A, size_t lda, const float *B, size_t ldb, float *C,
                     size_t ldc) {
    dot_rows(K3_WEIGHT_F32, m, n, k, A, lda, B, ldb, C, ldc);
}

void k3_dot_rows_bf16(size_t m, size_t n, size_t k, const float *A, size_t lda, const uint16_t *B, size_t ldb,
                      float *C, size_t ldc) {
    dot_rows(K3_WEIGHT_BF16, m, n, k, A, lda, B, ldb, C, ldc);
}
