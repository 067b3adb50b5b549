/* pool.h: one thread pool per process, shared by every k3 kernel through k3_dense_api. */
#ifndef K3_POOL_H
#define K3_POOL_H
#include "k3_dense.h"

int k3_pool_thread_count(void);
/* Resizes the pool (1 = run everything on the calling thread). 0 ok, -1 bad count. */
int k3_pool_set_threads(int n_threads);
void k3_pool_parallel_for(int n_tasks, k3_task_fn task, void *ctx);
/* Items [lo, hi) of the job in ctx. */
typedef void (*k3_range_fn)(void *ctx, size_t lo, size_t hi);
/* Runs fn over items [0, n) in ranges of per_task items, one pool task each (on the calling thread
   when one range covers them): for independent items, any thread count gives the same result. */
void k3_pool_for_ranges(size_t n, size_t per_task, k3_range_fn fn, void *ctx);
/* Counters since load: [0] jobs run on the pool (2+ tasks, 2+ threads), [1] jobs in which a worker
   ran at least one task, [2] times a worker went to sleep (its time-bounded spin ran out). */
void k3_pool_stats(unsigned long out[3]);
/* 1 when the calling thread is running a pool task (a kernel it calls runs inline), else 0. */
int k3_pool_in_task(void);

#endif
