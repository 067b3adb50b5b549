/*
 * matvec_avx2.c: the packed MXFP4 decode product (batch 1) on AVX2 + FMA, for CPUs without AVX-512
 * (order in include/k3_mxfp4.h; same bits as the scalar reference).
 *
 * Why it looks like this: on Zen 3 (no AVX-512) the vector shuffles and shifts share two pipes, one
 * of them also an FMA pipe, and a core sustains about 3 vector ops per cycle of this mix, so the
 * kernel is bound by its op count per block (16 bytes + 1 scale = 32 weights of one row), not by
 * DRAM. Every scaled weight E2M1[c] * 2^(s-127) is exact in its high 16 bits (a bf16;
 * k3_bf16_bytes holds bits 24-31 and 16-23 of the 16 codes' weights per scale byte), so a block is:
 *   the 16 bytes broadcast to both halves (a load, no ALU op); vpsrlvd by 0 in the low half and 4 in
 *   the high half, then & 0x0F: the even codes of bytes 0-15 | the odd codes of bytes 0-15;
 *   two vpshufb look up bits 24-31 and 16-23 of the 32 weights; vpunpck{l,h}bw pair them into bf16
 *   words; each dword of those holds two bf16 weights, and dword << 16 / dword & 0xFFFF0000 are
 *   those weights as f32 (a shift and an AND, which runs on any of the four pipes, where vpunpck*wd
 *   would take the shuffle pipes): 10 vector ops and 4 FMAs per block, no byte arrangement.
 * The f32 weights then come out in a fixed permutation of the 32 lanes (per 8-lane vector, 4 even
 * lanes then 4 odd ones; see permute_block), so the split activations are permuted the same way once
 * per call (a thread-local copy, 2 shuffles per 8 floats) and the lanes are put back in order for the
 * final tree (reduce_permuted). Each lane still runs its own fmaf chain block after block, so the bits
 * are the reference's. Rows go 2 at a time sharing each activation load (8 accumulators), each row's
 * bytes prefetched 8 rows ahead, as the earlier kernel did.
 */
#pragma GCC target("avx2,fma")
#include <immintrin.h>
#include <stdlib.h>
#include "mxfp4.h"

/* ---------------------------------------------------------------- activations in the decode's lane order */

/*
 * Vector v (0..3) of a block's decoded weights holds, with e_i = byte i's even element (split lane i)
 * and o_i = its odd element (split lane 16 + i):
 *   v0 [e0 e2 e4 e6 | o0 o2 o4 o6]   v1 [e1 e3 e5 e7 | o1 o3 o5 o7]
 *   v2 [e8 e10 e12 e14 | o8 o10 o12 o14]   v3 [e9 e11 e13 e15 | o9 o11 o13 o15]
 * (the low half of the codes vector has the even codes, the high half the odd ones; << 16 keeps
 * the even-numbered bf16 words, & 0xFFFF0000 the odd-numbered ones). The activations follow.
 */
static inline void permute_block(const float *xs, float *xp) {
    for (int h = 0; h < 2; h++) { /* h = 0: bytes 0-7 (v0, v1); h = 1: bytes 8-15 (v2, v3) */
        __m256 e = _mm256_loadu_ps(xs + 8 * h), o = _mm256_loadu_ps(xs + 16 + 8 * h);
        /* per 128-bit half: [e0 e2 o0 o2 | e4 e6 o4 o6], then 64-bit pairs reordered to [e0 e2 e4 e6 | o0 o2 o4 o6] */
        __m256 even = _mm256_shuffle_ps(e, o, _MM_SHUFFLE(2, 0, 2, 0)), odd = _mm256_shuffle_ps(e, o, _MM_SHUFFLE(3, 1, 3, 1));
        _mm256_storeu_ps(xp + 16 * h, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(even), _MM_SHUFFLE(3, 1, 2, 0))));
        _mm256_storeu_ps(xp + 16 * h + 8, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(odd), _MM_SHUFFLE(3, 1, 2, 0))));
    }
}

