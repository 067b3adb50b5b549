/*
 * fuzz_common.h: what the safetensors fuzz targets share: an FNV-1a digest of a parse's result
 * (so results at two SIMD levels compare as one number) and how many SIMD levels this CPU runs.
 */
#ifndef K3_ST_FUZZ_COMMON_H
#define K3_ST_FUZZ_COMMON_H
#include <stddef.h>
#include <stdint.h>

#define FUZZ_FNV_SEED 0xcbf29ce484222325ull

static inline uint64_t fuzz_fnv(uint64_t h, const void *p, size_t n) {
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

/* 1 (scalar), 2 (+ avx2) or 3 (+ avx512): levels 0 .. n-1 of st_set_simd_level. */
static inline int fuzz_simd_levels(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512bw") ? 3 : __builtin_cpu_supports("avx2") ? 2 : 1;
}

#endif
