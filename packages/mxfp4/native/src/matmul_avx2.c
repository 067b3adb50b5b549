/*
 * matmul_avx2.c: packed MXFP4 on AVX2 + FMA (order in include/k3_mxfp4.h).
 *
 * vpermps on ymm reads 3 index bits, so the table holds the 8 magnitudes pre-scaled by the block
 * scale (exact), stored XORed with (code << 28) (k3_magnitudes_x): XORing the looked-up entry with
 * (nibble << 28) clears those bits again and sets the float sign from the nibble's bit 3 (code 8
 * gives -0 exactly like the scalar table). Per 8 even + 8 odd weights: one shift for the odd
 * nibbles, two vpermps, two shifts, two XORs. The 32 lanes of a dot product live in four ymm: even
 * lanes 0-7 / 8-15 and odd lanes 16-23 / 24-31.
 * Decode (batch 1) runs 2 rows at a time (8 accumulators of the 16 registers) with each row's bytes
 * prefetched 8 rows ahead.
 */
#pragma GCC target("avx2,fma")
#include <immintrin.h>
#include "k3_lane_sums.h"
#include "mxfp4.h"

static float reduce32(__m256 e0, __m256 e1, __m256 o0, __m256 o1) {
    return k3_lanes16_sum_avx2(_mm256_add_ps(e0, o0), _mm256_add_ps(e1, o1)); /* h = 16, then the 16-lane tree */
}

typedef struct {
    __m256 even, odd;
} decoded8;

/* 8 packed bytes (zero-extended to dwords) -> 8 even and 8 odd weights. */
static inline decoded8 decode8(__m256i q, __m256i table) {
    __m256i q_odd = _mm256_srli_epi32(q, 4);
    __m256i even = _mm256_xor_si256(_mm256_permutevar8x32_epi32(table, q), _mm256_slli_epi32(q, 28));
    __m256i odd = _mm256_xor_si256(_mm256_permutevar8x32_epi32(table, q_odd), _mm256_slli_epi32(q_odd, 28));
    decoded8 d = {_mm256_castsi256_ps(even), _mm256_castsi256_ps(odd)};
    return d;
}

typedef struct {
    __m256 e0, e1, o0, o1;
} lanes32;

static inline __attribute__((always_inline)) void block_fma(lanes32 *acc, const uint8_t *q, uint8_t scale, const float *xe) {
    __m256i table = _mm256_load_si256((const __m256i *)k3_magnitudes_x[scale]);
    decoded8 a = decode8(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)q)), table);
    decoded8 b = decode8(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(q + 8))), table);
    acc->e0 = _mm256_fmadd_ps(a.even, _mm256_loadu_ps(xe), acc->e0);
    acc->e1 = _mm256_fmadd_ps(b.even, _mm256_loadu_ps(xe + 8), acc->e1);
    acc->o0 = _mm256_fmadd_ps(a.odd, _mm256_loadu_ps(xe + 16), acc->o0);
    acc->o1 = _mm256_fmadd_ps(b.odd, _mm256_loadu_ps(xe + 24), acc->o1);
}

static float row_dot(const uint8_t *packed, const uint8_t *scales, const float *xs, size_t cols) {
    lanes32 acc = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    for (size_t blk = 0; blk < cols / 32; blk++) block_fma(&acc, packed + 16 * blk, scales[blk], xs + 32 * blk);
    return reduce32(acc.e0, acc.e1, acc.o0, acc.o1);
}

/* Rows r0, r0 + 1 against one activation row; the same rows 8 rows down are prefetched. */
static void rows2_decode(const k3_mxfp4_matrix *m, const float *xs, float *y, size_t r0, int prefetch) {
    const size_t cols = m->cols, row_bytes = cols / 2, n_blocks = cols / 32;
    const uint8_t *p0 = m->packed + r0 * row_bytes, *p1 = p0 + row_bytes;
    const uint8_t *s0 = m->scales + r0 * n_blocks, *s1 = s0 + n_blocks;
    const size_t ahead = prefetch ? 8 * row_bytes : 0;
    if (prefetch)
        for (size_t s = 0; s < 2 * n_blocks; s += 64) _mm_prefetch((const char *)(s0 + 8 * n_blocks + s), _MM_HINT_T0);
    lanes32 a = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()}, b = a;
    for (size_t blk = 0; blk < n_blocks; blk++) {
        if ((blk & 3) == 0) {
            _mm_prefetch((const char *)(p0 + ahead + 16 * blk), _MM_HINT_T0);
            _mm_prefetch((const char *)(p1 + ahead + 16 * blk), _MM_HINT_T0);
        }
        block_fma(&a, p0 + 16 * blk, s0[blk], xs + 32 * blk);
        block_fma(&b, p1 + 16 * blk, s1[blk], xs + 32 * blk);
    }
    y[r0] = reduce32(a.e0, a.e1, a.o0, a.o1);
    y[r0 + 1] = reduce32(b.e0, b.e1, b.o0, b.o1);
}

void k3_mxfp4_rows_avx2(const k3_mxfp4_matrix *m, const float *xs, float *y, size_t batch,
                        size_t row_begin, size_t row_end) {
    size_t cols = m->cols, r = row_begin;
    if (batch == 1) {
        for (; r + 2 <= row_end; r += 2) rows2_decode(m, xs, y, r, r + 10 <= m->rows);
        if (r < row_end) y[r] = row_dot(m->packed + r * (cols / 2), m->scales + r * (cols / 32), xs, cols);
        return;
    }
    for (; r < row_end; r++)
        for (size_t b = 0; b < batch; b++)
            y[b * m->rows + r] = row_dot(m->packed + r * (cols / 2), m->scales + r * (cols / 32), xs + b * cols, cols);
}