/* One thread's permuted copy of the activations (grown as needed, kept for the thread's life). */
static _Thread_local float *xp_buf;
static _Thread_local size_t xp_cap;

static const float *permuted_activations(const float *xs, size_t cols) {
    if (cols > xp_cap) {
        float *p = aligned_alloc(32, cols * sizeof(float));
        if (!p) return NULL;
        free(xp_buf);
        xp_buf = p;
        xp_cap = cols;
    }
    for (size_t k = 0; k < cols; k += 32) permute_block(xs + k, xp_buf + k);
    return xp_buf;
}

/* ---------------------------------------------------------------- decode */

typedef struct {
    __m256i lo, hi; /* bf16 words: bytes 0-7's codes, bytes 8-15's (even codes in the low half, odd in the high) */
} block_words;

static inline __attribute__((always_inline)) block_words decode_block(const uint8_t *q, uint8_t scale, __m256i shifts,
                                                                        __m256i low4) {
    __m256i codes = _mm256_and_si256(_mm256_srlv_epi32(_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)q)), shifts), low4);
    const __m128i *table = (const __m128i *)k3_bf16_bytes[scale];
    __m256i b3 = _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(_mm_load_si128(table)), codes);     /* bits 24-31 */
    __m256i b2 = _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(_mm_load_si128(table + 1)), codes); /* bits 16-23 */
    block_words w = {_mm256_unpacklo_epi8(b2, b3), _mm256_unpackhi_epi8(b2, b3)};
    return w;
}

static inline __m256 even_words(__m256i w) { return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)); }
static inline __m256 odd_words(__m256i w, __m256i high16) { return _mm256_castsi256_ps(_mm256_and_si256(w, high16)); }

/* ---------------------------------------------------------------- the fixed tree on permuted lanes */

/* lane[i] += lane[i + h] for h = 16, 8, 4, 2, 1, with the lanes where decode_block leaves them
   (float addition is commutative, so each pair may come in either operand order). */
static float reduce_permuted(__m256 v0, __m256 v1, __m256 v2, __m256 v3) {
#define FOLD16(v) _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1))
    __m128 s_even_lo = FOLD16(v0), s_odd_lo = FOLD16(v1), s_even_hi = FOLD16(v2), s_odd_hi = FOLD16(v3);
#undef FOLD16
    /* h = 16 done: [S0 S2 S4 S6], [S1 S3 S5 S7], [S8 S10 S12 S14], [S9 S11 S13 S15] */
    __m128 t_even = _mm_add_ps(s_even_lo, s_even_hi), t_odd = _mm_add_ps(s_odd_lo, s_odd_hi); /* h = 8: [T0 T2 T4 T6], [T1 T3 T5 T7] */
    __m128 u_even = _mm_add_ps(t_even, _mm_movehl_ps(t_even, t_even));                      /* h = 4: [U0 U2 ..] */
    __m128 u_odd = _mm_add_ps(t_odd, _mm_movehl_ps(t_odd, t_odd));                           /* [U1 U3 ..] */
    __m128 v_even = _mm_add_ss(u_even, _mm_movehdup_ps(u_even));                             /* h = 2: V0 = U0 + U2 */
    __m128 v_odd = _mm_add_ss(u_odd, _mm_movehdup_ps(u_odd));                                /* V1 = U1 + U3 */
    return _mm_cvtss_f32(_mm_add_ss(v_even, v_odd));                                         /* h = 1 */
}

/* ---------------------------------------------------------------- rows */

typedef struct {
    __m256 v0, v1, v2, v3;
} acc32;

/* An activation vector the compiler must not fold into both rows' FMAs (it would load it twice:
   loads, two per cycle, are as scarce here as ALU slots). */
static inline __attribute__((always_inline)) __m256 load_once(const float *p) {
    __m256 v = _mm256_load_ps(p);
    __asm__("" : "+x"(v));
    return v;
}

