/* memread.c: the memory-read ceiling (see memread.h) and its scalar fallback. */
#define _GNU_SOURCE
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include "memread.h"
#include "cpu.h"
#include "pool.h"

float k3_memread_sum_scalar(const float *p, size_t n, int streams) {
    float a[8] = {0};
    const size_t slice = n / (size_t)streams;
    for (size_t i = 0; i < slice; i += 8)
        for (int s = 0; s < streams; s++)
            for (int j = 0; j < 8; j++) a[j] += p[(size_t)s * slice + i + j];
    return a[0] + a[1] + a[2] + a[3] + a[4] + a[5] + a[6] + a[7];
}

typedef struct {
    const float *p;
    size_t per_task; /* floats, a multiple of 128 x STREAMS */
    int streams;     /* 1 or STREAMS this pass */
    float (*sum)(const float *, size_t, int);
    volatile float sink[256];
} memread_job;

static void memread_task(void *ctx, int i) {
    memread_job *job = ctx;
    job->sink[i & 255] = job->sum(job->p + (size_t)i * job->per_task, job->per_task, job->streams);
}

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Streams per thread of the interleaved passes. One sequential stream per core is not what the
   memory system delivers most to: on this VM (2026-12-02 10:25 UTC, AVX2, 1 GiB over huge pages,
   best of 3) 2 / 4 / 8 interleaved streams per thread read 1.23 / 1.25 / 1.26x one stream on 1 thread
   and 1.23-1.24x on 2 (16: 1.16x), and the bf16 GEMV's 8-row tiles read 1.10-1.16x the one-stream
   figure: a ceiling a kernel beats is no ceiling. */
#define STREAMS 4

double k3_memory_read_ceiling(size_t bytes, int threads, int reps) {
    if (threads < 1) threads = 1;
    size_t chunk = (size_t)threads * 128 * STREAMS * sizeof(float);
    bytes = bytes / chunk * chunk;
    if (bytes == 0) bytes = chunk;
    /* Backed like the weights it judges: the engine's resident blocks and expert arena are 2 MiB
       aligned and MADV_HUGEPAGE (transparent huge pages in "madvise" mode), and a read over 4 KiB pages
       ran 8-10 % below the same read over huge pages on this VM (best of 4, alternating, 4 rounds). */
    const size_t huge = (size_t)2 << 20;
    float *p = NULL;
    if (bytes >= 4 * huge) {
        if (posix_memalign((void **)&p, huge, bytes) != 0) p = NULL;
        if (p) madvise(p, bytes, MADV_HUGEPAGE);
    } else {
        p = aligned_alloc(64, bytes);
    }
    if (!p) return -1.0;
    /* Fault every page in before timing, with data that differs line to line (weights do; a page
       of one repeated byte is what a host's page merging or compression would shortcut). */
    uint32_t *u = (uint32_t *)p;
    for (size_t i = 0; i < bytes / 4; i++) u[i] = 0x3f800000u | (uint32_t)((i * 2654435761u) >> 9);
    memread_job job = {.p = p, .per_task = bytes / sizeof(float) / (size_t)threads};
    switch (k3_cpu_level()) {
        case K3_SIMD_AVX512: job.sum = k3_memread_sum_avx512; break;
        case K3_SIMD_AVX2: job.sum = k3_memread_sum_avx2; break;
        default: job.sum = k3_memread_sum_scalar; break;
    }
    /* each rep times one sequential stream per thread and STREAMS interleaved ones; the best of all */
    double best = 0.0;
    for (int r = 0; r < reps; r++)
        for (int pass = 0; pass < 2; pass++) {
            job.streams = pass ? STREAMS : 1;
            double t0 = now_seconds();
            k3_pool_parallel_for(threads, memread_task, &job);
            double gbps = (double)bytes / (now_seconds() - t0) / 1e9;
            if (gbps > best) best = gbps;
        }
    free(p);
    return best;
}

float k3_fma_chains_scalar(size_t iters) {
    float a[16];
    for (int j = 0; j < 16; j++) a[j] = (float)j;
    for (size_t i = 0; i < iters; i++)
        for (int j = 0; j < 16; j++) a[j] = fmaf(a[j], 0.999999f, 1e-7f);
    float s = 0.0f;
    for (int j = 0; j < 16; j++) s += a[j];
    return s;
}

typedef struct {
    float (*chains)(size_t);
    float (*loop)(size_t, const float *, const float *);
    const float *operands; /* the GEMM loop's weights, then its activations (read only: shared by the tasks) */
    size_t iters;
    volatile float sink[256];
} fma_job;

/* The GEMM loop's operands: 6 weight + 4 activation vectors per step, 40 KiB in all (L1-sized). */
#define GEMM_LOOP_FLOATS ((6 + 4) * K3_GEMM_LOOP_STEPS * 16)

static float run_fma(const fma_job *job) {
    if (!job->loop) return job->chains(job->iters);
    return job->loop(job->iters, job->operands, job->operands + 6 * K3_GEMM_LOOP_STEPS * 16);
}

static void fma_task(void *ctx, int i) {
    fma_job *job = ctx;
    job->sink[i & 255] = run_fma(job);
}

double k3_fma_peak(int threads, int reps, k3_peak_kind kind) {
    if (threads < 1) threads = 1;
    fma_job job = {.iters = 1};
    /* FMAs x lanes per iteration */
    double per_iter = 16;
    switch (k3_cpu_level()) {
        case K3_SIMD_AVX512:
            job.chains = k3_fma_chains_avx512;
            if (kind == K3_PEAK_GEMM_LOOP) job.loop = k3_gemm_loop_avx512, per_iter = 24.0 * K3_GEMM_LOOP_STEPS * 16;
            else per_iter = 16.0 * 16;
            break;
        case K3_SIMD_AVX2:
            job.chains = k3_fma_chains_avx2;
            /* 6 FMAs per 8 k, two halves per step */
            if (kind == K3_PEAK_GEMM_LOOP) job.loop = k3_gemm_loop_avx2, per_iter = 12.0 * K3_GEMM_LOOP_STEPS * 8;
            else per_iter = (double)K3_FMA_CHAINS_AVX2 * 8;
            break;
        default: job.chains = k3_fma_chains_scalar; per_iter = 16; break;
    }
    float *operands = NULL;
    if (job.loop) {
        /* filled once, outside the timed passes: small values that neither overflow nor go subnormal */
        operands = aligned_alloc(64, GEMM_LOOP_FLOATS * sizeof(float));
        if (!operands) return -1.0;
        for (size_t i = 0; i < GEMM_LOOP_FLOATS; i++) operands[i] = 1e-3f * (float)(1 + i % 7);
        job.operands = operands;
    }
    /* calibrate: grow the pass until one task takes >= 20 ms */
    for (;;) {
        double t0 = now_seconds();
        run_fma(&job);
        if (now_seconds() - t0 >= 0.02 || job.iters > ((size_t)1 << 40)) break;
        job.iters *= 2;
    }
    double best = 0.0;
    for (int r = 0; r < reps; r++) {
        double t0 = now_seconds();
        k3_pool_parallel_for(threads, fma_task, &job);
        double gflops = (double)threads * (double)job.iters * per_iter * 2.0 / (now_seconds() - t0) / 1e9;
        if (gflops > best) best = gflops;
    }
    free(operands);
    return best;
}
