/* memread_avx2.c: streaming read with aligned 32-byte loads and 8 accumulators, 1 or more streams. */
#pragma GCC target("avx2,fma")
#include <immintrin.h>
#include "memread.h"

/* `streams` interleaved slices of n / streams floats each: 512 bytes of every slice per step, so the
   core has `streams` sequential DRAM streams in flight (see memread.h). */
float k3_memread_sum_avx2(const float *p, size_t n, int streams) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
    const size_t slice = n / (size_t)streams;
    for (size_t i = 0; i < slice; i += 128)
        for (int s = 0; s < streams; s++) {
            const float *q = p + (size_t)s * slice + i;
            a0 = _mm256_add_ps(a0, _mm256_load_ps(q));
            a1 = _mm256_add_ps(a1, _mm256_load_ps(q + 8));
            a2 = _mm256_add_ps(a2, _mm256_load_ps(q + 16));
            a3 = _mm256_add_ps(a3, _mm256_load_ps(q + 24));
            a4 = _mm256_add_ps(a4, _mm256_load_ps(q + 32));
            a5 = _mm256_add_ps(a5, _mm256_load_ps(q + 40));
            a6 = _mm256_add_ps(a6, _mm256_load_ps(q + 48));
            a7 = _mm256_add_ps(a7, _mm256_load_ps(q + 56));
            a0 = _mm256_add_ps(a0, _mm256_load_ps(q + 64));
            a1 = _mm256_add_ps(a1, _mm256_load_ps(q + 72));
            a2 = _mm256_add_ps(a2, _mm256_load_ps(q + 80));
            a3 = _mm256_add_ps(a3, _mm256_load_ps(q + 88));
            a4 = _mm256_add_ps(a4, _mm256_load_ps(q + 96));
            a5 = _mm256_add_ps(a5, _mm256_load_ps(q + 104));
            a6 = _mm256_add_ps(a6, _mm256_load_ps(q + 112));
            a7 = _mm256_add_ps(a7, _mm256_load_ps(q + 120));
        }
    a0 = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                       _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7)));
    float lanes[8];
    _mm256_storeu_ps(lanes, a0);
    return lanes[0] + lanes[1] + lanes[2] + lanes[3] + lanes[4] + lanes[5] + lanes[6] + lanes[7];
}

/* 12 chains (K3_FMA_CHAINS_AVX2), not 16: with the multiplier and the addend that is 14 of the 16 ymm;
   16 chains spilled to the stack and measured 0.57 of the FMA ceiling (59 vs 102 GFLOP/s per core, the
   latter from a 12-chain asm loop, 2026-12-02 on this VM). Distinct starting values, so no two chains
   are the same expression (the compiler would merge them). */
float k3_fma_chains_avx2(size_t iters) {
    const __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
    __m256 a0 = _mm256_set1_ps(0.0f), a1 = _mm256_set1_ps(1.0f), a2 = _mm256_set1_ps(2.0f), a3 = _mm256_set1_ps(3.0f);
    __m256 a4 = _mm256_set1_ps(4.0f), a5 = _mm256_set1_ps(5.0f), a6 = _mm256_set1_ps(6.0f), a7 = _mm256_set1_ps(7.0f);
    __m256 a8 = _mm256_set1_ps(8.0f), a9 = _mm256_set1_ps(9.0f), a10 = _mm256_set1_ps(10.0f), a11 = _mm256_set1_ps(11.0f);
    for (size_t i = 0; i < iters; i++) {
        a0 = _mm256_fmadd_ps(a0, m, c), a1 = _mm256_fmadd_ps(a1, m, c), a2 = _mm256_fmadd_ps(a2, m, c);
        a3 = _mm256_fmadd_ps(a3, m, c), a4 = _mm256_fmadd_ps(a4, m, c), a5 = _mm256_fmadd_ps(a5, m, c);
        a6 = _mm256_fmadd_ps(a6, m, c), a7 = _mm256_fmadd_ps(a7, m, c), a8 = _mm256_fmadd_ps(a8, m, c);
        a9 = _mm256_fmadd_ps(a9, m, c), a10 = _mm256_fmadd_ps(a10, m, c), a11 = _mm256_fmadd_ps(a11, m, c);
    }
    a0 = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                       _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7)));
    a0 = _mm256_add_ps(a0, _mm256_add_ps(_mm256_add_ps(a8, a9), _mm256_add_ps(a10, a11)));
    float out[8];
    _mm256_storeu_ps(out, a0);
    return out[0] + out[7];
}

/*
 * The exact batched GEMM's AVX2 register loop (gemm_blocked_avx2.c: 2 weight rows x 3 batch rows, lanes
 * 0-7 / 8-15 in two ymm) with every operand in L1: per 8 k, 2 weight and 3 activation vectors, 6 FMAs.
 */
float k3_gemm_loop_avx2(size_t iters, const float *w, const float *x) {
    __m256 a[3][2][2];
    for (int t = 0; t < 3; t++)
        for (int i = 0; i < 2; i++) a[t][i][0] = a[t][i][1] = _mm256_setzero_ps();
    for (size_t it = 0; it < iters; it++)
        for (size_t v = 0; v < K3_GEMM_LOOP_STEPS; v++)
            for (int h = 0; h < 2; h++) {
                const __m256 w0 = _mm256_load_ps(w + (v * 2 + 0) * 16 + h * 8);
                const __m256 w1 = _mm256_load_ps(w + (v * 2 + 1) * 16 + h * 8);
                for (int t = 0; t < 3; t++) {
                    __m256 xv = _mm256_load_ps(x + (t * K3_GEMM_LOOP_STEPS + v) * 16 + h * 8);
                    __asm__("" : "+x"(xv));
                    a[t][0][h] = _mm256_fmadd_ps(w0, xv, a[t][0][h]);
                    a[t][1][h] = _mm256_fmadd_ps(w1, xv, a[t][1][h]);
                }
            }
    __m256 s = _mm256_setzero_ps();
    for (int t = 0; t < 3; t++)
        for (int i = 0; i < 2; i++) s = _mm256_add_ps(s, _mm256_add_ps(a[t][i][0], a[t][i][1]));
    float o[8];
    _mm256_storeu_ps(o, s);
    return o[0] + o[1] + o[2] + o[3] + o[4] + o[5] + o[6] + o[7];
}
