/*
 * st_strend.c: dispatch of the string-end scan (st_strend.h) on the SIMD level the addon last
 * read from @k3/dense (st_set_simd_level; 0 scalar, 1 AVX2, 2 AVX-512, as k3_simd_level).
 * Names are ~65 bytes in K3 headers: 2-3 vector steps instead of 8-9 SWAR words.
 */
#include <stdatomic.h>
#include "k3_safetensors.h"
#include "st_strend.h"
#include "st_swar.h"

static atomic_int level = 0;

void st_set_simd_level(int simd_level) { atomic_store_explicit(&level, simd_level, memory_order_relaxed); }

size_t st_string_end(const uint8_t *b, size_t p, size_t n) {
    switch (atomic_load_explicit(&level, memory_order_relaxed)) {
    case 2: return st_string_end_avx512(b, p, n);
    case 1: return st_string_end_avx2(b, p, n);
    default: return st_plain_string_end(b, p, n);
    }
}
