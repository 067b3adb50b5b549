/* pool_bench.h: the read pool's own cost with no JS in the loop, for comparing its engines. */
#ifndef K3_POOL_BENCH_H
#define K3_POOL_BENCH_H
#include <stddef.h>
#include <stdint.h>

/*
 * Reads `n` ranges (file index, offset, length) through a read pool of depth `qd` on `engine`
 * (K3_ENGINE_*), O_DIRECT when `direct`, all queued at once as demand reads. Measures wall time
 * and the process's CPU time (getrusage: every thread, io_uring's kernel workers included) from
 * the first submit to the last completion. 0 ok, else an errno with `message` filled.
 */
int k3_pool_bench(const char *const *paths, int n_paths, const uint32_t *file, const uint64_t *offset,
                  const uint64_t *length, int n, int qd, int engine, int direct, uint64_t *bytes, double *seconds,
                  double *cpu_seconds, int *engine_used, char *message, size_t message_len);

#endif
