/* matmul_int8.c: activation quantisation, the scalar reference and threading of the int8 path. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "matmul_int8.h"

static const int8_t lut2[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

void k3_mxfp4_quantize_activations(const float *x, size_t cols, k3_int8_activations *out) {
    size_t n_blocks = cols / 32;
    memset(out->q_even, 0, out->groups * 64);
    memset(out->q_odd, 0, out->groups * 64);
    for (size_t i = 0; i < out->groups * 4; i++) out->d[i] = 0.0f;
    for (size_t i = 0; i < out->groups * 16; i++) out->d_lanes[i] = 0.0f;
    for (size_t i = 0; i < out->groups * 16; i++) out->neg12_sums[i] = 0;
    for (size_t b = 0; b < n_blocks; b++) {
        const float *xb = x + 32 * b;
        float amax = 0.0f;
        int finite = 1;
        for (int i = 0; i < 32; i++) {
            if (!isfinite(xb[i])) finite = 0;
            else if (fabsf(xb[i]) > amax) amax = fabsf(xb[i]);
        }
        float d = finite ? amax / 127.0f : NAN;
        out->d[b] = d;
        for (int l = 0; l < 4; l++) out->d_lanes[4 * b + l] = d; /* block b = 4g + L/4 -> lanes 16g + 4(b%4) .. */
        if (!finite || amax == 0.0f) continue;
        for (int j = 0; j < 16; j++) {
            out->q_even[16 * b + j] = (int8_t)nearbyintf(xb[2 * j] / d);
            out->q_odd[16 * b + j] = (int8_t)nearbyintf(xb[2 * j + 1] / d);
        }
        for (int j = 0; j < 16; j++) /* lane 4b + j/4 (within its group: 4 (b % 4) + j / 4) covers byte 16b + j */
            out->neg12_sums[4 * b + j / 4] -= 12 * (out->q_even[16 * b + j] + out->q_odd[16 * b + j]);
    }
}

float k3_mxfp4_row_int8_scalar(const uint8_t *packed, const uint8_t *scales, size_t n_blocks,
                               const k3_int8_activations *a) {
    float lane[16] = {0};
    for (size_t g = 0; g < a->groups; g++) {
        for (int l = 0; l < 16; l++) {
            size_t b = 4 * g + (size_t)l / 4;
            int32_t dot = 0;
            float factor = 0.0f;
            if (b < n_blocks) {
                for (int t = 4 * l; t < 4 * l + 4; t++) {
                    uint8_t byte = packed[64 * g + t];
                    dot += lut2[byte & 15] * a->q_even[64 * g + t] + lut2[byte >> 4] * a->q_odd[64 * g + t];
                }
                /* 0xFF (refused at load) becomes NaN here too, so a stale validation cannot hide it */
                factor = scales[b] == 0xFF ? NAN : ldexpf(a->d[b], (int)scales[b] - 128);
            }
            lane[l] = fmaf((float)dot, factor, lane[l]);
        }
    }
    for (int h = 8; h >= 1; h /= 2)
        for (int i = 0; i < h; i++) lane[i] += lane[i + h];
    return lane[0];
}

/* ---------------------------------------------------------------- threading */

typedef enum { INT8_SCALAR, INT8_AVX2, INT8_VNNI } int8_kernel;

typedef struct {
    const k3_mxfp4_matrix *m;
    const k3_int8_activations *acts; /* one per batch row */
    float *y;
    size_t batch, rows_per_task;
    int8_kernel kernel;
    uint8_t *wbuf; /* VNNI batched: 4 rows x groups x K3_INT8_WBUF_BYTES per task */
} int8_job;

