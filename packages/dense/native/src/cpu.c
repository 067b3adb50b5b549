/* cpu.c: runtime ISA detection and the K3_SIMD override. */
#include <stdlib.h>
#include <string.h>
#include "cpu.h"

/* ---------------------------------------------------------------- detection */

static int supports_avx2(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    return 0;
#endif
}

static int supports_avx512(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
#else
    return 0;
#endif
}

k3_simd_level k3_cpu_best_level(void) {
    if (supports_avx512()) return K3_SIMD_AVX512;
    if (supports_avx2()) return K3_SIMD_AVX2;
    return K3_SIMD_SCALAR;
}

/* ---------------------------------------------------------------- the level in use */

static int current_level = -1;

const char *k3_cpu_level_name(k3_simd_level level) {
    switch (level) {
        case K3_SIMD_AVX512: return "avx512";
        case K3_SIMD_AVX2: return "avx2";
        default: return "scalar";
    }
}

int k3_cpu_parse_level(const char *name, k3_simd_level *out) {
    if (strcmp(name, "scalar") == 0) { *out = K3_SIMD_SCALAR; return 0; }
    if (strcmp(name, "avx2") == 0) { *out = K3_SIMD_AVX2; return 0; }
    if (strcmp(name, "avx512") == 0) { *out = K3_SIMD_AVX512; return 0; }
    return -1;
}

int k3_cpu_set_level(k3_simd_level level) {
    if (level > k3_cpu_best_level()) return -1;
    current_level = (int)level;
    return 0;
}

/* The addon applies K3_SIMD at load (with a clear error for a bad value); until then: best. */
k3_simd_level k3_cpu_level(void) {
    if (current_level < 0) current_level = (int)k3_cpu_best_level();
    return (k3_simd_level)current_level;
}
