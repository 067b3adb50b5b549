/* ceiling.c: plain pread threads over a list of ranges, for the benchmark's ceiling. */
#define _GNU_SOURCE
#include "ceiling.h"
#include "arena.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    int *fds;
    const uint32_t *file;
    const uint64_t *offset;
    const uint64_t *length;
    int n;
    int direct;
    int next; /* atomic */
    uint64_t bytes; /* atomic */
    int error;      /* atomic, first errno */
    uint64_t max_len;
    uint8_t **buffers; /* one per thread, allocated before the clock starts */
    int thread_seq;    /* atomic */
} ceiling_ctx;

static void *ceiling_worker(void *arg) {
    ceiling_ctx *c = arg;
    /* Same buffers as the store's arena (2 MiB-aligned, THP, faulted in): O_DIRECT pins the
       destination pages for every read, so 4 KiB pages would make this "ceiling" slower than the store. */
    void *buf = c->buffers[__atomic_fetch_add(&c->thread_seq, 1, __ATOMIC_RELAXED)];
    for (;;) {
        int i = __atomic_fetch_add(&c->next, 1, __ATOMIC_RELAXED);
        if (i >= c->n) break;
        uint64_t off = c->offset[i], len = c->length[i];
        if (c->direct) {
            uint64_t start = off / 4096 * 4096;
            len = (off + len + 4095) / 4096 * 4096 - start;
            off = start;
        }
        uint64_t got = 0;
        while (got < len) {
            ssize_t r = pread(c->fds[c->file[i]], (char *)buf + got, len - got, (off_t)(off + got));
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) {
                if (r < 0) __atomic_store_n(&c->error, errno, __ATOMIC_RELAXED);
                break;
            }
            got += (uint64_t)r;
        }
        __atomic_fetch_add(&c->bytes, got, __ATOMIC_RELAXED);
    }
    return NULL;
}

int k3_read_ceiling(const char *const *paths, int n_paths, const uint32_t *file, const uint64_t *offset,
                    const uint64_t *length, int n, int qd, int direct, uint64_t *bytes, double *seconds) {
    ceiling_ctx c;
    memset(&c, 0, sizeof c);
    c.fds = calloc((size_t)n_paths, sizeof(int));
    if (!c.fds) return ENOMEM;
    int rc = 0;
    for (int i = 0; i < n_paths; i++) {
        c.fds[i] = open(paths[i], O_RDONLY | O_CLOEXEC | (direct ? O_DIRECT : 0));
        if (c.fds[i] < 0) rc = errno;
    }
    for (int i = 0; i < n; i++) {
        if (file[i] >= (uint32_t)n_paths) rc = EINVAL;
        if (length[i] > c.max_len) c.max_len = length[i];
    }
    if (rc == 0) {
        c.file = file;
        c.offset = offset;
        c.length = length;
        c.n = n;
        c.direct = direct;
        pthread_t *th = calloc((size_t)qd, sizeof(pthread_t));
        c.buffers = calloc((size_t)qd, sizeof(uint8_t *));
        for (int i = 0; i < qd && c.buffers; i++)
            if (!(c.buffers[i] = k3_arena_alloc(c.max_len + 8192, 4096, 1))) rc = ENOMEM;
        if (!th || !c.buffers) rc = ENOMEM;
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        int started = 0;
        for (int i = 0; i < qd && th && rc == 0; i++)
            if (pthread_create(&th[i], NULL, ceiling_worker, &c) == 0) started++;
        for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
        clock_gettime(CLOCK_MONOTONIC, &b);
        free(th);
        for (int i = 0; i < qd && c.buffers; i++) k3_arena_free(c.buffers[i]);
        free(c.buffers);
        *bytes = c.bytes;
        *seconds = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) * 1e-9;
        if (rc == 0) rc = c.error;
    }
    for (int i = 0; i < n_paths; i++)
        if (c.fds[i] >= 0) close(c.fds[i]);
    free(c.fds);
    return rc;
}

/* ------------------------------------------------------------------------------------------------ */
/* Memory backing ceiling                                                                            */
/* ------------------------------------------------------------------------------------------------ */

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux >= 5.14 */
#endif

#define BACKING_PIECE (8ull << 20)
#define BACKING_MAX_THREADS 8

typedef struct {
    uint8_t *mem;
    uint64_t bytes;
    uint64_t next; /* atomic: next piece */
    int error;     /* atomic, first errno */
} backing_ctx;

/* Faults pieces in until none is left (one write per 4 KiB page where POPULATE_WRITE is refused). */
static void *backing_worker(void *arg) {
    backing_ctx *c = arg;
    for (;;) {
        uint64_t lo = __atomic_fetch_add(&c->next, BACKING_PIECE, __ATOMIC_RELAXED);
        if (lo >= c->bytes) break;
        uint64_t n = c->bytes - lo < BACKING_PIECE ? c->bytes - lo : BACKING_PIECE;
        if (madvise(c->mem + lo, (size_t)n, MADV_POPULATE_WRITE) == 0) continue;
        if (errno != EINVAL) __atomic_store_n(&c->error, errno, __ATOMIC_RELAXED);
        volatile uint8_t *v = c->mem + lo;
        for (uint64_t o = 0; o < n; o += 4096) v[o] = 0;
    }
    return NULL;
}

int k3_backing_ceiling(uint64_t bytes, int threads, int huge, double *seconds) {
    *seconds = 0;
    if (bytes == 0) return 0;
    if (threads <= 0) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        threads = cores < 1 ? 1 : (int)cores;
    }
    if (threads > BACKING_MAX_THREADS) threads = BACKING_MAX_THREADS;
    const uint64_t H = 2ull << 20;
    bytes = (bytes + 4095) / 4096 * 4096;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    /* Mapped like the load's arena: one anonymous mapping, trimmed to a 2 MiB-aligned start. */
    size_t want = (size_t)(bytes + H);
    uint8_t *raw = mmap(NULL, want, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (raw == MAP_FAILED) return errno;
    uint8_t *mem = (uint8_t *)(((uintptr_t)raw + H - 1) & ~(uintptr_t)(H - 1));
    if (huge) madvise(mem, (size_t)bytes, MADV_HUGEPAGE);
    backing_ctx c = {mem, bytes, 0, 0};
    pthread_t th[BACKING_MAX_THREADS];
    int started = 0;
    for (int i = 0; i < threads; i++)
        if (pthread_create(&th[started], NULL, backing_worker, &c) == 0) started++;
    if (started == 0) backing_worker(&c);
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
    clock_gettime(CLOCK_MONOTONIC, &b);
    munmap(raw, want);
    *seconds = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) * 1e-9;
    return c.error;
}

int k3_drop_file_cache(const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return errno;
    fdatasync(fd);
    int rc = posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
    return rc;
}
