/* asan_driver.c: both read engines (io_uring, pread threads) under ASan/UBSan: direct and buffered
   reads in pieces, faults, prefetch cancel, destroy with reads in flight (see test-utils asan.sh). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "arena.h"
#include "direct_file.h"
#include "read_pool.h"

#define FILE_BYTES (3u << 20)
#define SLOT_BYTES (256u << 10)
#define SLOTS 16

/* ---------------------------------------------------------------- completions */

typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int done, cancelled, failed;
    int64_t bad_timing;
} tally;

static void on_done(void *ctx, k3_read_done *d) {
    tally *t = ctx;
    pthread_mutex_lock(&t->lock);
    t->done++;
    if (d->cancelled) t->cancelled++;
    else if (d->result.status != 0) t->failed++;
    if (!d->cancelled && d->end_ns < d->start_ns) t->bad_timing++;
    pthread_cond_broadcast(&t->cond);
    pthread_mutex_unlock(&t->lock);
    free(d);
}

static void wait_for(tally *t, int n) {
    pthread_mutex_lock(&t->lock);
    while (t->done < n) pthread_cond_wait(&t->cond, &t->lock);
    pthread_mutex_unlock(&t->lock);
}

/* ---------------------------------------------------------------- checks */

static int failures = 0;

/* Prints the message and counts a failure when `ok` is false. */
static void check(int ok, const char *fmt, ...) {
    if (ok) return;
    failures++;
    va_list ap;
    va_start(ap, fmt);
    printf("FAIL: ");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
}

static uint8_t pattern(uint64_t x) { return (uint8_t)((x * 2654435761u) >> 13); }

static int slot_matches(const uint8_t *slot, uint64_t data_offset, uint64_t offset, uint64_t length) {
    for (uint64_t i = 0; i < length; i++)
        if (slot[data_offset + i] != pattern(offset + i)) return 0;
    return 1;
}

/* ---------------------------------------------------------------- one engine */

