/* memread.c: the memory-read ceiling (see memread.h) and its scalar fallback. */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "memread.h"
#include "cpu.h"
#include "pool.h"

float k3_memread_sum_scalar(const float *p, size_t n) {
    float a[8] = {0};
    for (size_t i = 0; i < n; i += 8)
        for (int j = 0; j < 8; j++) a[j] += p[i + j];
    return a[0] + a[1] + a[2] + a[3] + a[4] + a[5] + a[6] + a[7];
}

typedef struct {
    const float *p;
    size_t per_task; /* floats, a multiple of 128 */
    float (*sum)(const float *, size_t);
    volatile float sink[256];
} memread_job;

static void memread_task(void *ctx, int i) {
    memread_job *job = ctx;
    job->sink[i & 255] = job->sum(job->p + (size_t)i * job->per_task, job->per_task);
}

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double k3_memory_read_ceiling(size_t bytes, int threads, int reps) {
    if (threads < 1) threads = 1;
    size_t chunk = (size_t)threads * 128 * sizeof(float);
    bytes = bytes / chunk * chunk;
    if (bytes == 0) bytes = chunk;
    float *p = aligned_alloc(64, bytes);
    if (!p) return -1.0;
    memset(p, 1, bytes); /* fault every page in before timing */
    memread_job job = {.p = p, .per_task = bytes / sizeof(float) / (size_t)threads};
    switch (k3_cpu_level()) {
        case K3_SIMD_AVX512: job.sum = k3_memread_sum_avx512; break;
        case K3_SIMD_AVX2: job.sum = k3_memread_sum_avx2; break;
        default: job.sum = k3_memread_sum_scalar; break;
    }
    double best = 0.0;
    for (int r = 0; r < reps; r++) {
        double t0 = now_seconds();
        k3_pool_parallel_for(threads, memread_task, &job);
        double gbps = (double)bytes / (now_seconds() - t0) / 1e9;
        if (gbps > best) best = gbps;
    }
    free(p);
    return best;
}
