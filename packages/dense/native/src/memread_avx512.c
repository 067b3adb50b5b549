/* memread_avx512.c: streaming read with aligned 64-byte loads and 8 accumulators, 1 or more streams. */
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl")
#include <immintrin.h>
#include "memread.h"

/* `streams` interleaved slices of n / streams floats each: 512 bytes of every slice per step (see memread.h). */
float k3_memread_sum_avx512(const float *p, size_t n, int streams) {
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
    const size_t slice = n / (size_t)streams;
    for (size_t i = 0; i < slice; i += 128)
        for (int s = 0; s < streams; s++) {
            const float *q = p + (size_t)s * slice + i;
            a0 = _mm512_add_ps(a0, _mm512_load_ps(q));
            a1 = _mm512_add_ps(a1, _mm512_load_ps(q + 16));
            a2 = _mm512_add_ps(a2, _mm512_load_ps(q + 32));
            a3 = _mm512_add_ps(a3, _mm512_load_ps(q + 48));
            a4 = _mm512_add_ps(a4, _mm512_load_ps(q + 64));
            a5 = _mm512_add_ps(a5, _mm512_load_ps(q + 80));
            a6 = _mm512_add_ps(a6, _mm512_load_ps(q + 96));
            a7 = _mm512_add_ps(a7, _mm512_load_ps(q + 112));
        }
    a0 = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                       _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)));
    return _mm512_reduce_add_ps(a0);
}

float k3_fma_chains_avx512(size_t iters) {
    __m512 a[16], m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
    for (int j = 0; j < 16; j++) a[j] = _mm512_set1_ps((float)j);
    for (size_t i = 0; i < iters; i++)
        for (int j = 0; j < 16; j++) a[j] = _mm512_fmadd_ps(a[j], m, c);
    for (int j = 1; j < 16; j++) a[0] = _mm512_add_ps(a[0], a[j]);
    return _mm512_reduce_add_ps(a[0]);
}

/*
 * The exact batched GEMM's register loop (gemm_blocked_avx512.c) with every operand in L1: per 16 k,
 * 6 weight vectors and 4 activation vectors loaded, 24 FMAs into 24 lane accumulators. What the
 * exact order can reach on this core with no cache misses at all.
 */
float k3_gemm_loop_avx512(size_t iters, const float *w, const float *x) {
    __m512 a[4][6];
    for (int t = 0; t < 4; t++)
        for (int i = 0; i < 6; i++) a[t][i] = _mm512_setzero_ps();
    for (size_t it = 0; it < iters; it++)
        for (size_t v = 0; v < K3_GEMM_LOOP_STEPS; v++) {
            __m512 wv[6];
            for (int i = 0; i < 6; i++) wv[i] = _mm512_load_ps(w + (v * 6 + i) * 16);
            for (int t = 0; t < 4; t++) {
                __m512 xv = _mm512_load_ps(x + (t * K3_GEMM_LOOP_STEPS + v) * 16);
                __asm__("" : "+v"(xv)); /* one load per activation vector, as in the kernel */
                for (int i = 0; i < 6; i++) a[t][i] = _mm512_fmadd_ps(wv[i], xv, a[t][i]);
            }
        }
    for (int t = 0; t < 4; t++)
        for (int i = 1; i < 6; i++) a[t][0] = _mm512_add_ps(a[t][0], a[t][i]);
    return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a[0][0], a[1][0]), _mm512_add_ps(a[2][0], a[3][0])));
}