static void run_engine(const char *path, int engine, int direct) {
    const char *name = engine == K3_ENGINE_URING ? "io_uring" : "pread";
    k3_file f;
    char msg[256];
    check(k3_file_open(&f, path, direct, msg, sizeof msg) == 0, "open %s", msg);
    uint8_t *arena = k3_arena_alloc((uint64_t)SLOT_BYTES * SLOTS, 4096, 1);
    tally t = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0, 0};
    k3_read_pool_config cfg = {&f, 1, arena, SLOT_BYTES, SLOTS, 4, 1, engine, 0, on_done, &t};
    k3_read_pool *p = k3_read_pool_create(&cfg, msg, sizeof msg);
    check(p != NULL, "%s: create: %s", name, msg);
    if (!p) return;
    k3_read_pool_stats st;
    k3_read_pool_stats_get(p, &st);
    check(st.engine == (engine == K3_ENGINE_URING ? K3_ENGINE_IN_USE_URING : K3_ENGINE_IN_USE_PREAD), "%s: engine %d",
          name, st.engine);

    /* 1. one unaligned range per slot, demand and prefetch mixed: bytes in place */
    int n = 0;
    for (int s = 0; s < SLOTS; s++) {
        uint64_t offset = 1000 + (uint64_t)s * 150001, length = 100000 + (uint64_t)s * 777;
        k3_read_job j = {s + 1, 0, (uint32_t)s, s % 3 == 0, offset, length, K3_BASE_AUTO, NULL};
        check(k3_read_pool_submit(p, &j) == 0, "submit");
        n++;
    }
    wait_for(&t, n);
    check(t.failed == 0 && t.cancelled == 0 && t.bad_timing == 0, "%s: %d failed", name, t.failed);
    for (int s = 0; s < SLOTS; s++) {
        uint64_t offset = 1000 + (uint64_t)s * 150001, length = 100000 + (uint64_t)s * 777;
        uint64_t data_offset = direct ? offset % 4096 : 0;
        check(slot_matches(arena + (uint64_t)s * SLOT_BYTES, data_offset, offset, length), "%s: slot %d bytes", name, s);
    }

    /* 2. one range in 8 KiB pieces sharing a base */
    uint64_t offset = 12345, length = 200000, base = offset / 4096 * 4096;
    for (uint64_t at = offset; at < offset + length;) {
        uint64_t end = (at / 8192 + 1) * 8192;
        if (end > offset + length) end = offset + length;
        k3_read_job j = {n + 1, 0, 0, K3_PRIORITY_DEMAND, at, end - at, base, NULL};
        k3_read_pool_submit(p, &j);
        n++;
        at = end;
    }
    wait_for(&t, n);
    check(t.failed == 0, "%s: pieces failed", name);
    check(slot_matches(arena, offset - base, offset, length), "%s: pieces bytes", name);

    /* 3. faults: EIO, short read, EOF past the end (range check), O_DIRECT refused */
    int kinds[] = {K3_FAULT_EIO, K3_FAULT_SHORT};
    for (int k = 0; k < 2; k++) {
        k3_read_pool_inject_fault(p, 0, kinds[k]);
        k3_read_job j = {n + 1, 0, 1, K3_PRIORITY_DEMAND, 5000, 60000, K3_BASE_AUTO, NULL};
        k3_read_pool_submit(p, &j);
        n++;
        wait_for(&t, n);
        check(t.failed == k + 1, "%s: fault %d not reported", name, kinds[k]);
        check(direct == (f.fd_direct >= 0 && !f.direct_refused), "%s: fault %d changed the file's O_DIRECT state", name, kinds[k]);
    }
    k3_read_job past = {n + 1, 0, 1, K3_PRIORITY_DEMAND, FILE_BYTES - 100, 200, K3_BASE_AUTO, NULL};
    k3_read_pool_submit(p, &past);
    n++;
    wait_for(&t, n);
    check(t.failed == 3, "%s: read past the end not refused", name);
    k3_read_pool_inject_fault(p, 0, K3_FAULT_SPLIT);
    k3_read_job split = {n + 1, 0, 3, K3_PRIORITY_DEMAND, 4444, 123456, K3_BASE_AUTO, NULL};
    k3_read_pool_submit(p, &split);
    n++;
    wait_for(&t, n);
    check(t.failed == 3, "%s: split read failed", name);
    check(slot_matches(arena + 3 * SLOT_BYTES, direct ? 4444 % 4096 : 0, 4444, 123456), "%s: split bytes (direct %d)", name, direct);
    k3_read_pool_inject_fault(p, 0, K3_FAULT_DIRECT_EINVAL);
    k3_read_job refused = {n + 1, 0, 2, K3_PRIORITY_DEMAND, 7777, 90000, K3_BASE_AUTO, NULL};
    k3_read_pool_submit(p, &refused);
    n++;
    wait_for(&t, n);
    check(t.failed == 3, "%s: refused O_DIRECT read did not fall back", name);
    check(slot_matches(arena + 2 * SLOT_BYTES, 0, 7777, 90000), "%s: fallback bytes", name);
    check(f.fd_direct < 0 || f.direct_refused, "%s: file not marked", name);

    /* 4. prefetch cancel, then destroy with reads in flight and queued */
    for (int s = 0; s < 12; s++) {
        k3_read_job j = {n + 1, 0, (uint32_t)s, K3_PRIORITY_PREFETCH, (uint64_t)s * 200000, 150000, K3_BASE_AUTO, NULL};
        k3_read_pool_submit(p, &j);
        n++;
    }
    int cancelled = k3_read_pool_cancel_prefetch(p);
    wait_for(&t, n);
    check(t.cancelled == cancelled, "%s: %d cancelled, %d reported", name, cancelled, t.cancelled);
    for (int s = 0; s < SLOTS; s++) {
        k3_read_job j = {n + 1, 0, (uint32_t)s, s % 2, (uint64_t)s * 100000, 180000, K3_BASE_AUTO, NULL};
        k3_read_pool_submit(p, &j);
        n++;
    }
    k3_read_pool_destroy(p);
    check(t.done == n, "%s: %d of %d reads reported after destroy", name, t.done, n);
    k3_file_close(&f);
    k3_arena_free(arena);
    printf("%s %s: %d reads, %d cancelled\n", name, direct ? "direct" : "buffered", n, t.cancelled);
}

int main(void) {
    char path[] = "/var/tmp/k3-asan-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) {
        perror("mkstemp");
        return 1;
    }
    uint8_t *buf = malloc(FILE_BYTES);
    for (uint64_t i = 0; i < FILE_BYTES; i++) buf[i] = pattern(i);
    if (write(fd, buf, FILE_BYTES) != (ssize_t)FILE_BYTES) {
        perror("write");
        return 1;
    }
    fsync(fd);
    close(fd);
    free(buf);
    int engines[] = {K3_ENGINE_URING, K3_ENGINE_PREAD};
    for (int e = 0; e < 2; e++)
        for (int direct = 1; direct >= 0; direct--) run_engine(path, engines[e], direct);
    unlink(path);
    if (failures) {
        printf("moe-stream asan: %d failures\n", failures);
        return 1;
    }
    puts("moe-stream asan ok");
    return 0;
}
