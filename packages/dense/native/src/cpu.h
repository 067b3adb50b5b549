/* cpu.h: which SIMD level this process runs (detected once, or forced by K3_SIMD). */
#ifndef K3_CPU_H
#define K3_CPU_H
#include "k3_dense.h"

k3_simd_level k3_cpu_best_level(void);       /* what the CPU supports */
k3_simd_level k3_cpu_level(void);            /* what the kernels use now */
int k3_cpu_set_level(k3_simd_level level);   /* 0 ok, -1 if the CPU lacks it */
const char *k3_cpu_level_name(k3_simd_level level);
int k3_cpu_parse_level(const char *name, k3_simd_level *out); /* 0 ok, -1 unknown name */

#endif