/* Rows r0, r0 + 1 (NR = 2) or r0 alone (NR = 1); with `prefetch`, the same rows 8 rows down. */
static inline __attribute__((always_inline)) void rows_decode(const k3_mxfp4_matrix *m, const float *xp, float *y,
                                                              size_t r0, int prefetch, const int NR) {
    const size_t cols = m->cols, row_bytes = cols / 2, n_blocks = cols / 32;
    const uint8_t *p0 = m->packed + r0 * row_bytes, *p1 = p0 + row_bytes;
    const uint8_t *s0 = m->scales + r0 * n_blocks, *s1 = s0 + n_blocks;
    const size_t ahead = 8 * row_bytes;
    const __m256i shifts = _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4), low4 = _mm256_set1_epi8(0x0F);
    const __m256i high16 = _mm256_set1_epi32((int)0xFFFF0000u);
    if (prefetch)
        for (size_t s = 0; s < NR * n_blocks; s += 64) _mm_prefetch((const char *)(s0 + 8 * n_blocks + s), _MM_HINT_T0);
    const __m256 zero = _mm256_setzero_ps();
    acc32 a = {zero, zero, zero, zero}, b = a;
    for (size_t blk = 0; blk < n_blocks; blk++) {
        if (prefetch && (blk & 3) == 0) {
            _mm_prefetch((const char *)(p0 + ahead + 16 * blk), _MM_HINT_T0);
            if (NR == 2) _mm_prefetch((const char *)(p1 + ahead + 16 * blk), _MM_HINT_T0);
        }
        const float *x = xp + 32 * blk;
        block_words wa = decode_block(p0 + 16 * blk, s0[blk], shifts, low4);
        if (NR == 1) {
            a.v0 = _mm256_fmadd_ps(even_words(wa.lo), _mm256_load_ps(x), a.v0);
            a.v1 = _mm256_fmadd_ps(odd_words(wa.lo, high16), _mm256_load_ps(x + 8), a.v1);
            a.v2 = _mm256_fmadd_ps(even_words(wa.hi), _mm256_load_ps(x + 16), a.v2);
            a.v3 = _mm256_fmadd_ps(odd_words(wa.hi, high16), _mm256_load_ps(x + 24), a.v3);
            continue;
        }
        block_words wb = decode_block(p1 + 16 * blk, s1[blk], shifts, low4);
        __m256 xv = load_once(x);
        a.v0 = _mm256_fmadd_ps(even_words(wa.lo), xv, a.v0);
        b.v0 = _mm256_fmadd_ps(even_words(wb.lo), xv, b.v0);
        xv = load_once(x + 8);
        a.v1 = _mm256_fmadd_ps(odd_words(wa.lo, high16), xv, a.v1);
        b.v1 = _mm256_fmadd_ps(odd_words(wb.lo, high16), xv, b.v1);
        xv = load_once(x + 16);
        a.v2 = _mm256_fmadd_ps(even_words(wa.hi), xv, a.v2);
        b.v2 = _mm256_fmadd_ps(even_words(wb.hi), xv, b.v2);
        xv = load_once(x + 24);
        a.v3 = _mm256_fmadd_ps(odd_words(wa.hi, high16), xv, a.v3);
        b.v3 = _mm256_fmadd_ps(odd_words(wb.hi, high16), xv, b.v3);
    }
    y[r0] = reduce_permuted(a.v0, a.v1, a.v2, a.v3);
    if (NR == 2) y[r0 + 1] = reduce_permuted(b.v0, b.v1, b.v2, b.v3);
}

/* Rows [row_begin, row_end) of y = W x from split activations. */
void k3_mxfp4_matvec_rows_avx2(const k3_mxfp4_matrix *m, const float *xs, float *y, size_t row_begin, size_t row_end) {
    const float *xp = permuted_activations(xs, m->cols);
    if (!xp) { /* no memory for the thread's copy: the reference, same bits */
        k3_mxfp4_rows_scalar(m, xs, y, 1, row_begin, row_end);
        return;
    }
    size_t r = row_begin;
    for (; r + 2 <= row_end; r += 2) rows_decode(m, xp, y, r, r + 10 <= m->rows, 2);
    if (r < row_end) rows_decode(m, xp, y, r, 0, 1);
}
