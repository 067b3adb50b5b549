/* kda_simd_scalar.c: the reference inner loops (orders in kda_simd.h). */
#include <math.h>
#include <stdint.h>
#include <string.h>
#include "k3_exp.h"
#include "kda_simd.h"
#include "state_bf16.h"

/* ---------------------------------------------------------------- exp */

static void exp_diff(const float *a, const float *b, float *out, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = k3_expf(b ? a[i] - b[i] : a[i]);
}

/* ---------------------------------------------------------------- recurrence step */

static void step_head(float *S, size_t dk, size_t dv, const float *alpha, const float *k, const float *q,
                      const float *v, float beta, float *o, float *e) {
    for (size_t j = 0; j < dv; j++) e[j] = 0.0f;
    for (size_t d = 0; d < dk; d++) {
        float *row = S + d * dv;
        for (size_t j = 0; j < dv; j++) {
            row[j] = row[j] * alpha[d];
            e[j] = fmaf(k[d], row[j], e[j]);
        }
    }
    for (size_t j = 0; j < dv; j++) {
        e[j] = v[j] - e[j];
        o[j] = 0.0f;
    }
    for (size_t d = 0; d < dk; d++) {
        float *row = S + d * dv;
        float bk = beta * k[d];
        for (size_t j = 0; j < dv; j++) {
            float s = fmaf(bk, e[j], row[j]);
            row[j] = s;
            o[j] = fmaf(q[d], s, o[j]);
        }
    }
}

/* ---------------------------------------------------------------- bf16-stored state */


static void step_head_bf16(uint16_t *S, float *work, size_t dk, size_t dv, const float *alpha, const float *k,
                           const float *q, const float *v, float beta, float *o, float *e) {
    for (size_t j = 0; j < dv; j++) e[j] = 0.0f;
    for (size_t d = 0; d < dk; d++)
        for (size_t j = 0; j < dv; j++) {
            float x = kda_bf16_to_f32(S[d * dv + j]) * alpha[d];
            work[d * dv + j] = x;
            e[j] = fmaf(k[d], x, e[j]);
        }
    for (size_t j = 0; j < dv; j++) {
        e[j] = v[j] - e[j];
        o[j] = 0.0f;
    }
    for (size_t d = 0; d < dk; d++) {
        float bk = beta * k[d];
        for (size_t j = 0; j < dv; j++) {
            float s = fmaf(bk, e[j], work[d * dv + j]);
            S[d * dv + j] = kda_f32_to_bf16(s);
            o[j] = fmaf(q[d], s, o[j]);
        }
    }
}

const kda_kernels kda_kernels_scalar = {step_head, exp_diff, step_head_bf16};
