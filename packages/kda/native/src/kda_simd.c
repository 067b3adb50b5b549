/* kda_simd.c: picks the inner-loop table for the process-wide SIMD level owned by @k3/dense. */
#include "k3_kda.h"
#include "kda_simd.h"

const kda_kernels *kda_kernels_current(void) {
    switch (k3_kda_dense()->simd_level()) {
        case K3_SIMD_AVX512: return &kda_kernels_avx512;
        case K3_SIMD_AVX2: return &kda_kernels_avx2;
        default: return &kda_kernels_scalar;
    }
}
