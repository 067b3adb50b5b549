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

float k3_fma_chains_avx2(size_t iters) {
    __m256 a[16], m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
    for (int j = 0; j < 16; j++) a[j] = _mm256_set1_ps((float)j);
    for (size_t i = 0; i < iters; i++)
        for (int j = 0; j < 16; j++) a[j] = _mm256_fmadd_ps(a[j], m, c);
    for (int j = 1; j < 16; j++) a[0] = _mm256_add_ps(a[0], a[j]);
    float out[8];
    _mm256_storeu_ps(out, a[0]);
    return out[0] + out[7];
}
