/* uring_reader.h: the io_uring engine: one ring, one submitter/reaper thread, pool jobs in flight. */
#ifndef K3_URING_READER_H
#define K3_URING_READER_H

#include <stddef.h>
#include "read_pool.h"

typedef struct k3_uring_reader k3_uring_reader;

/*
 * Sets up a ring with `depth` reads in flight (+1 entry for the wake-up poll) and starts the
 * thread. NULL when io_uring is unavailable or refused; `why` says why. *sqpoll_used says whether
 * SQPOLL was granted; a refused SQPOLL leaves its reason in `why` while still succeeding.
 */
k3_uring_reader *k3_uring_reader_start(k3_read_pool *pool, int depth, int want_sqpoll, int *sqpoll_used, char *why,
                                       size_t why_len);
/* Called after a job is queued or the pool starts stopping: wakes the thread if it sleeps in the ring. */
void k3_uring_reader_wake(k3_uring_reader *r, int force);
/* Waits for the reads in flight (the pool must be stopping), joins the thread, closes the ring. */
void k3_uring_reader_stop(k3_uring_reader *r);

#endif
