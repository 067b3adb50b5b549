/*
 * pool.c: a small fork-join pool. The caller publishes (task, ctx, n_tasks) as job g, wakes the
 * workers, and everybody (caller included) claims task indices from one atomic word holding
 * (g << 32 | tasks not yet claimed). The caller returns as soon as every TASK is done, not when
 * every worker has woken: on a busy machine a descheduled worker would otherwise hold each call
 * for milliseconds. A worker that wakes late finds the word tagged with another job and claims
 * nothing, so it can never run a task twice or touch the next job's data.
 * Workers spin briefly before sleeping: decode issues thousands of short jobs per token and a
 * condition-variable wake-up costs tens of microseconds. The spin is bounded in TIME (K3_POOL_SPIN_US,
 * default 200 us, checked every 32 pauses), not in pause instructions: a PAUSE takes anything from a
 * few to ~150 cycles depending on the CPU, so a count bound meant ~10 us on some machines and ~1 ms
 * on others. Within a burst of calls (a layer) workers stay hot; an idle process stops spinning
 * after the bound and sleeps on the condition variable, so it never burns a core.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include "pool.h"

#define SPIN_US_DEFAULT 200
#define SPIN_US_MAX 100000
#define MAX_THREADS 256

typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t wake;
    pthread_cond_t done;
    pthread_t threads[MAX_THREADS];
    int n_workers;            /* threads besides the caller */
    k3_task_fn task;
    void *ctx;
    int n_tasks;
    _Atomic uint64_t claim;   /* (job << 32) | tasks not yet claimed */
    atomic_int tasks_done;
    atomic_uint generation;   /* the current job id, bumped once per job */
    int shutting_down;
} pool_state;

static pool_state pool = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .wake = PTHREAD_COND_INITIALIZER,
    .done = PTHREAD_COND_INITIALIZER,
};
static pthread_mutex_t run_lock = PTHREAD_MUTEX_INITIALIZER; /* one job at a time (worker_threads) */
static atomic_int configured_threads = 0;                   /* 0 = not started yet */
static _Thread_local int inside_task = 0;                   /* a task calling parallel_for runs it inline */
static long spin_ns = -1;                                   /* K3_POOL_SPIN_US, read once */

/* Counters for the bench (k3_pool_stats): jobs run on the pool, jobs in which a worker ran at least
   one task, and times a worker went to sleep on the condition variable. */
static atomic_ulong stat_jobs, stat_jobs_helped, stat_sleeps;
static _Atomic unsigned helped_job; /* the last job a worker ran a task of */

static void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long)ts.tv_sec * 1000000000L + ts.tv_nsec;
}

static long spin_budget_ns(void) {
    if (spin_ns < 0) {
        const char *env = getenv("K3_POOL_SPIN_US");
        long us = SPIN_US_DEFAULT;
        if (env && *env) {
            char *end;
            long v = strtol(env, &end, 10);
            if (*end == 0 && v >= 0 && v <= SPIN_US_MAX) us = v;
        }
        spin_ns = us * 1000L;
    }
    return spin_ns;
}

/* Spins (PAUSE) until done(arg) or the time bound passes; returns done(arg). */
static int spin_until(int (*done)(const void *), const void *arg) {
    const long budget = spin_budget_ns();
    if (done(arg)) return 1;
    if (budget == 0) return 0;
    const long t0 = now_ns();
    for (;;) {
        for (int i = 0; i < 32; i++) {
            if (done(arg)) return 1;
            cpu_relax();
        }
        if (now_ns() - t0 > budget) return done(arg);
    }
}

/* ---------------------------------------------------------------- claiming tasks */

/* Index of a task of `job` nobody has claimed yet, or -1. */
static int claim_task(unsigned job) {
    uint64_t word = atomic_load(&pool.claim);
    for (;;) {
        uint32_t remaining = (uint32_t)word;
        if ((unsigned)(word >> 32) != job || remaining == 0) return -1;
        if (atomic_compare_exchange_weak(&pool.claim, &word, word - 1))
            return pool.n_tasks - (int)remaining; /* safe: job cannot finish before this task */
    }
}

static void run_tasks_of(unsigned job, int is_worker) {
    int i;
    while ((i = claim_task(job)) >= 0) {
        if (is_worker && atomic_exchange(&helped_job, job) != job) atomic_fetch_add(&stat_jobs_helped, 1);
        int n_tasks = pool.n_tasks; /* read before the last task completes and the job ends */
        inside_task = 1;
        pool.task(pool.ctx, i);
        inside_task = 0;
        if (atomic_fetch_add(&pool.tasks_done, 1) + 1 == n_tasks) {
            pthread_mutex_lock(&pool.lock);
            pthread_cond_signal(&pool.done);
            pthread_mutex_unlock(&pool.lock);
        }
    }
}

/* ---------------------------------------------------------------- workers */

static int generation_moved(const void *seen) {
    return atomic_load_explicit(&pool.generation, memory_order_acquire) != *(const unsigned *)seen;
}

static unsigned wait_for_job(unsigned seen) {
    if (spin_until(generation_moved, &seen)) return atomic_load_explicit(&pool.generation, memory_order_acquire);
    pthread_mutex_lock(&pool.lock);
    unsigned g;
    if ((g = atomic_load(&pool.generation)) == seen && !pool.shutting_down) atomic_fetch_add(&stat_sleeps, 1);
    while ((g = atomic_load(&pool.generation)) == seen && !pool.shutting_down)
        pthread_cond_wait(&pool.wake, &pool.lock);
    pthread_mutex_unlock(&pool.lock);
    return g;
}

