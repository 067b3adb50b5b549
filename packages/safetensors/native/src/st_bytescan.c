/*
 * st_bytescan.c: dispatch of the byte-class scans (st_bytescan.h) on the SIMD level the addon
 * last read from @k3/dense (st_set_simd_level; 0 scalar, 1 AVX2, 2 AVX-512, as k3_simd_level),
 * and the scalar ASCII scan. Names are ~65 bytes in K3 headers: 2-3 vector steps instead of
 * 8-9 SWAR words; 135 MB of headers and index are checked for UTF-8 on every open.
 */
#include <stdatomic.h>
#include <string.h>
#include "k3_safetensors.h"
#include "st_bytescan.h"
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

size_t st_ascii_end(const uint8_t *b, size_t p, size_t n) {
    switch (atomic_load_explicit(&level, memory_order_relaxed)) {
    case 2: return st_ascii_end_avx512(b, p, n);
    case 1: return st_ascii_end_avx2(b, p, n);
    default: return st_ascii_end_scalar(b, p, n);
    }
}

/* 32 bytes per test while all ASCII, then 8, then 1. */
size_t st_ascii_end_scalar(const uint8_t *b, size_t p, size_t n) {
    while (p + 32 <= n) {
        uint64_t w0, w1, w2, w3;
        memcpy(&w0, b + p, 8);
        memcpy(&w1, b + p + 8, 8);
        memcpy(&w2, b + p + 16, 8);
        memcpy(&w3, b + p + 24, 8);
        if ((w0 | w1 | w2 | w3) & ST_HIGHS) break;
        p += 32;
    }
    while (p + 8 <= n) {
        uint64_t w;
        memcpy(&w, b + p, 8);
        if (w & ST_HIGHS) return p + ((size_t)__builtin_ctzll(w & ST_HIGHS) >> 3);
        p += 8;
    }
    while (p < n && b[p] < 0x80) p++;
    return p;
}
