/* uring.c: io_uring through raw syscalls, as the reference engine does (no liburing dependency). */
#define _GNU_SOURCE
#include "uring.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

static int simulated_unavailable = 0; /* test hook; set before any store opens */

void k3_uring_simulate_unavailable(int err) { __atomic_store_n(&simulated_unavailable, err, __ATOMIC_RELAXED); }

/* ---------------------------------------------------------------- syscalls */

static int sys_setup(unsigned entries, struct io_uring_params *p) {
    return (int)syscall(__NR_io_uring_setup, entries, p);
}

static int sys_enter(int fd, unsigned to_submit, unsigned min_complete, unsigned flags) {
    return (int)syscall(__NR_io_uring_enter, fd, to_submit, min_complete, flags, NULL, 0);
}

static int sys_register(int fd, unsigned opcode, void *arg, unsigned nr_args) {
    return (int)syscall(__NR_io_uring_register, fd, opcode, arg, nr_args);
}

/* ---------------------------------------------------------------- setup */

static void unmap(k3_uring *r) {
    if (r->sqes && r->sqes != MAP_FAILED) munmap(r->sqes, r->sqes_len);
    if (r->cq_map && r->cq_map != MAP_FAILED && r->cq_map != r->sq_map) munmap(r->cq_map, r->cq_map_len);
    if (r->sq_map && r->sq_map != MAP_FAILED) munmap(r->sq_map, r->sq_map_len);
    r->sqes = NULL;
    r->cq_map = r->sq_map = NULL;
}

/* Maps the SQ ring, the CQ ring (one mapping when the kernel offers SINGLE_MMAP) and the SQE array. */
static int map_rings(k3_uring *r, const struct io_uring_params *p) {
    r->sq_map_len = p->sq_off.array + p->sq_entries * sizeof(unsigned);
    r->cq_map_len = p->cq_off.cqes + p->cq_entries * sizeof(struct io_uring_cqe);
    int single = (p->features & IORING_FEAT_SINGLE_MMAP) != 0;
    if (single && r->cq_map_len > r->sq_map_len) r->sq_map_len = r->cq_map_len;
    r->sq_map = mmap(NULL, r->sq_map_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, r->fd, IORING_OFF_SQ_RING);
    if (r->sq_map == MAP_FAILED) return errno;
    r->cq_map = single ? r->sq_map
                       : mmap(NULL, r->cq_map_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, r->fd,
                              IORING_OFF_CQ_RING);
    if (r->cq_map == MAP_FAILED) return errno;
    r->sqes_len = p->sq_entries * sizeof(struct io_uring_sqe);
    r->sqes = mmap(NULL, r->sqes_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, r->fd, IORING_OFF_SQES);
    if (r->sqes == MAP_FAILED) return errno;

    uint8_t *sq = r->sq_map, *cq = r->cq_map;
    r->sq_head = (unsigned *)(sq + p->sq_off.head);
    r->sq_tail = (unsigned *)(sq + p->sq_off.tail);
    r->sq_mask = (unsigned *)(sq + p->sq_off.ring_mask);
    r->sq_flags = (unsigned *)(sq + p->sq_off.flags);
    r->sq_array = (unsigned *)(sq + p->sq_off.array);
    r->cq_head = (unsigned *)(cq + p->cq_off.head);
    r->cq_tail = (unsigned *)(cq + p->cq_off.tail);
    r->cq_mask = (unsigned *)(cq + p->cq_off.ring_mask);
    r->cqes = (struct io_uring_cqe *)(cq + p->cq_off.cqes);
    r->sq_local_tail = *r->sq_tail;
    return 0;
}

/* Old kernels set up a ring but lack IORING_OP_READ (5.6) or cannot probe: treat as unavailable. */
static int probe_ops(k3_uring *r) {
    size_t len = sizeof(struct io_uring_probe) + 256 * sizeof(struct io_uring_probe_op);
    struct io_uring_probe *probe = calloc(1, len);
    if (!probe) return ENOMEM;
    int rc = sys_register(r->fd, IORING_REGISTER_PROBE, probe, 256) < 0 ? errno : 0;
    if (rc == 0) {
        const int need[] = {IORING_OP_READ, IORING_OP_POLL_ADD};
        for (int i = 0; i < 2; i++)
            if (need[i] > probe->last_op || !(probe->ops[need[i]].flags & IO_URING_OP_SUPPORTED)) rc = EOPNOTSUPP;
    }
    free(probe);
    return rc;
}

static int try_setup(k3_uring *r, unsigned entries, int sqpoll) {
    struct io_uring_params p;
    memset(&p, 0, sizeof p);
    p.flags = IORING_SETUP_CLAMP;
    if (sqpoll) {
        p.flags |= IORING_SETUP_SQPOLL;
        p.sq_thread_idle = 50; /* ms: the poller sleeps between layers instead of burning a core */
    }
    r->fd = sys_setup(entries, &p);
    if (r->fd < 0) return errno;
    /* Before 5.11 an SQPOLL ring only reads registered files: not worth it, use a plain ring. */
    if (sqpoll && !(p.features & IORING_FEAT_SQPOLL_NONFIXED)) return EOPNOTSUPP;
    r->sq_entries = p.sq_entries;
    r->cq_entries = p.cq_entries;
    r->features = p.features;
    r->sqpoll = sqpoll;
    return map_rings(r, &p);
}

