/*
 * memread.h: the memory-read ceiling for benchmarks. A plain streaming sum over a buffer far
 * larger than the caches, split in `threads` contiguous slices, 8 independent accumulators; each
 * slice read both as one sequential stream and as 4 interleaved ones (memread.c), the best counts.
 */
#ifndef K3_MEMREAD_H
#define K3_MEMREAD_H
#include <stddef.h>

/* Sums n floats (n a multiple of 128 x streams, p 64-byte aligned) read as `streams` interleaved
   sequential slices; the value only defeats dead-code removal. */
float k3_memread_sum_scalar(const float *p, size_t n, int streams);
float k3_memread_sum_avx2(const float *p, size_t n, int streams);
float k3_memread_sum_avx512(const float *p, size_t n, int streams);

/* Best GB/s (1e9 B/s) of `reps` passes over `bytes` with `threads` pool tasks; <0 if out of memory. */
double k3_memory_read_ceiling(size_t bytes, int threads, int reps);

/* FMA peak: `iters` x 16 independent FMA chains (zmm / scalar fmaf; ymm: 12, below); the value defeats dead-code removal. */
float k3_fma_chains_scalar(size_t iters);
/* The AVX2 one runs K3_FMA_CHAINS_AVX2 chains (16 would not fit the 16 ymm), the others 16. */
#define K3_FMA_CHAINS_AVX2 12
float k3_fma_chains_avx2(size_t iters);
float k3_fma_chains_avx512(size_t iters);

/* The exact GEMM's register loop over L1-resident operands, `iters` x K3_GEMM_LOOP_STEPS steps of 16 k
   (w: 6 x 16 floats per step, x: 4 rows of K3_GEMM_LOOP_STEPS x 16 floats; 64-byte aligned). */
#define K3_GEMM_LOOP_STEPS 64
float k3_gemm_loop_avx512(size_t iters, const float *w, const float *x);
float k3_gemm_loop_avx2(size_t iters, const float *w, const float *x);

/* What k3_fma_peak times: independent FMA chains, or the exact GEMM's register loop. */
typedef enum { K3_PEAK_CHAINS = 0, K3_PEAK_GEMM_LOOP = 1 } k3_peak_kind;

/* Best GFLOP/s (2 flops per FMA lane) of `reps` timed passes with `threads` pool tasks, each task
   running `kind` at the process's best SIMD level for about 20 ms (the scalar level has no GEMM
   loop: it times the chains for both kinds); <0 if the GEMM loop's 40 KiB could not be allocated. */
double k3_fma_peak(int threads, int reps, k3_peak_kind kind);

#endif
