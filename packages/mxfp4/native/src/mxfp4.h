/* mxfp4.h: internal declarations of the packed MXFP4 kernels (order in include/k3_mxfp4.h). */
#ifndef K3_MXFP4_INTERNAL_H
#define K3_MXFP4_INTERNAL_H
#include "k3_mxfp4.h"
#include "k3_dense.h"

/* E2M1 code -> value (code 8 is -0). */
extern const float k3_e2m1[16];
/* E8M0 byte -> 2^(s-127) as f32 (s = 0 is the subnormal 2^-127); entry 255 is NaN, never used. */
extern float k3_e8m0[256];
/* k3_e2m1[c] * k3_e8m0[s] for every (s, c): the E2M1 table already scaled, one 64-byte row per
   scale byte (16 KiB, stays in L1), so a kernel decodes a block with table lookups and no multiply.
   Every entry is exact (a product with a power of two). Row 255 is NaN and never used. */
extern float k3_scaled_e2m1[256][16];
/* Every scaled weight k3_scaled_e2m1[s][c] has zero low 16 bits (one significant bit pair at most, and
   even the smallest subnormal, 0.5 * 2^-127, sits at bit 21), so its high 16 bits (a bf16) hold it
   exactly. k3_bf16_bytes[s] = bits 24-31 of the 16 codes, then bits 16-23: two 16-entry vpshufb
   tables per scale byte (8 KiB), from which the AVX2 kernel builds the f32 weights. Row 255 is NaN. */
extern uint8_t k3_bf16_bytes[256][32];
/* 2^(s-128) (the int8 path's factor with the doubled table; s = 0, 1 subnormal; 255 NaN). */
extern float k3_pow2_minus128[256];
void k3_mxfp4_init_tables(void);

ptrdiff_t k3_mxfp4_find_bad_scale(const uint8_t *scales, size_t n);
void k3_mxfp4_split_activations(const float *x, size_t cols, size_t batch, float *xs);

/* Rows [row_begin, row_end) of Y for the whole batch, from split activations. */
typedef void (*k3_mxfp4_rows_fn)(const k3_mxfp4_matrix *m, const float *xs, float *y, size_t batch,
                                 size_t row_begin, size_t row_end);
void k3_mxfp4_rows_scalar(const k3_mxfp4_matrix *m, const float *xs, float *y, size_t batch,
                          size_t row_begin, size_t row_end);
void k3_mxfp4_rows_avx2(const k3_mxfp4_matrix *m, const float *xs, float *y, size_t batch,
                        size_t row_begin, size_t row_end);
/* Batch 1 on AVX2 (matvec_avx2.c): rows [row_begin, row_end) of y = W x from split activations. */
void k3_mxfp4_matvec_rows_avx2(const k3_mxfp4_matrix *m, const float *xs, float *y, size_t row_begin, size_t row_end);
void k3_mxfp4_rows_avx512(const k3_mxfp4_matrix *m, const float *xs, float *y, size_t batch,
                          size_t row_begin, size_t row_end);

/* Threaded entry points (pool and SIMD level come from @k3/dense's table). */
void k3_mxfp4_set_dense_api(const k3_dense_api *api);
const k3_dense_api *k3_mxfp4_dense_api(void);
void k3_mxfp4_matmul_split(const k3_mxfp4_matrix *m, const float *xs, float *y, size_t batch);
/* Rows [row_begin, row_end) on the calling thread at the current SIMD level (the table's rows_split). */
void k3_mxfp4_rows_split(const k3_mxfp4_matrix *m, const float *xs, float *y, size_t batch, size_t row_begin,
                         size_t row_end);
int k3_mxfp4_matmul(const k3_mxfp4_matrix *m, const float *x, float *y, size_t batch);
/* Quantises v [rows, cols] (cols % 32 == 0); -1, or the element index of the first non-finite value
   (the output is then incomplete). */
long long k3_mxfp4_quantize(const float *v, size_t rows, size_t cols, uint8_t *packed, uint8_t *scales);

/* W as f32 (exactly the weights the fp32 path multiplies), rows [0, m->rows). */
void k3_mxfp4_dequantize(const k3_mxfp4_matrix *m, float *out);

#endif