static void *worker_main(void *arg) {
    /* The generation at spawn time comes from the creator: reading it here could miss a job
       published before this thread first ran. */
    unsigned seen = (unsigned)(uintptr_t)arg;
    for (;;) {
        seen = wait_for_job(seen);
        if (pool.shutting_down) return NULL;
        run_tasks_of(seen, 1);
    }
}

/* ---------------------------------------------------------------- start / stop */

static int default_thread_count(void) {
    const char *env = getenv("K3_THREADS");
    if (env && *env) {
        int n = atoi(env);
        if (n >= 1 && n <= MAX_THREADS) return n;
    }
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1) n = 1;
    if (n > MAX_THREADS) n = MAX_THREADS;
    return (int)n;
}

static void stop_workers(void) {
    pthread_mutex_lock(&pool.lock);
    pool.shutting_down = 1;
    atomic_fetch_add(&pool.generation, 1);
    pthread_cond_broadcast(&pool.wake);
    pthread_mutex_unlock(&pool.lock);
    for (int i = 0; i < pool.n_workers; i++) pthread_join(pool.threads[i], NULL);
    pool.n_workers = 0;
    pool.shutting_down = 0;
}

static void start_workers(int n_threads) {
    pool.n_workers = 0;
    for (int i = 0; i < n_threads - 1; i++) {
        void *spawn_generation = (void *)(uintptr_t)atomic_load(&pool.generation);
        if (pthread_create(&pool.threads[i], NULL, worker_main, spawn_generation) != 0) break;
        pthread_setname_np(pool.threads[i], "k3-pool"); /* the engine's per-thread CPU report groups by name */
        pool.n_workers++;
    }
    configured_threads = pool.n_workers + 1;
}

static void ensure_started(void) {
    if (configured_threads == 0) start_workers(default_thread_count());
}

int k3_pool_thread_count(void) {
    int started = atomic_load(&configured_threads); /* lock-free: kernels ask this inside tasks */
    if (started) return started;
    pthread_mutex_lock(&run_lock);
    ensure_started();
    int n = configured_threads;
    pthread_mutex_unlock(&run_lock);
    return n;
}

int k3_pool_set_threads(int n_threads) {
    if (n_threads < 1 || n_threads > MAX_THREADS) return -1;
    pthread_mutex_lock(&run_lock);
    if (configured_threads != 0) stop_workers();
    start_workers(n_threads);
    pthread_mutex_unlock(&run_lock);
    return 0;
}

/* ---------------------------------------------------------------- running a job */

static int all_done(const void *n_tasks) { return atomic_load(&pool.tasks_done) >= *(const int *)n_tasks; }

int k3_pool_in_task(void) { return inside_task; }

void k3_pool_stats(unsigned long out[3]) {
    out[0] = atomic_load(&stat_jobs);
    out[1] = atomic_load(&stat_jobs_helped);
    out[2] = atomic_load(&stat_sleeps);
}

void k3_pool_parallel_for(int n_tasks, k3_task_fn task, void *ctx) {
    if (n_tasks <= 0) return;
    if (inside_task) {
        for (int i = 0; i < n_tasks; i++) task(ctx, i);
        return;
    }
    pthread_mutex_lock(&run_lock);
    ensure_started();
    if (n_tasks == 1 || pool.n_workers == 0) {
        /* Inline, but still "inside a task": a kernel the task calls that uses the pool itself
           (gemv_bf16 on a block of rows) must run inline too, not wait for run_lock we hold. */
        inside_task = 1;
        for (int i = 0; i < n_tasks; i++) task(ctx, i);
        inside_task = 0;
        pthread_mutex_unlock(&run_lock);
        return;
    }
    unsigned job = atomic_load(&pool.generation) + 1;
    pool.task = task;
    pool.ctx = ctx;
    pool.n_tasks = n_tasks;
    atomic_store(&pool.tasks_done, 0);
    atomic_store(&pool.claim, ((uint64_t)job << 32) | (uint32_t)n_tasks);
    pthread_mutex_lock(&pool.lock);
    atomic_store_explicit(&pool.generation, job, memory_order_release);
    pthread_cond_broadcast(&pool.wake);
    pthread_mutex_unlock(&pool.lock);

    atomic_fetch_add(&stat_jobs, 1);
    run_tasks_of(job, 0);

    if (!spin_until(all_done, &n_tasks)) {
        pthread_mutex_lock(&pool.lock);
        while (atomic_load(&pool.tasks_done) < n_tasks) pthread_cond_wait(&pool.done, &pool.lock);
        pthread_mutex_unlock(&pool.lock);
    }
    pthread_mutex_unlock(&run_lock);
}

/* ---------------------------------------------------------------- ranges */

typedef struct {
    size_t n, per_task;
    k3_range_fn fn;
    void *ctx;
} range_job;

static void range_task(void *ctx, int task) {
    const range_job *r = ctx;
    size_t lo = (size_t)task * r->per_task;
    size_t hi = lo + r->per_task < r->n ? lo + r->per_task : r->n;
    r->fn(r->ctx, lo, hi);
}

void k3_pool_for_ranges(size_t n, size_t per_task, k3_range_fn fn, void *ctx) {
    if (n == 0) return;
    if (per_task == 0) per_task = 1;
    if (n <= per_task) {
        fn(ctx, 0, n);
        return;
    }
    range_job r = {n, per_task, fn, ctx};
    k3_pool_parallel_for((int)((n + per_task - 1) / per_task), range_task, &r);
}
