/* matmul_prefill.h: the batched AVX-512 and AVX2 kernels (decode 4 rows once into L1, then an f32 micro-kernel). */
#ifndef K3_MXFP4_PREFILL_H
#define K3_MXFP4_PREFILL_H
#include "mxfp4.h"

/* Rows [r0, r) of Y for the whole batch, r the end of the last whole 4-row group below r1 (returned). */
size_t k3_mxfp4_rows_prefill_avx512(const k3_mxfp4_matrix *m, const float *xs, float *y, size_t batch, size_t r0,
                                    size_t r1);
/* The same at AVX2 (matmul_prefill_avx2.c). */
size_t k3_mxfp4_rows_prefill_avx2(const k3_mxfp4_matrix *m, const float *xs, float *y, size_t batch, size_t r0,
                                  size_t r1);

#endif
