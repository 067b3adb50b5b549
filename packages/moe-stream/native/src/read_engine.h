/* read_engine.h: what an engine (pread threads, io_uring) needs from the pool: jobs in, results out. */
#ifndef K3_READ_ENGINE_H
#define K3_READ_ENGINE_H

#include "read_pool.h"

/* A job handed to an engine, with the fault (if any) the tests asked this read to suffer. */
typedef struct k3_taken {
    k3_read_job *job;
    int fault;              /* K3_FAULT_* */
    uint64_t short_read_at; /* K3_FAULT_SHORT: bytes the "device" returns */
} k3_taken;

/*
 * Takes the next job: demand first, a prefetch only under the in-flight cap. With `wait`, blocks
 * until there is one or the pool stops. 0 = got one (now counted in flight), -1 = none (stopping,
 * or nothing runnable when not waiting).
 */
int k3_pool_take(k3_read_pool *p, int wait, k3_taken *out);
/* Reports a finished read (stats, the prefetch cap, on_done) and frees the job; takes `done`. */
void k3_pool_finish(k3_read_pool *p, k3_read_job *job, k3_read_done *done);
/* A done event for an injected EIO (no read is made). NULL when out of memory. */
k3_read_done *k3_pool_injected_eio(k3_read_pool *p, const k3_read_job *job);
const k3_read_pool_config *k3_pool_config(const k3_read_pool *p);
int k3_pool_stopping(k3_read_pool *p);

#endif
