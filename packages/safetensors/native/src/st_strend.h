/*
 * st_strend.h: where the plain part of a JSON string ends (the first '"', '\\' or control
 * byte at or after p, else n), on the process-wide SIMD level of @k3/dense. Every level gives
 * the same index (tests force each level and compare).
 */
#ifndef ST_STREND_H
#define ST_STREND_H

#include <stddef.h>
#include <stdint.h>

size_t st_string_end(const uint8_t *b, size_t p, size_t n);
size_t st_string_end_avx2(const uint8_t *b, size_t p, size_t n);
size_t st_string_end_avx512(const uint8_t *b, size_t p, size_t n);

#endif
