/*
 * unicode_class.h: code-point classes for the pre-tokenizers (Unicode 16.0.0, generated table in
 * unicode_tables.c by scripts/gen-unicode-tables.mjs). Same bits as src/unicode-class.ts.
 */
#ifndef K3_UNICODE_CLASS_H
#define K3_UNICODE_CLASS_H

#include <stdint.h>

enum {
    K3_CLS_LETTER = 1,    /* \p{L} */
    K3_CLS_NUMBER = 2,    /* \p{N} */
    K3_CLS_UPPERISH = 4,  /* [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] */
    K3_CLS_LOWERISH = 8,  /* [\p{Ll}\p{Lm}\p{Lo}\p{M}] */
    K3_CLS_HAN = 16,      /* Script=Han */
    K3_CLS_SPACE = 32     /* White_Space */
};

extern const uint16_t k3_ucls_stage1[8704];
extern const uint8_t k3_ucls_stage2[];

static inline unsigned k3_ucls(uint32_t cp) {
    if (cp > 0x10FFFF) return 0;
    return k3_ucls_stage2[((uint32_t)k3_ucls_stage1[cp >> 7] << 7) | (cp & 127)];
}

#endif
