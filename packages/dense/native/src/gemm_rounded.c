/* gemm_rounded.c: the opt-in rounded bf16 GEMM (gemm_rounded.h): X rounded once, rows over the pool. */
#include <stdlib.h>
#include <string.h>
#include "gemm_rounded.h"
#include "gemm.h"
#include "cpu.h"
#include "pool.h"

uint16_t k3_f32_to_bf16(float f) {
    uint32_t b;
    memcpy(&b, &f, sizeof b);
    if ((b & 0x7f800000u) == 0x7f800000u && (b & 0x007fffffu) != 0) return (uint16_t)((b >> 16) | 0x0040u);
    return (uint16_t)((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
}

static int cpu_has_avx512bf16(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512bf16");
#else
    return 0;
#endif
}

int k3_gemm_rounded_uses_dpbf16(void) { return k3_cpu_level() == K3_SIMD_AVX512 && cpu_has_avx512bf16(); }

#define ROWS_PER_TASK_MIN 16

typedef struct {
    const uint16_t *w;
    size_t ld;
    const uint16_t *xb;
    float *y;
    size_t rows, cols, batch, rows_per_task;
} rounded_job;

static void rounded_task(void *ctx, int task_index) {
    const rounded_job *job = ctx;
    size_t begin = (size_t)task_index * job->rows_per_task;
    size_t end = begin + job->rows_per_task;
    if (end > job->rows) end = job->rows;
    k3_gemm_bf16_rounded_rows_avx512bf16(job->w, job->ld, job->xb, job->cols, job->y, job->rows, job->cols,
                                         job->batch, begin, end);
}

int k3_gemm_bf16_rounded(const uint16_t *w, size_t ld, const float *x, float *y, size_t rows, size_t cols,
                         size_t batch) {
    if (rows == 0 || batch == 0) return 0;
    const size_t n = batch * cols;
    const int dp = k3_gemm_rounded_uses_dpbf16();
    void *buf = malloc(n * (dp ? sizeof(uint16_t) : sizeof(float)) + 64);
    if (!buf) return -1;
    if (dp) {
        uint16_t *xb = buf;
        for (size_t i = 0; i < n; i++) xb[i] = k3_f32_to_bf16(x[i]);
        size_t tasks = (size_t)k3_pool_thread_count() * 4;
        size_t per_task = (rows + tasks - 1) / tasks;
        if (per_task < ROWS_PER_TASK_MIN) per_task = ROWS_PER_TASK_MIN;
        per_task = (per_task + 3) / 4 * 4;
        rounded_job job = {w, ld, xb, y, rows, cols, batch, per_task};
        k3_pool_parallel_for((int)((rows + per_task - 1) / per_task), rounded_task, &job);
    } else {
        float *xr = buf;
        for (size_t i = 0; i < n; i++) {
            uint32_t wide = (uint32_t)k3_f32_to_bf16(x[i]) << 16;
            memcpy(&xr[i], &wide, sizeof wide);
        }
        k3_gemm_bf16(w, ld, xr, y, rows, cols, batch);
    }
    free(buf);
    return 0;
}
