/* api.c: the table other addons call through (see k3_dense.h). */
#include "k3_dense.h"
#include "cpu.h"
#include "pool.h"
#include "gemv_bf16.h"
#include "gemm.h"
#include "gemm_acc.h"
#include "gemm_rounded.h"
#include "ops.h"

static const k3_dense_api api = {
    .abi_version = K3_DENSE_ABI_VERSION,
    .struct_size = sizeof(k3_dense_api),
    .simd_level = k3_cpu_level,
    .thread_count = k3_pool_thread_count,
    .parallel_for = k3_pool_parallel_for,
    .gemv_bf16 = k3_gemv_bf16,
    .gemv_f32 = k3_gemv_f32,
    .gemm_bf16 = k3_gemm_bf16,
    .gemm_f32 = k3_gemm_f32,
    .rms_norm = k3_rms_norm,
    .l2_normalize = k3_l2_normalize,
    .sigmoid = k3_sigmoid,
    .silu = k3_silu,
    .silu_glu = k3_silu_glu,
    .situ_glu = k3_situ_glu,
    .softmax = k3_softmax,
    .top_k = k3_top_k,
    .gemm_acc_f32 = k3_gemm_acc_f32,
    .gemm_acc_bf16 = k3_gemm_acc_bf16,
    .dot_rows_f32 = k3_dot_rows_f32,
    .dot_rows_bf16 = k3_dot_rows_bf16,
    .gemm_bf16_rounded = k3_gemm_bf16_rounded,
};

const k3_dense_api *k3_dense_get_api(void) { return &api; }
