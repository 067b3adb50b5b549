/* mla_simd.c: picks the inner-loop table for the process-wide SIMD level owned by @k3/dense. */
#include "k3_mla.h"
#include "mla_simd.h"

const mla_kernels *mla_kernels_current(void) {
    switch (k3_mla_dense()->simd_level()) {
        case K3_SIMD_AVX512: return &mla_kernels_avx512;
        case K3_SIMD_AVX2: return &mla_kernels_avx2;
        default: return &mla_kernels_scalar;
    }
}
