/* gemv_trace.c: the opt-in record and replay of k3_gemv_bf16 calls (see gemv_trace.h). */
#include "gemv_trace.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#include "gemv_bf16.h"

static k3_gemv_record *records;
static size_t capacity;
static atomic_size_t next;   /* calls seen since start (records kept: min(next, capacity)) */
static atomic_int active;
static atomic_size_t in_task;

uint64_t k3_gemv_trace_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int k3_gemv_trace_on(void) { return atomic_load_explicit(&active, memory_order_relaxed); }

void k3_gemv_trace_add(const uint16_t *w, size_t ld, size_t rows, size_t cols, uint64_t ns) {
    size_t i = atomic_fetch_add(&next, 1);
    if (i < capacity) records[i] = (k3_gemv_record){w, ld, rows, cols, ns};
}

void k3_gemv_trace_count_in_task(void) { atomic_fetch_add(&in_task, 1); }

int k3_gemv_trace_start(size_t cap) {
    atomic_store(&active, 0);
    free(records);
    records = cap ? malloc(cap * sizeof *records) : NULL;
    if (cap && !records) {
        capacity = 0;
        return -1;
    }
    capacity = cap;
    atomic_store(&next, 0);
    atomic_store(&in_task, 0);
    atomic_store(&active, 1);
    return 0;
}

const k3_gemv_record *k3_gemv_trace_stop(size_t *kept, size_t *seen, size_t *in_tasks) {
    atomic_store(&active, 0);
    *in_tasks = atomic_load(&in_task);
    size_t n = atomic_load(&next);
    *seen = n;
    *kept = n < capacity ? n : capacity;
    return records;
}

int k3_gemv_trace_replay(uint64_t *ns_out) {
    if (k3_gemv_trace_on()) return -1;
    size_t n = atomic_load(&next);
    if (n > capacity) n = capacity;
    size_t max_rows = 1, max_cols = 1;
    for (size_t i = 0; i < n; i++) {
        if (records[i].rows > max_rows) max_rows = records[i].rows;
        if (records[i].cols > max_cols) max_cols = records[i].cols;
    }
    float *x = malloc(max_cols * sizeof *x), *y = malloc(max_rows * sizeof *y);
    if (!x || !y) {
        free(x);
        free(y);
        return -1;
    }
    for (size_t i = 0; i < max_cols; i++) x[i] = 0.01f * (float)(i % 97) - 0.48f; /* normal values, no denormals */
    for (size_t i = 0; i < n; i++) {
        const k3_gemv_record *r = &records[i];
        uint64_t t0 = k3_gemv_trace_now_ns();
        k3_gemv_bf16(r->w, r->ld, x, y, r->rows, r->cols);
        ns_out[i] = k3_gemv_trace_now_ns() - t0;
    }
    free(x);
    free(y);
    return 0;
}
