/*
 * kda_gate.c: the KDA forget gate in log space (docs/architecture.md §2.3), A_log per HEAD.
 *   K3  (form 0): g[h,d] = lower_bound * sigmoid(exp(A_log[h]) * (z[h,d] + dt_bias[h,d]))   in (lb, 0)
 *   48B (form 1): g[h,d] = -exp(A_log[h]) * softplus(z[h,d] + dt_bias[h,d])                  <= 0
 * softplus(y) = max(y, 0) + log1p(exp(-|y|)) (no threshold cut-off). One implementation for all levels.
 */
#include <math.h>
#include "k3_kda.h"

static float sigmoidf(float y) { return 1.0f / (1.0f + expf(-y)); }

static float softplusf(float y) { return fmaxf(y, 0.0f) + log1pf(expf(-fabsf(y))); }

void k3_kda_gate(const float *z_raw, const float *dt_bias, const float *a_log, float *g, size_t T, size_t H,
                 size_t dk, int form, float lower_bound) {
    size_t P = H * dk;
    for (size_t t = 0; t < T; t++)
        for (size_t h = 0; h < H; h++) {
            float rate = expf(a_log[h]);
            for (size_t d = 0; d < dk; d++) {
                size_t i = h * dk + d;
                float z = z_raw[t * P + i] + dt_bias[i];
                g[t * P + i] = form == 0 ? lower_bound * sigmoidf(rate * z) : -rate * softplusf(z);
            }
        }
}
