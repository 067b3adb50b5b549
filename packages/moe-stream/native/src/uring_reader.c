/* uring_reader.c: the io_uring engine. One thread submits the pool's jobs and reaps their completions. */
#define _GNU_SOURCE
#include "uring_reader.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>
#include "read_engine.h"
#include "uring.h"

/* The wake-up poll's user_data; reads use their op index. */
#define WAKE_TAG UINT64_MAX
/* One SQE reads at most this much (len is 32-bit; the kernel caps a read near 2 GiB anyway): the rest is resubmitted. */
#define MAX_SQE_BYTES (1u << 30)

/* One read in flight: the job, its result being built and how far the transfer got. */
typedef struct uring_op {
    k3_read_job *job;
    k3_read_done *done;
    k3_read_plan plan;
    uint64_t got;
    uint32_t max_sqe_bytes; /* MAX_SQE_BYTES, or 4 KiB under K3_FAULT_SPLIT */
} uring_op;

struct k3_uring_reader {
    k3_read_pool *pool;
    const k3_read_pool_config *cfg;
    k3_uring ring;
    int wake_fd;       /* eventfd the pool writes when it queues a job while we sleep in the ring */
    int sleeping;      /* atomic: set before the last queue check, cleared after waking */
    pthread_t thread;
    uring_op *ops;
    int *free_ops;     /* stack of free op indices */
    int n_free, depth;
};

/* ---------------------------------------------------------------- submission */

static void complete(k3_uring_reader *r, int index, int64_t got);

/* The wake-up is a one-shot poll on the eventfd, re-armed each time it fires. */
static void arm_wake(k3_uring_reader *r) {
    struct io_uring_sqe *sqe = k3_uring_sqe(&r->ring);
    if (!sqe) return; /* cannot happen: the ring has one entry reserved for it */
    sqe->opcode = IORING_OP_POLL_ADD;
    sqe->fd = r->wake_fd;
    sqe->poll32_events = POLLIN;
    sqe->user_data = WAKE_TAG;
}

/* Queues the rest of an op's transfer (all of it the first time, the remainder after a short read). */
static void queue_read(k3_uring_reader *r, int index) {
    uring_op *op = &r->ops[index];
    struct io_uring_sqe *sqe = k3_uring_sqe(&r->ring);
    if (!sqe) { /* cannot happen: at most depth reads + the poll are ever queued */
        complete(r, index, -EAGAIN);
        return;
    }
    uint64_t left = op->plan.want - op->got;
    sqe->opcode = IORING_OP_READ;
    sqe->fd = op->plan.fd;
    sqe->addr = (uint64_t)(uintptr_t)(op->plan.dst + op->got);
    sqe->len = (uint32_t)(left > op->max_sqe_bytes ? op->max_sqe_bytes : left);
    sqe->off = op->plan.start + op->got;
    sqe->user_data = (uint64_t)index;
}

static void release_op(k3_uring_reader *r, int index) {
    r->ops[index].job = NULL;
    r->ops[index].done = NULL;
    r->free_ops[r->n_free++] = index;
}

/* The transfer is over (`got` bytes or -errno): the shared finish decides, maybe re-plans buffered. */
static void complete(k3_uring_reader *r, int index, int64_t got) {
    uring_op *op = &r->ops[index];
    k3_file *f = &r->cfg->files[op->job->file];
    if (k3_file_finish(f, &op->plan, got, &op->done->result) == K3_READ_RETRY_BUFFERED) {
        uint8_t *slot = r->cfg->arena + (uint64_t)op->job->slot * r->cfg->slot_bytes;
        uint64_t short_at = op->plan.want < op->plan.span ? op->plan.want : 0;
        if (k3_file_plan(f, op->job->offset, op->job->length, op->job->base, slot, r->cfg->slot_bytes, short_at,
                         &op->plan, &op->done->result) == 0) {
            op->got = 0;
            queue_read(r, index);
            return;
        }
    }
    op->done->end_ns = k3_now_ns();
    k3_pool_finish(r->pool, op->job, op->done);
    release_op(r, index);
}

/* Plans a taken job and queues its read (or finishes it at once: injected EIO, bad range). */
static void start(k3_uring_reader *r, const k3_taken *t) {
    k3_read_job *j = t->job;
    if (t->fault == K3_FAULT_EIO) {
        k3_pool_finish(r->pool, j, k3_pool_injected_eio(r->pool, j));
        return;
    }
    k3_read_done *d = calloc(1, sizeof(*d));
    if (!d) {
        k3_pool_finish(r->pool, j, NULL);
        return;
    }
    int index = r->free_ops[--r->n_free];
    uring_op *op = &r->ops[index];
    op->job = j;
    op->done = d;
    op->got = 0;
    op->max_sqe_bytes = t->fault == K3_FAULT_SPLIT ? 4096 : MAX_SQE_BYTES;
    d->id = j->id;
    d->slot = j->slot;
    d->start_ns = k3_now_ns();
    uint8_t *slot = r->cfg->arena + (uint64_t)j->slot * r->cfg->slot_bytes;
    if (k3_file_plan(&r->cfg->files[j->file], j->offset, j->length, j->base, slot, r->cfg->slot_bytes,
                     t->short_read_at, &op->plan, &d->result) != 0) {
        d->end_ns = k3_now_ns();
        k3_pool_finish(r->pool, j, d);
        release_op(r, index);
        return;
    }
    if (t->fault == K3_FAULT_DIRECT_EINVAL && op->plan.direct) complete(r, index, -EINVAL);
    else queue_read(r, index);
}

