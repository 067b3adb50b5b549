/*
 * matmul_int8.h: the opt-in int8-activation path (AVX-512 VNNI), a faster but approximate matvec.
 *
 * Activations are quantised once per call, per 32-block b: d_b = max|x_b| / 127 (f32 division),
 * q = nearbyintf(x / d_b) in [-127, 127] (0 when d_b = 0; a non-finite x makes d_b NaN, so the
 * outputs that read it are NaN). Weights use the doubled integer table {0,1,2,3,4,6,8,12} (signed),
 * so every block product is an exact int32. Fixed order, shared by every variant:
 *   16 lanes per output; in 4-block groups g (blocks 4g..4g+3; a short last group is zero padded),
 *   lane L covers packed bytes 4L..4L+3 of the group (block 4g + L/4):
 *     dot_L = sum over those 4 bytes of LUT2[lo] * q_even + LUT2[hi] * q_odd   (exact int32)
 *     lane[L] = fmaf((float)dot_L, ldexpf(d_b, s_b - 128), lane[L])   (s_b = 0xFF gives a NaN factor)
 *   then lane[i] += lane[i + h] for h = 8, 4, 2, 1.
 * Every variant gives the same bits: each dot_L is an exact int32 whatever instructions sum it (the
 * batched kernels use unsigned weights LUT2 + 12 and add -12 * sum(q) back), and the float steps are
 * the same fmaf sequence. Levels without VNNI run an AVX2 kernel (vpmaddubsw / vpmaddwd), scalar
 * builds the reference.
 */
#ifndef K3_MXFP4_INT8_H
#define K3_MXFP4_INT8_H
#include "mxfp4.h"

/* Quantised activations of one row: q_even/q_odd [groups * 64] bytes, d [groups * 4] floats (one
   per block) and d_lanes [groups * 16] (d of block 4g + L/4 at 16g + L, for the SIMD kernel). */
typedef struct {
    int8_t *q_even;
    int8_t *q_odd;
    float *d;
    float *d_lanes;
    int32_t *neg12_sums; /* [groups * 16]: -12 * (sum of q_even + q_odd over lane L's 4 bytes), for the
                            batched kernels, which use the unsigned weights LUT2 + 12 */
    size_t groups;
} k3_int8_activations;

void k3_mxfp4_quantize_activations(const float *x, size_t cols, k3_int8_activations *out);
/* The same on AVX-512 and on AVX2 (same bits). */
void k3_mxfp4_quantize_activations_avx512(const float *x, size_t cols, k3_int8_activations *out);
void k3_mxfp4_quantize_activations_avx2(const float *x, size_t cols, k3_int8_activations *out);
float k3_mxfp4_row_int8_scalar(const uint8_t *packed, const uint8_t *scales, size_t n_blocks,
                               const k3_int8_activations *a);
/* Rows r0 .. r0+3 of m against one activation row; out[i] = row r0+i. */
void k3_mxfp4_rows4_int8_vnni(const k3_mxfp4_matrix *m, size_t r0, const k3_int8_activations *a, float out[4]);
int k3_mxfp4_cpu_has_vnni(void);

/* Batched kernels: rows decoded once into a buffer of K3_INT8_WBUF_BYTES per (row, group): the
   unsigned weights of the low and high nibbles (64 bytes each) and 2^(s-128) per lane (16 floats). */
#define K3_INT8_WBUF_BYTES 192
void k3_mxfp4_int8_decode4_vnni(const k3_mxfp4_matrix *m, size_t r0, size_t groups, uint8_t *wbuf);
/* Y rows r0 .. r0+3 (of `rows`) for every activation in acts[0 .. batch). */
void k3_mxfp4_int8_rows4_batch_vnni(const uint8_t *wbuf, size_t groups, const k3_int8_activations *acts, size_t batch,
                                    float *y, size_t rows, size_t r0);
/* AVX2 (no VNNI): row r against every activation, Y[b * m->rows + r]. */
void k3_mxfp4_int8_row_avx2(const k3_mxfp4_matrix *m, size_t r, const k3_int8_activations *acts, size_t batch, float *y);
/* Y [batch, rows] from plain activations; 0, or -1 when the scratch could not be allocated. */
int k3_mxfp4_matmul_int8(const k3_mxfp4_matrix *m, const float *x, float *y, size_t batch);

#endif