static void int8_task(void *ctx, int task_index) {
    const int8_job *job = ctx;
    const k3_mxfp4_matrix *m = job->m;
    size_t begin = (size_t)task_index * job->rows_per_task, end = begin + job->rows_per_task;
    if (end > m->rows) end = m->rows;
    size_t n_blocks = m->cols / 32, groups = (n_blocks + 3) / 4, r = begin;
    if (job->kernel == INT8_VNNI && job->batch >= 2) {
        uint8_t *wbuf = job->wbuf + (size_t)task_index * 4 * groups * K3_INT8_WBUF_BYTES;
        for (; r + 4 <= end; r += 4) {
            k3_mxfp4_int8_decode4_vnni(m, r, groups, wbuf);
            k3_mxfp4_int8_rows4_batch_vnni(wbuf, groups, job->acts, job->batch, job->y, m->rows, r);
        }
    } else if (job->kernel == INT8_VNNI) {
        for (; r + 4 <= end; r += 4)
            for (size_t b = 0; b < job->batch; b++) {
                float out[4];
                k3_mxfp4_rows4_int8_vnni(m, r, &job->acts[b], out);
                for (int i = 0; i < 4; i++) job->y[b * m->rows + r + i] = out[i];
            }
    }
    if (job->kernel != INT8_SCALAR) {
        for (; r < end; r++) k3_mxfp4_int8_row_avx2(m, r, job->acts, job->batch, job->y);
        return;
    }
    for (; r < end; r++)
        for (size_t b = 0; b < job->batch; b++)
            job->y[b * m->rows + r] =
                k3_mxfp4_row_int8_scalar(m->packed + r * (m->cols / 2), m->scales + r * n_blocks, n_blocks, &job->acts[b]);
}

typedef struct {
    const float *x;
    size_t cols;
    k3_int8_activations *acts;
    void (*quantize)(const float *x, size_t cols, k3_int8_activations *out);
} quantize_job;

static void quantize_task(void *ctx, int b) {
    const quantize_job *job = ctx;
    job->quantize(job->x + (size_t)b * job->cols, job->cols, &job->acts[b]);
}

int k3_mxfp4_matmul_int8(const k3_mxfp4_matrix *m, const float *x, float *y, size_t batch) {
    if (m->rows == 0 || batch == 0) return 0;
    size_t groups = (m->cols / 32 + 3) / 4;
    size_t per_row = groups * 128 + groups * 36 * sizeof(float); /* q_even, q_odd, d, d_lanes, neg12_sums */
    const k3_dense_api *dense = k3_mxfp4_dense_api();
    size_t tasks = (size_t)dense->thread_count() * 4;
    size_t per_task = (m->rows + tasks - 1) / tasks;
    if (per_task < 16) per_task = 16;
    per_task = (per_task + 3) / 4 * 4;
    size_t n_tasks = (m->rows + per_task - 1) / per_task;
    int8_kernel kernel = dense->simd_level() == K3_SIMD_AVX512 && k3_mxfp4_cpu_has_vnni() ? INT8_VNNI
                         : dense->simd_level() != K3_SIMD_SCALAR ? INT8_AVX2 : INT8_SCALAR;
    size_t wbuf_bytes = kernel == INT8_VNNI && batch >= 2 ? n_tasks * 4 * groups * K3_INT8_WBUF_BYTES : 0;
    size_t act_bytes = (per_row * batch + 63) / 64 * 64;
    uint8_t *scratch = aligned_alloc(64, act_bytes + wbuf_bytes + 64);
    k3_int8_activations *acts = malloc(batch * sizeof *acts);
    if (!scratch || !acts) {
        free(scratch);
        free(acts);
        return -1;
    }
    for (size_t b = 0; b < batch; b++) {
        uint8_t *base = scratch + b * per_row;
        acts[b] = (k3_int8_activations){(int8_t *)base, (int8_t *)(base + groups * 64), (float *)(base + groups * 128),
                                        (float *)(base + groups * 128 + groups * 4 * sizeof(float)),
                                        (int32_t *)(base + groups * 128 + groups * 20 * sizeof(float)), groups};
    }
    quantize_job qjob = {x, m->cols, acts,
                         dense->simd_level() == K3_SIMD_AVX512 ? k3_mxfp4_quantize_activations_avx512
                         : dense->simd_level() == K3_SIMD_AVX2 ? k3_mxfp4_quantize_activations_avx2
                                                               : k3_mxfp4_quantize_activations};
    if (batch == 1) quantize_task(&qjob, 0);
    else dense->parallel_for((int)batch, quantize_task, &qjob);
    int8_job job = {m, acts, y, batch, per_task, kernel, scratch + act_bytes};
    dense->parallel_for((int)n_tasks, int8_task, &job);
    free(scratch);
    free(acts);
    return 0;
}