int k3_uring_open(k3_uring *r, unsigned entries, int want_sqpoll, char *why, size_t why_len) {
    memset(r, 0, sizeof(*r));
    r->fd = -1;
    int sim = __atomic_load_n(&simulated_unavailable, __ATOMIC_RELAXED);
    if (sim) {
        snprintf(why, why_len, "io_uring_setup: %s (simulated)", strerror(sim));
        return sim;
    }
    int rc = want_sqpoll ? try_setup(r, entries, 1) : -1;
    if (rc != 0) {
        if (want_sqpoll) {
            /* Kept in `why` even on success, so stats can say SQPOLL was asked for and refused. */
            snprintf(why, why_len, "SQPOLL refused (%s): plain io_uring", strerror(rc));
            k3_uring_close(r);
            memset(r, 0, sizeof(*r));
            r->fd = -1;
        }
        rc = try_setup(r, entries, 0);
        if (rc != 0) {
            snprintf(why, why_len, "io_uring_setup: %s", strerror(rc));
            k3_uring_close(r);
            return rc;
        }
    }
    rc = probe_ops(r);
    if (rc != 0) {
        snprintf(why, why_len, "io_uring probe: IORING_OP_READ/POLL_ADD: %s", strerror(rc));
        k3_uring_close(r);
        return rc;
    }
    if (entries > r->sq_entries) {
        snprintf(why, why_len, "io_uring_setup: %u entries asked, %u given", entries, r->sq_entries);
        k3_uring_close(r);
        return EINVAL;
    }
    return 0;
}

void k3_uring_close(k3_uring *r) {
    unmap(r);
    if (r->fd >= 0) close(r->fd);
    r->fd = -1;
}

/* ---------------------------------------------------------------- submission */

struct io_uring_sqe *k3_uring_sqe(k3_uring *r) {
    unsigned head = __atomic_load_n(r->sq_head, __ATOMIC_ACQUIRE);
    if (r->sq_local_tail - head >= r->sq_entries) return NULL;
    unsigned index = r->sq_local_tail & *r->sq_mask;
    struct io_uring_sqe *sqe = &r->sqes[index];
    memset(sqe, 0, sizeof(*sqe));
    r->sq_array[index] = index;
    r->sq_local_tail++;
    return sqe;
}

int k3_uring_submit(k3_uring *r) {
    /* Release: the kernel must see the SQE contents before the new tail. */
    if (*r->sq_tail != r->sq_local_tail) __atomic_store_n(r->sq_tail, r->sq_local_tail, __ATOMIC_RELEASE);
    /* Everything the kernel has not consumed yet, including SQEs published by a call that failed. */
    unsigned n = r->sq_local_tail - __atomic_load_n(r->sq_head, __ATOMIC_ACQUIRE);
    if (n == 0) return 0;
    if (r->sqpoll) {
        /* Full barrier between publishing the tail and reading NEED_WAKEUP, as the kernel expects. */
        __atomic_thread_fence(__ATOMIC_SEQ_CST);
        if (!(__atomic_load_n(r->sq_flags, __ATOMIC_RELAXED) & IORING_SQ_NEED_WAKEUP)) return 0;
        for (;;) {
            if (sys_enter(r->fd, 0, 0, IORING_ENTER_SQ_WAKEUP) >= 0) return 0;
            if (errno != EINTR) return -errno;
        }
    }
    int busy_retries = 0;
    while (n > 0) {
        int done = sys_enter(r->fd, n, 0, 0);
        if (done < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN && ++busy_retries < 1000) continue; /* transient: the kernel is short of memory */
            return -errno;
        }
        if (done == 0) break; /* nothing taken: the next loop iteration tries again */
        n -= (unsigned)done;
    }
    return 0;
}

/* ---------------------------------------------------------------- completion */

int k3_uring_wait(k3_uring *r) {
    for (;;) {
        if (k3_uring_peek(r)) return 0;
        if (sys_enter(r->fd, 0, 1, IORING_ENTER_GETEVENTS) >= 0) return 0;
        if (errno != EINTR) return -errno;
    }
}

struct io_uring_cqe *k3_uring_peek(k3_uring *r) {
    unsigned head = *r->cq_head;
    /* Acquire: the CQE contents are visible once the tail that covers them is. */
    if (head == __atomic_load_n(r->cq_tail, __ATOMIC_ACQUIRE)) return NULL;
    return &r->cqes[head & *r->cq_mask];
}

void k3_uring_seen(k3_uring *r) { __atomic_store_n(r->cq_head, *r->cq_head + 1, __ATOMIC_RELEASE); }
