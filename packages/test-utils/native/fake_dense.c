/*
 * fake_dense.c: a stand-in k3_dense_api for sanitizer runs of an addon's C kernels outside Node
 * (packages/kda and packages/mla native/test/asan.sh link it; the pool runs tasks in reverse
 * order on the calling thread; SIMD level chosen by the driver). gemm_acc and dot_rows are
 * @k3/dense's real kernels (asan.sh compiles its gemm_acc_{scalar,avx2,avx512}.c and
 * gemm_rows.c + gemm_{scalar,avx2,avx512}.c too), so they run under the sanitizers with the
 * addon's shapes.
 */
#include <math.h>
#include "k3_dense.h"
#include "gemm_acc.h"
#include "gemm.h"

static k3_simd_level level = K3_SIMD_SCALAR;
static k3_simd_level get_level(void) { return level; }
static int threads(void) { return 3; }
static void parallel_for(int n, k3_task_fn task, void *ctx) {
    for (int i = n - 1; i >= 0; i--) task(ctx, i);
}
static void silu(const float *x, float *out, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = x[i] / (1.0f + expf(-x[i]));
}

static void gemm_acc_f32(size_t m, size_t n, size_t k, const float *A, size_t lda, const float *B, size_t ldb, float *C,
                         size_t ldc) {
    k3_gemm_acc_f32_fn variant[3] = {k3_gemm_acc_f32_scalar, k3_gemm_acc_f32_avx2, k3_gemm_acc_f32_avx512};
    variant[level](m, n, k, A, lda, B, ldb, C, ldc);
}
static void gemm_acc_bf16(size_t m, size_t n, size_t k, const float *A, size_t lda, const uint16_t *B, size_t ldb,
                          float *C, size_t ldc) {
    k3_gemm_acc_bf16_fn variant[3] = {k3_gemm_acc_bf16_scalar, k3_gemm_acc_bf16_avx2, k3_gemm_acc_bf16_avx512};
    variant[level](m, n, k, A, lda, B, ldb, C, ldc);
}

static void dot_rows_f32(size_t m, size_t n, size_t k, const float *A, size_t lda, const float *B, size_t ldb, float *C,
                         size_t ldc) {
    k3_dot_rows_at(level, K3_WEIGHT_F32, m, n, k, A, lda, B, ldb, C, ldc);
}
static void dot_rows_bf16(size_t m, size_t n, size_t k, const float *A, size_t lda, const uint16_t *B, size_t ldb,
                          float *C, size_t ldc) {
    k3_dot_rows_at(level, K3_WEIGHT_BF16, m, n, k, A, lda, B, ldb, C, ldc);
}

k3_dense_api fake_api;

void fake_dense_init(int simd_level) {
    level = (k3_simd_level)simd_level;
    fake_api.abi_version = K3_DENSE_ABI_VERSION;
    fake_api.struct_size = sizeof(k3_dense_api);
    fake_api.simd_level = get_level;
    fake_api.thread_count = threads;
    fake_api.parallel_for = parallel_for;
    fake_api.silu = silu;
    fake_api.gemm_acc_f32 = gemm_acc_f32;
    fake_api.gemm_acc_bf16 = gemm_acc_bf16;
    fake_api.dot_rows_f32 = dot_rows_f32;
    fake_api.dot_rows_bf16 = dot_rows_bf16;
}
