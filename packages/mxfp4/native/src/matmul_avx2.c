/*
 * matmul_avx2.c: packed MXFP4 on AVX2 + FMA (order in include/k3_mxfp4.h).
 *
 * A scaled weight E2M1[c] * 2^(s-127) is exact in its high 16 bits (k3_bf16_bytes), so a block
 * (16 bytes = 32 weights of one row) decodes with byte shuffles and unpacks, which run on all four
 * vector pipes of a Zen 5 core (vpermd, vpshufb and shifts on two):
 *   the 16 bytes, broadcast to both halves, vpshufb-arranged to [b0-3 b8-11 b0-3 b8-11 | b4-7 b12-15
 *   b4-7 b12-15]; dwords 2-3 of each half shifted right by 4 (vpsrlvd) and all masked to 4 bits:
 *   the even codes of 8 bytes, then their odd codes, per half;
 *   two vpshufb look up bits 24-31 and 16-23 of the 32 weights in the block's table row;
 *   vpunpck{l,h}bw pair them into bf16 words, vpunpck{l,h}wd with zero widen them to f32.
 * That gives the four vectors in lane order (even lanes 0-7 / 8-15, odd lanes 16-23 / 24-31), the
 * split activations' order, so each feeds one FMA with a plain load of xs: 15 vector ops per block
 * (11 decode, 4 FMA; 4 of them on the two shuffle/shift pipes) where the vpermps decode took 20 (12).
 * Batch 1 (decode) has its own kernel, matvec_avx2.c; batches here decode each block once per 2
 * activation rows (8 accumulators).
 */
#pragma GCC target("avx2,fma")
#include <immintrin.h>
#include "k3_lane_sums.h"
#include "mxfp4.h"
#include "decode_avx2.h"
#include "matmul_prefill.h"

static float reduce32(__m256 e0, __m256 e1, __m256 o0, __m256 o1) {
    return k3_lanes16_sum_avx2(_mm256_add_ps(e0, o0), _mm256_add_ps(e1, o1)); /* h = 16, then the 16-lane tree */
}

typedef struct {
    __m256 e0, e1, o0, o1;
} lanes32;

static inline lanes32 zero32(void) {
    lanes32 z = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    return z;
}

/* One row's weights (widened once) against one activation row. */
static inline __attribute__((always_inline)) void fma_lanes(lanes32 *acc, const lanes32 *w, const float *xe) {
    acc->e0 = _mm256_fmadd_ps(w->e0, _mm256_loadu_ps(xe), acc->e0);
    acc->e1 = _mm256_fmadd_ps(w->e1, _mm256_loadu_ps(xe + 8), acc->e1);
    acc->o0 = _mm256_fmadd_ps(w->o0, _mm256_loadu_ps(xe + 16), acc->o0);
    acc->o1 = _mm256_fmadd_ps(w->o1, _mm256_loadu_ps(xe + 24), acc->o1);
}

/* Row r against activation rows b0 .. b0 + NB - 1 (NB = 1 or 2): each block decoded once. */
static inline __attribute__((always_inline)) void row_batch(const k3_mxfp4_matrix *m, const float *xs, float *y,
                                                            size_t r, size_t b0, const int NB) {
    const size_t cols = m->cols, n_blocks = cols / 32;
    const uint8_t *p = m->packed + r * (cols / 2), *s = m->scales + r * n_blocks;
    const float *x0 = xs + b0 * cols, *x1 = x0 + cols;
    lanes32 a = zero32(), b = zero32();
    for (size_t blk = 0; blk < n_blocks; blk++) {
        words32 v = decode_words(p + 16 * blk, s[blk]);
        lanes32 w = {widen_lo(v.wa), widen_hi(v.wa), widen_lo(v.wb), widen_hi(v.wb)};
        fma_lanes(&a, &w, x0 + 32 * blk);
        if (NB == 2) fma_lanes(&b, &w, x1 + 32 * blk);
    }
    y[b0 * m->rows + r] = reduce32(a.e0, a.e1, a.o0, a.o1);
    if (NB == 2) y[(b0 + 1) * m->rows + r] = reduce32(b.e0, b.e1, b.o0, b.o1);
}

void k3_mxfp4_rows_avx2(const k3_mxfp4_matrix *m, const float *xs, float *y, size_t batch,
                        size_t row_begin, size_t row_end) {
    size_t r = row_begin;
    if (batch == 1) {
        k3_mxfp4_matvec_rows_avx2(m, xs, y, row_begin, row_end);
        return;
    }
    /* Batches of 4+ amortise a separate decode into L1 (matmul_prefill_avx2.c). */
    if (batch >= 4) r = k3_mxfp4_rows_prefill_avx2(m, xs, y, batch, r, row_end);
    for (; r < row_end; r++) {
        size_t b = 0;
        for (; b + 2 <= batch; b += 2) row_batch(m, xs, y, r, b, 2);
        if (b < batch) row_batch(m, xs, y, r, b, 1);
    }
}
