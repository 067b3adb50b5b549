/* ops_norm.c: RMSNorm and L2 normalisation (reduction order in ops.h). */
#include <math.h>
#include "ops.h"

static float sum_of_squares(const float *x, size_t dim) {
    float lane[16] = {0};
    for (size_t k = 0; k < dim; k++) lane[k % 16] = fmaf(x[k], x[k], lane[k % 16]);
    for (int h = 8; h >= 1; h /= 2)
        for (int i = 0; i < h; i++) lane[i] += lane[i + h];
    return lane[0];
}

void k3_rms_norm(const float *x, const float *w, float eps, float *out, size_t dim, size_t n_rows) {
    for (size_t r = 0; r < n_rows; r++) {
        const float *xr = x + r * dim;
        float *o = out + r * dim;
        float denom = sqrtf(sum_of_squares(xr, dim) / (float)dim + eps);
        for (size_t k = 0; k < dim; k++) o[k] = w[k] * (xr[k] / denom);
    }
}

void k3_l2_normalize(const float *x, float *out, size_t dim, float eps, size_t n_rows) {
    for (size_t r = 0; r < n_rows; r++) {
        const float *xr = x + r * dim;
        float *o = out + r * dim;
        float denom = sqrtf(sum_of_squares(xr, dim) + eps);
        for (size_t k = 0; k < dim; k++) o[k] = xr[k] / denom;
    }
}
