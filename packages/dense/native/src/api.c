/* api.c: the table other addons call through (see k3_dense.h). */
#include "k3_dense.h"
#include "cpu.h"
#include "pool.h"
#include "gemv_bf16.h"

static const k3_dense_api api = {
    .abi_version = K3_DENSE_ABI_VERSION,
    .struct_size = sizeof(k3_dense_api),
    .simd_level = k3_cpu_level,
    .thread_count = k3_pool_thread_count,
    .parallel_for = k3_pool_parallel_for,
    .gemv_bf16 = k3_gemv_bf16,
};

const k3_dense_api *k3_dense_get_api(void) { return &api; }
