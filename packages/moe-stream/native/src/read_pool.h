/*
 * read_pool.h: the store's reads, demand first, prefetch capped and cancellable, served by one of
 * two engines behind the same API: io_uring (one ring of depth = readers, one submitter/reaper
 * thread) or a fixed set of pread threads (the fallback where io_uring is blocked).
 */
#ifndef K3_READ_POOL_H
#define K3_READ_POOL_H

#include <stddef.h>
#include <stdint.h>
#include "direct_file.h"
#include "trunk_check.h"

enum { K3_PRIORITY_DEMAND = 0, K3_PRIORITY_PREFETCH = 1 };

typedef struct k3_read_job {
    int32_t id;
    uint32_t file;
    uint32_t slot;
    int priority;
    uint64_t offset;
    uint64_t length;
    uint64_t base; /* file offset mapped to slot byte 0, or K3_BASE_AUTO */
    struct k3_check_load *check; /* crc32s to check once the bytes land (trunk_check.h), or NULL */
    uint32_t check_read;         /* this read's index in `check` */
    struct k3_read_job *next;
} k3_read_job;

typedef struct k3_read_done {
    int32_t id;
    uint32_t slot;
    int cancelled;
    int64_t start_ns, end_ns;
    k3_read_result result;
    k3_check_verdict verdict; /* a crc32 mismatch found by this read's check (result.status EBADMSG) */
} k3_read_done;

/* Called on a pool thread when a job finishes (or is cancelled); takes ownership of `done`. */
typedef void (*k3_read_done_fn)(void *ctx, k3_read_done *done);

typedef struct k3_read_pool k3_read_pool;

/* Which engine to run. AUTO = io_uring when the kernel lets us set a ring up, else pread threads. */
enum { K3_ENGINE_AUTO = 0, K3_ENGINE_PREAD = 1, K3_ENGINE_URING = 2 };
/* The engine in use (stats). */
enum { K3_ENGINE_IN_USE_PREAD = 0, K3_ENGINE_IN_USE_URING = 1, K3_ENGINE_IN_USE_URING_SQPOLL = 2 };

typedef struct k3_read_pool_config {
    k3_file *files;
    uint32_t n_files;
    uint8_t *arena;
    uint64_t slot_bytes;
    uint32_t n_slots;
    int threads;             /* readers = queue depth (pread threads, or io_uring entries) */
    int max_prefetch_inflight;
    int engine;              /* K3_ENGINE_* */
    int sqpoll;              /* ask io_uring for a kernel submission-polling thread (falls back if refused) */
    k3_read_done_fn on_done;
    void *ctx;
} k3_read_pool_config;

/* NULL on failure with `message` filled (e.g. io_uring asked for explicitly but unavailable). */
k3_read_pool *k3_read_pool_create(const k3_read_pool_config *cfg, char *message, size_t message_len);
/* Queues a job (copied). 0 ok; on failure the job's check (if any) is counted down as a failed read. */
int k3_read_pool_submit(k3_read_pool *p, const k3_read_job *job);
/* Drops every queued prefetch job (reported with cancelled=1); returns how many. */
int k3_read_pool_cancel_prefetch(k3_read_pool *p);
/* Cancels everything queued, waits for reads in flight, joins the threads. */
void k3_read_pool_destroy(k3_read_pool *p);

/* Fault injection for tests: after `after_reads` more reads, fail one (EIO), make it short, have
   its O_DIRECT read refused with EINVAL (the file falls back to buffered reads), or (io_uring) move
   it in 4 KiB SQEs, so it completes only through resubmissions of the rest (pread: a normal read). */
enum { K3_FAULT_NONE = 0, K3_FAULT_EIO = 1, K3_FAULT_SHORT = 2, K3_FAULT_DIRECT_EINVAL = 3, K3_FAULT_SPLIT = 4 };
void k3_read_pool_inject_fault(k3_read_pool *p, int64_t after_reads, int kind);

typedef struct k3_read_pool_stats {
    uint64_t reads, device_bytes, requested_bytes, direct_reads, buffered_reads;
    int64_t busy_ns; /* wall time with at least one read in flight */
    int inflight, queued_demand, queued_prefetch;
    int engine;                /* K3_ENGINE_IN_USE_* */
    char engine_note[160];     /* why io_uring (or SQPOLL) is not in use; empty when it is or was not asked */
} k3_read_pool_stats;
void k3_read_pool_stats_get(k3_read_pool *p, k3_read_pool_stats *out);

int64_t k3_now_ns(void);

#endif
