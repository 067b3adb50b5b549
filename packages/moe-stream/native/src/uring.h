/* uring.h: a minimal io_uring over raw syscalls (no liburing): setup, the two mmapped rings, enter. */
#ifndef K3_URING_H
#define K3_URING_H

#include <stddef.h>
#include <stdint.h>
#include <linux/io_uring.h>

typedef struct k3_uring {
    int fd;
    int sqpoll;          /* 1 when a kernel thread polls the submission ring */
    unsigned sq_entries, cq_entries, features;
    /* submission ring (shared with the kernel) */
    void *sq_map;
    size_t sq_map_len;
    unsigned *sq_head, *sq_tail, *sq_mask, *sq_flags, *sq_array;
    struct io_uring_sqe *sqes;
    size_t sqes_len;
    unsigned sq_local_tail; /* SQEs filled but not yet published to the kernel */
    /* completion ring */
    void *cq_map;
    size_t cq_map_len;
    unsigned *cq_head, *cq_tail, *cq_mask;
    struct io_uring_cqe *cqes;
} k3_uring;

/*
 * Sets up a ring of at least `entries` SQEs (CQ twice that) and checks that the kernel supports
 * IORING_OP_READ and IORING_OP_POLL_ADD. With `want_sqpoll`, asks for SQPOLL first and falls back
 * to a plain ring when refused (r->sqpoll says which). 0 ok; else an errno and `why` says which
 * step failed (seccomp and kernel.io_uring_disabled make io_uring_setup fail with EPERM/ENOSYS).
 */
int k3_uring_open(k3_uring *r, unsigned entries, int want_sqpoll, char *why, size_t why_len);
void k3_uring_close(k3_uring *r);

/* The next free SQE, zeroed, or NULL when the ring is full. Not visible to the kernel until submit. */
struct io_uring_sqe *k3_uring_sqe(k3_uring *r);
/* Publishes the filled SQEs and has the kernel take them (or wakes the SQPOLL thread). 0 or -errno. */
int k3_uring_submit(k3_uring *r);
/* Blocks until at least one completion is posted (EINTR retried). 0 or -errno. */
int k3_uring_wait(k3_uring *r);
/* The oldest unseen completion or NULL; k3_uring_seen hands its CQ entry back to the kernel. */
struct io_uring_cqe *k3_uring_peek(k3_uring *r);
void k3_uring_seen(k3_uring *r);

/* Test hook: make every later k3_uring_open fail with this errno (0 = off), as seccomp would. */
void k3_uring_simulate_unavailable(int err);

#endif
