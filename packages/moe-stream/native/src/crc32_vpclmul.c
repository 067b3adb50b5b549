/* crc32_vpclmul.c: CRC-32 by VPCLMULQDQ on 512-bit registers (AVX-512): the same folding as
   crc32_pclmul.c, but sixteen 128-bit lanes (four zmm) over 256-byte blocks, so the loop carries
   four times the bytes per instruction. The four zmm fold into one, and its four lanes are handed,
   as 64 bytes, to the 128-bit kernel with the rest: folding keeps the crc of (lanes ‖ rest) equal
   to that of the bytes consumed ‖ rest. Constants: bit-reflected x^(D+32) and x^(D-32) mod P, shifted
   left by one, for the fold distance D in bits (2048 between blocks, 512 between registers). */
#pragma GCC target("avx512f,avx512bw,vpclmulqdq,pclmul,sse4.1")
#include "crc32.h"

#include <immintrin.h>
#include <string.h>

/* One fold step: x times the pair (low qword by lo, high qword by hi) in each 128-bit lane, plus y. */
static inline __m512i fold(__m512i x, __m512i k, __m512i y) {
    __m512i lo = _mm512_clmulepi64_epi128(x, k, 0x00);
    __m512i hi = _mm512_clmulepi64_epi128(x, k, 0x11);
    return _mm512_ternarylogic_epi64(lo, hi, y, 0x96); /* lo ^ hi ^ y */
}

uint32_t k3_crc32_vpclmul_fold(uint32_t crc, const uint8_t *p, size_t n) {
    const __m512i k2048 = _mm512_broadcast_i32x4(_mm_set_epi64x(0x01322d1430, 0x011542778a)); /* x^2016, x^2080 */
    const __m512i k512 = _mm512_broadcast_i32x4(_mm_set_epi64x(0x01c6e41596, 0x0154442bd4));  /* x^480, x^544 */

    __m512i x0 = _mm512_loadu_si512((const void *)(p + 0x00));
    __m512i x1 = _mm512_loadu_si512((const void *)(p + 0x40));
    __m512i x2 = _mm512_loadu_si512((const void *)(p + 0x80));
    __m512i x3 = _mm512_loadu_si512((const void *)(p + 0xc0));
    x0 = _mm512_xor_si512(x0, _mm512_zextsi128_si512(_mm_cvtsi32_si128((int)crc)));
    p += 256;
    n -= 256;

    /* Sixteen lanes, 256 bytes per step. */
    while (n >= 256) {
        x0 = fold(x0, k2048, _mm512_loadu_si512((const void *)(p + 0x00)));
        x1 = fold(x1, k2048, _mm512_loadu_si512((const void *)(p + 0x40)));
        x2 = fold(x2, k2048, _mm512_loadu_si512((const void *)(p + 0x80)));
        x3 = fold(x3, k2048, _mm512_loadu_si512((const void *)(p + 0xc0)));
        p += 256;
        n -= 256;
    }

    /* Four registers into one, 64 bytes apart. */
    x1 = fold(x0, k512, x1);
    x2 = fold(x1, k512, x2);
    x3 = fold(x2, k512, x3);

    /* The four lanes (64 bytes) and the rest (< 256 bytes, a multiple of 16) to the 128-bit kernel. */
    uint8_t tail[64 + 256];
    _mm512_storeu_si512((void *)tail, x3);
    memcpy(tail + 64, p, n);
    return k3_crc32_pclmul_fold(0, tail, 64 + n);
}
