/* kda_fpmode.h: KDA's kernels run with subnormals flushed to zero (FTZ | DAZ).
 *
 * The decays multiply factors down to e^-64 (kda_chunked.c FACTOR_BOUND) and a state that decays
 * token after token heads towards zero, so products fall into the subnormal range. On Intel cores
 * each subnormal operand or result takes a microcode assist: the chunked prefill of 96 heads x 1024
 * tokens ran 765 ms with IEEE subnormals and 84 ms flushed on the Xeon VM measured here (bench/kda.bench.ts;
 * the Zen 5 runs of that bench had not shown it). Every SIMD level and thread runs in the
 * same mode, so results stay bit-identical across them; a value below 1.2e-38 becomes 0, far below
 * any tolerance. The caller's mode is restored: JavaScript on the calling thread needs IEEE. */
#ifndef KDA_FPMODE_H
#define KDA_FPMODE_H

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#define KDA_MXCSR_FTZ_DAZ 0x8040u

static inline unsigned kda_flush_subnormals(void) {
    unsigned saved = _mm_getcsr();
    _mm_setcsr(saved | KDA_MXCSR_FTZ_DAZ);
    return saved;
}

static inline void kda_restore_fpmode(unsigned saved) { _mm_setcsr(saved); }
#else
static inline unsigned kda_flush_subnormals(void) { return 0; }
static inline void kda_restore_fpmode(unsigned saved) { (void)saved; }
#endif

#endif
