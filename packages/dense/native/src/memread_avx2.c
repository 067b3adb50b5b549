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
