/*
 * quantize.c: the MXFP4 quantiser in C (the readable definition is quantizeF32 in src/codec.ts; the
 * two are tested byte for byte against each other and against the PyTorch fixture).
 *
 * Per block of 32: e = the smallest integer with 6 * 2^e >= max|v| (frexp gives it exactly: with
 * max|v| = m * 2^E, m in [0.5, 1), e = E - 3 if m <= 0.75 else E - 2); s = clamp(127 + e, 0, 254);
 * each v * 2^(127 - s) (exact in double) is rounded to the nearest E2M1 value, ties to the even code,
 * saturating at 6; the sign bit is v < 0. Rows are split over the k3 pool.
 */
#include <math.h>
#include <stdatomic.h>
#include "mxfp4.h"

static int block_exponent(float amax) {
    if (amax == 0.0f) return 0;
    int E;
    float m = frexpf(amax, &E);
    return m <= 0.75f ? E - 3 : E - 2;
}

static uint8_t round_e2m1(double m) {
    if (m <= 0.25) return 0;
    if (m < 0.75) return 1;
    if (m <= 1.25) return 2;
    if (m < 1.75) return 3;
    if (m <= 2.5) return 4;
    if (m < 3.5) return 5;
    if (m <= 5.0) return 6;
    return 7;
}

/* Quantises one block; 0, or -1 (with *bad = index in the block) on a non-finite value. */
static int quantize_block(const float *v, uint8_t *packed, uint8_t *scale, int *bad) {
    float amax = 0.0f;
    for (int i = 0; i < 32; i++) {
        if (!isfinite(v[i])) {
            *bad = i;
            return -1;
        }
        if (fabsf(v[i]) > amax) amax = fabsf(v[i]);
    }
    int s = 127 + block_exponent(amax);
    if (s < 0) s = 0;
    if (s > 254) s = 254;
    double inverse = ldexp(1.0, 127 - s);
    uint8_t codes[32];
    for (int i = 0; i < 32; i++) {
        double q = (double)v[i] * inverse;
        codes[i] = (uint8_t)(round_e2m1(fabs(q)) | (q < 0 ? 8 : 0));
    }
    for (int j = 0; j < 16; j++) packed[j] = (uint8_t)(codes[2 * j] | (codes[2 * j + 1] << 4));
    *scale = (uint8_t)s;
    return 0;
}

typedef struct {
    const float *v;
    uint8_t *packed, *scales;
    size_t rows, cols, rows_per_task;
    atomic_llong first_bad; /* element index of the first non-finite value seen, or -1 */
} quantize_job;

static void quantize_task(void *ctx, int task_index) {
    quantize_job *job = ctx;
    size_t begin = (size_t)task_index * job->rows_per_task, end = begin + job->rows_per_task;
    if (end > job->rows) end = job->rows;
    size_t per_row = job->cols / 32;
    for (size_t blk = begin * per_row; blk < end * per_row; blk++) {
        int bad;
        if (quantize_block(job->v + 32 * blk, job->packed + 16 * blk, job->scales + blk, &bad) != 0) {
            long long at = (long long)(32 * blk) + bad, seen = atomic_load(&job->first_bad);
            while ((seen < 0 || at < seen) && !atomic_compare_exchange_weak(&job->first_bad, &seen, at)) {
            }
            return;
        }
    }
}

long long k3_mxfp4_quantize(const float *v, size_t rows, size_t cols, uint8_t *packed, uint8_t *scales) {
    if (rows == 0 || cols == 0) return -1;
    const k3_dense_api *dense = k3_mxfp4_dense_api();
    size_t tasks = (size_t)dense->thread_count() * 4;
    size_t per_task = (rows + tasks - 1) / tasks;
    quantize_job job = {v, packed, scales, rows, cols, per_task, -1};
    dense->parallel_for((int)((rows + per_task - 1) / per_task), quantize_task, &job);
    return atomic_load(&job.first_bad);
}
