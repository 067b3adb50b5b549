/*
 * st_bytescan.h: the two byte-class scans the parsers spend their time in, on the
 * process-wide SIMD level of @k3/dense (SWAR, AVX2 or AVX-512; every level gives the same
 * index, and tests force each level and compare):
 *   st_string_end: the first '"', '\\' or control byte (< 0x20) at or after p, else n (where
 *                  the plain part of a JSON string ends);
 *   st_ascii_end:  the first byte >= 0x80 at or after p, else n (UTF-8 validation skips ASCII).
 */
#ifndef ST_BYTESCAN_H
#define ST_BYTESCAN_H

#include <stddef.h>
#include <stdint.h>

size_t st_string_end(const uint8_t *b, size_t p, size_t n);
size_t st_string_end_avx2(const uint8_t *b, size_t p, size_t n);
size_t st_string_end_avx512(const uint8_t *b, size_t p, size_t n);

size_t st_ascii_end(const uint8_t *b, size_t p, size_t n);
size_t st_ascii_end_scalar(const uint8_t *b, size_t p, size_t n);
size_t st_ascii_end_avx2(const uint8_t *b, size_t p, size_t n);
size_t st_ascii_end_avx512(const uint8_t *b, size_t p, size_t n);

#endif
