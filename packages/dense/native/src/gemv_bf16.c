/* gemv_bf16.c: splits rows over the pool and picks the variant for the current SIMD level. */
#include "gemv_bf16.h"
#include "cpu.h"
#include "pool.h"
#include "gemv_trace.h"

#define ROWS_PER_TASK_MIN 16

typedef struct {
    k3_gemv_bf16_rows_fn rows_fn;
    const uint16_t *w;
    size_t ld;
    const float *x;
    float *y;
    size_t rows, cols, rows_per_task;
} gemv_job;

static void gemv_task(void *ctx, int task_index) {
    const gemv_job *job = ctx;
    size_t begin = (size_t)task_index * job->rows_per_task;
    size_t end = begin + job->rows_per_task;
    if (end > job->rows) end = job->rows;
    job->rows_fn(job->w, job->ld, job->x, job->y, begin, end, job->cols);
}

static k3_gemv_bf16_rows_fn variant_for(k3_simd_level level) {
    switch (level) {
        case K3_SIMD_AVX512: return k3_gemv_bf16_rows_avx512;
        case K3_SIMD_AVX2: return k3_gemv_bf16_rows_avx2;
        default: return k3_gemv_bf16_rows_scalar;
    }
}

static void gemv_bf16_run(const uint16_t *w, size_t ld, const float *x, float *y, size_t rows, size_t cols) {
    int threads = k3_pool_thread_count();
    size_t tasks = (size_t)threads * 4;
    size_t per_task = (rows + tasks - 1) / tasks;
    if (per_task < ROWS_PER_TASK_MIN) per_task = ROWS_PER_TASK_MIN;
    per_task = (per_task + 15) / 16 * 16; /* whole 16-row tiles (gemv_bf16_avx512.c) */
    int n_tasks = (int)((rows + per_task - 1) / per_task);
    gemv_job job = {variant_for(k3_cpu_level()), w, ld, x, y, rows, cols, per_task};
    k3_pool_parallel_for(n_tasks, gemv_task, &job);
}

void k3_gemv_bf16(const uint16_t *w, size_t ld, const float *x, float *y, size_t rows, size_t cols) {
    if (rows == 0) return;
    if (k3_gemv_trace_on()) { /* the probe (gemv_trace.h); off: one relaxed load per call */
        if (!k3_pool_in_task()) {
            uint64_t t0 = k3_gemv_trace_now_ns();
            gemv_bf16_run(w, ld, x, y, rows, cols);
            k3_gemv_trace_add(w, ld, rows, cols, k3_gemv_trace_now_ns() - t0);
            return;
        }
        k3_gemv_trace_count_in_task();
    }
    gemv_bf16_run(w, ld, x, y, rows, cols);
}
