/* pool_bench.c: a list of reads through the read pool from C, timed in wall and CPU seconds. */
#define _GNU_SOURCE
#include "pool_bench.h"
#include "arena.h"
#include "direct_file.h"
#include "read_pool.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int done;
    int status;     /* first error */
    uint64_t bytes; /* device bytes */
    char message[K3_ERR_MESSAGE];
} bench_tally;

static void on_done(void *ctx, k3_read_done *d) {
    bench_tally *t = ctx;
    pthread_mutex_lock(&t->lock);
    t->done++;
    t->bytes += d->result.device_bytes;
    if (d->result.status != 0 && t->status == 0) {
        t->status = d->result.status;
        snprintf(t->message, sizeof t->message, "%s", d->result.message);
    }
    pthread_cond_signal(&t->cond);
    pthread_mutex_unlock(&t->lock);
    free(d);
}

static double cpu_now(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_stime.tv_sec + (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
}

static double wall_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Submits everything, waits for the last completion; the slots are reused round-robin (the bytes
   are not looked at, so two reads sharing a slot only cost what they would anyway). */
static int run(k3_read_pool *p, bench_tally *t, const uint32_t *file, const uint64_t *offset, const uint64_t *length,
               int n, int slots) {
    for (int i = 0; i < n; i++) {
        k3_read_job j = {i, file[i], (uint32_t)(i % slots), K3_PRIORITY_DEMAND, offset[i], length[i], K3_BASE_AUTO, NULL, 0, NULL};
        if (k3_read_pool_submit(p, &j) != 0) return ENOMEM;
    }
    pthread_mutex_lock(&t->lock);
    while (t->done < n) pthread_cond_wait(&t->cond, &t->lock);
    pthread_mutex_unlock(&t->lock);
    return 0;
}

int k3_pool_bench(const char *const *paths, int n_paths, const uint32_t *file, const uint64_t *offset,
                  const uint64_t *length, int n, int qd, int engine, int direct, uint64_t *bytes, double *seconds,
                  double *cpu_seconds, int *engine_used, char *message, size_t message_len) {
    k3_file *files = calloc((size_t)n_paths, sizeof(k3_file));
    if (!files) return ENOMEM;
    int rc = 0, opened = 0;
    for (; opened < n_paths && rc == 0; opened++) rc = k3_file_open(&files[opened], paths[opened], direct, message, message_len);
    if (rc != 0) opened--;
    uint64_t max_len = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        if (file[i] >= (uint32_t)n_paths || offset[i] > files[file[i]].size || length[i] > files[file[i]].size - offset[i]) {
            snprintf(message, message_len, "read %d lies outside its file", i);
            rc = EINVAL;
        }
        if (length[i] > max_len) max_len = length[i];
    }
    uint32_t align = 4096;
    for (int i = 0; i < opened; i++) align = files[i].offset_align > align ? files[i].offset_align : align;
    uint64_t slot_bytes = k3_file_superset_bytes(max_len, align);
    uint8_t *arena = rc == 0 ? k3_arena_alloc(slot_bytes * (uint64_t)qd, 4096, 1) : NULL;
    if (rc == 0 && !arena) rc = ENOMEM;
    if (rc == 0) {
        bench_tally t = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0, ""};
        k3_read_pool_config cfg = {files, (uint32_t)n_paths, arena, slot_bytes, (uint32_t)qd, qd, 1, engine, 0, on_done, &t};
        k3_read_pool *p = k3_read_pool_create(&cfg, message, message_len);
        if (!p) rc = EINVAL;
        if (p) {
            k3_read_pool_stats st;
            k3_read_pool_stats_get(p, &st);
            *engine_used = st.engine;
            double w0 = wall_now(), c0 = cpu_now();
            rc = run(p, &t, file, offset, length, n, qd);
            *seconds = wall_now() - w0;
            *cpu_seconds = cpu_now() - c0;
            *bytes = t.bytes;
            k3_read_pool_destroy(p);
            if (rc == 0 && t.status != 0) {
                rc = t.status;
                snprintf(message, message_len, "%s", t.message);
            }
        }
    }
    k3_arena_free(arena);
    for (int i = 0; i < opened; i++) k3_file_close(&files[i]);
    free(files);
    return rc;
}