/* Takes runnable jobs while an op is free; returns how many were started. */
static int fill(k3_uring_reader *r) {
    int started = 0;
    k3_taken t;
    while (r->n_free > 0 && k3_pool_take(r->pool, 0, &t) == 0) {
        start(r, &t);
        started++;
    }
    return started;
}

/* ---------------------------------------------------------------- completion */

static void on_cqe(k3_uring_reader *r, uint64_t tag, int res) {
    if (tag == WAKE_TAG) {
        uint64_t count;
        while (read(r->wake_fd, &count, sizeof count) > 0) {} /* drain (non-blocking) */
        arm_wake(r);
        return;
    }
    int index = (int)tag;
    uring_op *op = &r->ops[index];
    if (res > 0) {
        op->got += (uint64_t)res;
        if (op->got < op->plan.want) queue_read(r, index); /* short: resubmit the rest */
        else complete(r, index, (int64_t)op->got);
    } else if (res == 0) {
        complete(r, index, (int64_t)op->got); /* EOF before `want`: finish reports the short read */
    } else if (res == -EINTR || res == -EAGAIN) {
        queue_read(r, index);
    } else {
        complete(r, index, res); /* -errno, as pread_full returns it */
    }
}

static void reap(k3_uring_reader *r) {
    struct io_uring_cqe *cqe;
    while ((cqe = k3_uring_peek(&r->ring))) {
        uint64_t tag = cqe->user_data;
        int res = cqe->res;
        k3_uring_seen(&r->ring);
        on_cqe(r, tag, res);
    }
}

static void pause_briefly(void) {
    struct timespec ts = {0, 100000}; /* 100 us: only after a transient ring error */
    nanosleep(&ts, NULL);
}

static void *reader_main(void *arg) {
    k3_uring_reader *r = arg;
    arm_wake(r);
    for (;;) {
        fill(r);
        int submitted = k3_uring_submit(&r->ring) == 0;
        int busy = r->n_free < r->depth;
        if (!busy && k3_pool_stopping(r->pool)) break;
        if (!submitted) { /* transient (the kernel is short of memory): never sleep with SQEs unsubmitted */
            pause_briefly();
            reap(r);
            continue;
        }
        /* Announce the sleep, then look at the queue once more: a job queued after this check
           sees `sleeping` and writes the eventfd, so it is never left waiting. */
        __atomic_store_n(&r->sleeping, 1, __ATOMIC_SEQ_CST);
        if (fill(r) > 0) {
            __atomic_store_n(&r->sleeping, 0, __ATOMIC_SEQ_CST);
            continue;
        }
        if (k3_uring_wait(&r->ring) != 0) pause_briefly();
        __atomic_store_n(&r->sleeping, 0, __ATOMIC_SEQ_CST);
        reap(r);
    }
    return NULL;
}

/* ---------------------------------------------------------------- lifecycle */

static void free_reader(k3_uring_reader *r) {
    if (r->ring.fd >= 0) k3_uring_close(&r->ring);
    if (r->wake_fd >= 0) close(r->wake_fd);
    free(r->ops);
    free(r->free_ops);
    free(r);
}

k3_uring_reader *k3_uring_reader_start(k3_read_pool *pool, int depth, int want_sqpoll, int *sqpoll_used, char *why,
                                       size_t why_len) {
    *sqpoll_used = 0;
    k3_uring_reader *r = calloc(1, sizeof(*r));
    if (!r) {
        snprintf(why, why_len, "io_uring: out of memory");
        return NULL;
    }
    r->pool = pool;
    r->cfg = k3_pool_config(pool);
    r->depth = depth;
    r->ring.fd = -1;
    r->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    r->ops = calloc((size_t)depth, sizeof(uring_op));
    r->free_ops = calloc((size_t)depth, sizeof(int));
    if (r->wake_fd < 0 || !r->ops || !r->free_ops) {
        snprintf(why, why_len, "io_uring: cannot allocate the reader: %s", strerror(errno ? errno : ENOMEM));
        free_reader(r);
        return NULL;
    }
    for (int i = depth - 1; i >= 0; i--) r->free_ops[r->n_free++] = i;
    if (k3_uring_open(&r->ring, (unsigned)depth + 1, want_sqpoll, why, why_len) != 0) {
        free_reader(r);
        return NULL;
    }
    *sqpoll_used = r->ring.sqpoll;
    if (pthread_create(&r->thread, NULL, reader_main, r) != 0) {
        snprintf(why, why_len, "io_uring: cannot start the reader thread");
        free_reader(r);
        return NULL;
    }
    pthread_setname_np(r->thread, "k3-uring"); /* the engine's per-thread CPU report groups by name */
    return r;
}

void k3_uring_reader_wake(k3_uring_reader *r, int force) {
    if (!force && !__atomic_load_n(&r->sleeping, __ATOMIC_SEQ_CST)) return;
    uint64_t one = 1;
    while (write(r->wake_fd, &one, sizeof one) < 0 && errno == EINTR) {}
}

void k3_uring_reader_stop(k3_uring_reader *r) {
    k3_uring_reader_wake(r, 1);
    pthread_join(r->thread, NULL);
    free_reader(r);
}
