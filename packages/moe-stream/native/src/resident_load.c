/* resident_load.c: blocks of shard files read by the read pool straight into one anonymous mapping. */
#define _GNU_SOURCE
#include "resident_load.h"
#include "read_pool.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux >= 5.14 */
#endif

#define HUGE_BYTES (2ull << 20)

typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    uint64_t done_jobs;
    uint64_t done_bytes; /* requested bytes of the finished pieces */
    int status;          /* first error */
    char message[K3_ERR_MESSAGE];
} load_tally;

static void on_done(void *ctx, k3_read_done *d) {
    load_tally *t = ctx;
    pthread_mutex_lock(&t->lock);
    t->done_jobs++;
    if (d->result.status == 0) {
        t->done_bytes += (uint64_t)d->id; /* the piece's length travels in the id field (see submit) */
    } else if (t->status == 0) {
        t->status = d->result.status;
        snprintf(t->message, sizeof t->message, "%s", d->result.message[0] ? d->result.message : strerror(d->result.status));
    }
    pthread_cond_signal(&t->cond);
    pthread_mutex_unlock(&t->lock);
    free(d);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Faults a block's pages in now (2 MiB pages when THP backs them); 1 when POPULATE_WRITE worked. */
static int populate(uint8_t *p, uint64_t bytes) {
    if (bytes == 0) return 1;
    uint64_t span = (bytes + 4095) / 4096 * 4096;
    if (madvise(p, (size_t)span, MADV_POPULATE_WRITE) == 0) return 1;
    /* Older kernels: one write per page does the same (the page is zero-filled either way). */
    volatile uint8_t *v = p;
    for (uint64_t o = 0; o < span; o += 4096) v[o] = 0;
    return 0;
}

#define MAX_FEEDERS 8

typedef struct {
    k3_read_job job;
    uint8_t *mem;       /* the piece's memory */
    uint64_t mem_bytes; /* bytes of it that hold data */
} load_piece;

typedef struct {
    k3_read_pool *pool;
    load_piece *pieces;
    uint64_t n;
    uint64_t next; /* atomic */
    int populate;
    int populate_ok; /* atomic and */
    load_tally *tally;
    int64_t populate_ns; /* atomic sum over the threads */
} feeder;

/* Takes pieces in order: populates each (when asked) and queues its read. A piece that cannot be
   queued is reported as a failed completion, so the waiter always sees n completions. */
static void *feed(void *arg) {
    feeder *f = arg;
    for (;;) {
        uint64_t i = __atomic_fetch_add(&f->next, 1, __ATOMIC_RELAXED);
        if (i >= f->n) break;
        load_piece *q = &f->pieces[i];
        if (f->populate) {
            int64_t t0 = k3_now_ns();
            if (!populate(q->mem, q->mem_bytes)) __atomic_store_n(&f->populate_ok, 0, __ATOMIC_RELAXED);
            __atomic_fetch_add(&f->populate_ns, k3_now_ns() - t0, __ATOMIC_RELAXED);
        }
        if (k3_read_pool_submit(f->pool, &q->job) != 0) {
            load_tally *t = f->tally;
            pthread_mutex_lock(&t->lock);
            t->done_jobs++;
            if (t->status == 0) {
                t->status = ENOMEM;
                snprintf(t->message, sizeof t->message, "cannot queue a read");
            }
            pthread_cond_signal(&t->cond);
            pthread_mutex_unlock(&t->lock);
        }
    }
    return NULL;
}

void k3_resident_block_free(uint8_t *data, uint64_t owned) {
    if (data && owned) munmap(data, (size_t)owned);
}

int k3_resident_load(const k3_load_config *cfg, k3_load_block *blocks, int n_blocks, k3_load_stats *stats, char *message,
                     size_t message_len) {
    memset(stats, 0, sizeof *stats);
    const uint64_t P = cfg->piece_bytes;
    if (P == 0 || P % HUGE_BYTES != 0 || P > (1ull << 31) - HUGE_BYTES) {
        snprintf(message, message_len, "piece_bytes %llu must be a multiple of 2 MiB below 2 GiB", (unsigned long long)P);
        return EINVAL;
    }
    /* Lay the blocks out (each at a piece boundary) and check them against their files first. */
    uint64_t total = 0, n_jobs = 0;
    for (int b = 0; b < n_blocks; b++) {
        k3_load_block *k = &blocks[b];
        k->data = NULL;
        if (k->file >= cfg->n_files || k->end <= k->start) {
            snprintf(message, message_len, "block %d: bad file index or empty range", b);
            return EINVAL;
        }
        k3_file *f = &cfg->files[k->file];
        if (k->end > f->size) {
            snprintf(message, message_len, "%s: truncated shard: it has %llu bytes but the tensors need bytes up to %llu", f->path,
                     (unsigned long long)f->size, (unsigned long long)k->end);
            return ERANGE;
        }
        uint64_t a = f->offset_align;
        if (a == 0 || P % a != 0) {
            snprintf(message, message_len, "%s: direct-I/O alignment %llu does not divide the %llu-byte pieces", f->path,
                     (unsigned long long)a, (unsigned long long)P);
            return EINVAL;
        }
        k->base = k->start / a * a;
        k->bytes = k->end - k->base;
        uint64_t span = (k->end + a - 1) / a * a - k->base;
        uint64_t pieces = (span + P - 1) / P;
        k->owned = pieces * P;
        n_jobs += pieces;
        total += k->owned;
    }
    if (n_blocks == 0) return 0;
    double t0 = now_s();
    /* One mapping, 2 MiB-aligned (head and tail trimmed), so every block starts on a huge page. */
    size_t want = (size_t)(total + HUGE_BYTES);
    uint8_t *raw = mmap(NULL, want, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (raw == MAP_FAILED) {
        int e = errno;
        snprintf(message, message_len, "cannot map %llu bytes for the resident weights: %s", (unsigned long long)total, strerror(e));
        return e;
    }
    uint8_t *arena = (uint8_t *)(((uintptr_t)raw + HUGE_BYTES - 1) & ~(uintptr_t)(HUGE_BYTES - 1));
    if (arena > raw) munmap(raw, (size_t)(arena - raw));
    size_t tail = (size_t)((raw + want) - (arena + total));
    if (tail) munmap(arena + total, tail);
    int prefault = cfg->prefault;
    if (prefault != K3_PREFAULT_NONE && madvise(arena, (size_t)total, MADV_HUGEPAGE) != 0) prefault = K3_PREFAULT_NONE;
    stats->prefault_used = prefault;
    uint64_t off = 0;
    for (int b = 0; b < n_blocks; b++) {
        blocks[b].data = arena + off;
        off += blocks[b].owned;
    }
    stats->mapped_bytes = total;

    load_tally t;
    memset(&t, 0, sizeof t);
    pthread_mutex_init(&t.lock, NULL);
    pthread_cond_init(&t.cond, NULL);
    k3_read_pool_config pc;
    memset(&pc, 0, sizeof pc);
    pc.files = cfg->files;
    pc.n_files = cfg->n_files;
    pc.arena = arena;
    pc.slot_bytes = P;
    pc.n_slots = (uint32_t)(total / P);
    pc.threads = cfg->threads;
    pc.max_prefetch_inflight = 0;
    pc.engine = cfg->engine;
    pc.on_done = on_done;
    pc.ctx = &t;
    int rc = 0;
    k3_read_pool *pool = total / P > UINT32_MAX ? NULL : k3_read_pool_create(&pc, message, message_len);
    if (!pool) {
        if (total / P > UINT32_MAX) snprintf(message, message_len, "too many pieces");
        rc = EINVAL;
    }
    if (pool && cfg->fault_kind) k3_read_pool_inject_fault(pool, cfg->fault_after, cfg->fault_kind);
    uint64_t total_bytes = 0;
    for (int b = 0; b < n_blocks; b++) total_bytes += blocks[b].end - blocks[b].start;
    /* Every piece's read, in file order; under POPULATE its pages are faulted in just before it is queued. */
    load_piece *pieces = rc == 0 ? calloc((size_t)(n_jobs ? n_jobs : 1), sizeof(load_piece)) : NULL;
    if (rc == 0 && !pieces) {
        snprintf(message, message_len, "out of memory");
        rc = ENOMEM;
    }
    uint64_t np = 0;
    for (int b = 0; b < n_blocks && rc == 0; b++) {
        k3_load_block *k = &blocks[b];
        uint32_t slot0 = (uint32_t)((uint64_t)(k->data - arena) / P);
        for (uint64_t i = 0; i * P < k->owned; i++) {
            uint64_t lo = k->base + i * P, hi = lo + P;
            uint64_t from = k->start > lo ? k->start : lo, to = k->end < hi ? k->end : hi;
            if (to <= from) continue; /* alignment tail only */
            load_piece *q = &pieces[np++];
            /* The id carries the piece length (< 2^31) so completions can count bytes without a table. */
            k3_read_job j = {(int32_t)(to - from), k->file, slot0 + (uint32_t)i, K3_PRIORITY_DEMAND, from, to - from, lo, NULL, 0, NULL};
            q->job = j;
            q->mem = k->data + i * P;
            q->mem_bytes = (k->end - lo < P ? k->end - lo : P);
        }
    }
    feeder fd;
    memset(&fd, 0, sizeof fd);
    fd.pool = pool;
    fd.pieces = pieces;
    fd.n = np;
    fd.populate = prefault == K3_PREFAULT_POPULATE;
    fd.populate_ok = 1;
    fd.tally = &t;
    pthread_t feeders[MAX_FEEDERS];
    int n_feeders = 0;
    if (rc == 0) {
        /* Populating is first-touch page zeroing (in a VM also the host backing each fresh page, which
           can cost more than the disk read): spread over the cores by default, running ahead of the
           reads piece by piece, so faulting and reading overlap instead of pacing each other. Without
           POPULATE one feeder just queues everything. */
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        int want = !fd.populate ? 1 : cfg->populate_threads > 0 ? cfg->populate_threads : (int)(cores < 1 ? 1 : cores);
        if (want > MAX_FEEDERS) want = MAX_FEEDERS;
        for (int i = 0; i < want; i++)
            if (pthread_create(&feeders[n_feeders], NULL, feed, &fd) == 0) n_feeders++;
        if (n_feeders == 0) feed(&fd);
    }
    uint64_t submitted = np; /* every piece is either queued or counted as failed by its feeder */
    /* Wait for every submitted piece, reporting progress on this thread. */
    if (pool) {
        pthread_mutex_lock(&t.lock);
        while (t.done_jobs < submitted) {
            struct timespec until;
            clock_gettime(CLOCK_REALTIME, &until);
            long ms = cfg->progress_ms > 0 ? cfg->progress_ms : 1000;
            until.tv_sec += ms / 1000;
            until.tv_nsec += (ms % 1000) * 1000000L;
            if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
            pthread_cond_timedwait(&t.cond, &t.lock, &until);
            if (cfg->progress && t.done_jobs < submitted) {
                uint64_t d = t.done_bytes;
                pthread_mutex_unlock(&t.lock);
                cfg->progress(cfg->progress_ctx, d, total_bytes);
                pthread_mutex_lock(&t.lock);
            }
        }
        pthread_mutex_unlock(&t.lock);
        for (int i = 0; i < n_feeders; i++) pthread_join(feeders[i], NULL);
        k3_read_pool_stats st;
        k3_read_pool_stats_get(pool, &st);
        stats->reads = st.reads;
        stats->device_bytes = st.device_bytes;
        stats->requested_bytes = st.requested_bytes;
        stats->direct_reads = st.direct_reads;
        stats->buffered_reads = st.buffered_reads;
        stats->engine = st.engine;
        stats->read_busy_seconds = (double)st.busy_ns * 1e-9;
        snprintf(stats->engine_note, sizeof stats->engine_note, "%s", st.engine_note);
        k3_read_pool_destroy(pool);
    }
    if (fd.populate && !fd.populate_ok) stats->prefault_used = K3_PREFAULT_HUGE;
    stats->populate_threads = fd.populate ? (n_feeders > 0 ? n_feeders : 1) : 0;
    stats->populate_seconds = (double)fd.populate_ns * 1e-9;
    free(pieces);
    stats->seconds = now_s() - t0;
    if (rc == 0 && t.status != 0) {
        rc = t.status;
        snprintf(message, message_len, "%s", t.message);
    }
    if (rc == 0 && cfg->progress) cfg->progress(cfg->progress_ctx, t.done_bytes, total_bytes);
    pthread_mutex_destroy(&t.lock);
    pthread_cond_destroy(&t.cond);
    if (rc != 0) {
        munmap(arena, (size_t)total);
        for (int b = 0; b < n_blocks; b++) blocks[b].data = NULL;
    }
    return rc;
}
