/* read_pool.c: two FIFO queues (demand before prefetch) served by io_uring or a fixed set of pread threads. */
#define _GNU_SOURCE
#include "read_pool.h"
#include "read_engine.h"
#include "uring_reader.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <time.h>

struct k3_read_pool {
    k3_read_pool_config cfg;
    pthread_t *threads;
    int n_threads;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    k3_read_job *demand_head, *demand_tail;
    k3_read_job *prefetch_head, *prefetch_tail;
    int queued_demand, queued_prefetch;
    int inflight, inflight_prefetch;
    int stopping;
    /* the engine: io_uring reader, or pread threads when `uring` is NULL */
    k3_uring_reader *uring;
    int engine_in_use;
    char engine_note[160];
    /* stats (under lock) */
    uint64_t reads, device_bytes, requested_bytes, direct_reads, buffered_reads;
    int64_t busy_ns, busy_since;
    /* fault injection (under lock) */
    int64_t fault_after;
    int fault_kind;
};

int64_t k3_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* ---------------------------------------------------------------- queues */

static void push(k3_read_job **head, k3_read_job **tail, k3_read_job *j) {
    j->next = NULL;
    if (*tail) (*tail)->next = j;
    else *head = j;
    *tail = j;
}

static k3_read_job *pop(k3_read_job **head, k3_read_job **tail) {
    k3_read_job *j = *head;
    if (!j) return NULL;
    *head = j->next;
    if (!*head) *tail = NULL;
    return j;
}

/* Demand first; a prefetch only when fewer than the cap are in flight, so demand always has readers. */
static k3_read_job *next_job(k3_read_pool *p) {
    k3_read_job *j = pop(&p->demand_head, &p->demand_tail);
    if (j) {
        p->queued_demand--;
        return j;
    }
    if (p->inflight_prefetch < p->cfg.max_prefetch_inflight) {
        j = pop(&p->prefetch_head, &p->prefetch_tail);
        if (j) {
            p->queued_prefetch--;
            p->inflight_prefetch++;
        }
    }
    return j;
}

/* ---------------------------------------------------------------- engine side */

const k3_read_pool_config *k3_pool_config(const k3_read_pool *p) { return &p->cfg; }

int k3_pool_stopping(k3_read_pool *p) {
    pthread_mutex_lock(&p->lock);
    int s = p->stopping;
    pthread_mutex_unlock(&p->lock);
    return s;
}

int k3_pool_take(k3_read_pool *p, int wait, k3_taken *out) {
    k3_read_job *j = NULL;
    pthread_mutex_lock(&p->lock);
    while (!p->stopping && !(j = next_job(p)) && wait) pthread_cond_wait(&p->wake, &p->lock);
    if (!j) {
        pthread_mutex_unlock(&p->lock);
        return -1;
    }
    if (p->inflight++ == 0) p->busy_since = k3_now_ns();
    out->job = j;
    out->fault = K3_FAULT_NONE;
    out->short_read_at = 0;
    if (p->fault_after >= 0 && p->fault_after-- == 0) {
        out->fault = p->fault_kind;
        if (p->fault_kind == K3_FAULT_SHORT) out->short_read_at = j->length / 2 > 0 ? j->length / 2 : 1;
    }
    pthread_mutex_unlock(&p->lock);
    return 0;
}

/*
 * The job's crc32 check, on the engine thread that finished the read (pread worker or io_uring
 * reaper), before anyone is told the bytes are there. A failed read counts down with no data.
 */
static void check_read(k3_read_pool *p, k3_read_job *j, k3_read_done *d) {
    if (!j->check) return;
    int ok = d && d->result.status == 0 && !d->cancelled;
    const uint8_t *data = ok ? p->cfg.arena + (uint64_t)j->slot * p->cfg.slot_bytes + d->result.data_offset : NULL;
    k3_check_read_done(j->check, j->check_read, data, p->cfg.files[j->file].path, d ? &d->verdict : NULL, d ? &d->result : NULL);
    j->check = NULL;
}

void k3_pool_finish(k3_read_pool *p, k3_read_job *j, k3_read_done *d) {
    check_read(p, j, d);
    pthread_mutex_lock(&p->lock);
    if (--p->inflight == 0) p->busy_ns += k3_now_ns() - p->busy_since;
    if (j->priority == K3_PRIORITY_PREFETCH) p->inflight_prefetch--;
    if (d) {
        p->reads++;
        p->device_bytes += d->result.device_bytes;
        if (d->result.status == 0) p->requested_bytes += j->length;
        if (d->result.direct) p->direct_reads++;
        else p->buffered_reads++;
    }
    pthread_cond_broadcast(&p->wake); /* a prefetch slot may have opened */
    pthread_mutex_unlock(&p->lock);
    if (d) p->cfg.on_done(p->cfg.ctx, d);
    free(j);
}

k3_read_done *k3_pool_injected_eio(k3_read_pool *p, const k3_read_job *j) {
    k3_read_done *d = calloc(1, sizeof(*d));
    if (!d) return NULL;
    d->id = j->id;
    d->slot = j->slot;
    d->start_ns = d->end_ns = k3_now_ns();
    d->result.status = EIO;
    snprintf(d->result.message, sizeof(d->result.message), "%s: read error at offset %llu: injected EIO",
             p->cfg.files[j->file].path, (unsigned long long)j->offset);
    return d;
}

/* ---------------------------------------------------------------- pread engine */

static void *pread_worker(void *arg) {
    k3_read_pool *p = arg;
    k3_taken t;
    while (k3_pool_take(p, 1, &t) == 0) {
        k3_read_job *j = t.job;
        k3_read_done *d = NULL;
        if (t.fault == K3_FAULT_EIO) {
            d = k3_pool_injected_eio(p, j);
        } else if ((d = calloc(1, sizeof(*d)))) {
            d->id = j->id;
            d->slot = j->slot;
            d->start_ns = k3_now_ns();
            uint8_t *slot = p->cfg.arena + (uint64_t)j->slot * p->cfg.slot_bytes;
            k3_file_read(&p->cfg.files[j->file], j->offset, j->length, j->base, slot, p->cfg.slot_bytes,
                         t.short_read_at, t.fault == K3_FAULT_DIRECT_EINVAL, &d->result);
            d->end_ns = k3_now_ns();
        }
        k3_pool_finish(p, j, d);
    }
    return NULL;
}

static int start_pread_threads(k3_read_pool *p) {
    p->threads = calloc((size_t)p->cfg.threads, sizeof(pthread_t));
    if (!p->threads) return -1;
    for (int i = 0; i < p->cfg.threads; i++) {
        if (pthread_create(&p->threads[i], NULL, pread_worker, p) != 0) break;
        pthread_setname_np(p->threads[i], "k3-read"); /* the engine's per-thread CPU report groups by name */
        p->n_threads++;
    }
    return p->n_threads > 0 ? 0 : -1;
}

/* The engine asked for, or the one that works: io_uring unless refused, then pread threads. */
static int start_engine(k3_read_pool *p, char *message, size_t message_len) {
    p->engine_in_use = K3_ENGINE_IN_USE_PREAD;
    if (p->cfg.engine != K3_ENGINE_PREAD) {
        char why[sizeof p->engine_note] = "";
        int sqpoll = 0;
        p->uring = k3_uring_reader_start(p, p->cfg.threads, p->cfg.sqpoll, &sqpoll, why, sizeof why);
        snprintf(p->engine_note, sizeof p->engine_note, "%s", why);
        if (p->uring) {
            p->engine_in_use = sqpoll ? K3_ENGINE_IN_USE_URING_SQPOLL : K3_ENGINE_IN_USE_URING;
            return 0;
        }
        if (p->cfg.engine == K3_ENGINE_URING) {
            snprintf(message, message_len,
                     "io_uring was requested but is unavailable (%s; seccomp or the kernel.io_uring_disabled sysctl "
                     "can block it): use ioEngine \"auto\" or \"pread\"",
                     why);
            return -1;
        }
        snprintf(p->engine_note, sizeof p->engine_note, "io_uring unavailable (%s): pread threads", why);
    }
    if (start_pread_threads(p) != 0) {
        snprintf(message, message_len, "cannot start the reader threads");
        return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------- lifecycle */

k3_read_pool *k3_read_pool_create(const k3_read_pool_config *cfg, char *message, size_t message_len) {
    k3_read_pool *p = calloc(1, sizeof(*p));
    if (!p) {
        snprintf(message, message_len, "out of memory");
        return NULL;
    }
    p->cfg = *cfg;
    p->fault_after = -1;
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->wake, NULL);
    if (start_engine(p, message, message_len) != 0) {
        pthread_mutex_destroy(&p->lock);
        pthread_cond_destroy(&p->wake);
        free(p->threads);
        free(p);
        return NULL;
    }
    return p;
}

int k3_read_pool_submit(k3_read_pool *p, const k3_read_job *job) {
    k3_read_job *j = malloc(sizeof(*j));
    if (!j) {
        if (job->check) k3_check_read_done(job->check, job->check_read, NULL, "", NULL, NULL);
        return ENOMEM;
    }
    *j = *job;
    pthread_mutex_lock(&p->lock);
    if (p->stopping) {
        pthread_mutex_unlock(&p->lock);
        if (j->check) k3_check_read_done(j->check, j->check_read, NULL, "", NULL, NULL);
        free(j);
        return ECANCELED;
    }
    if (j->priority == K3_PRIORITY_PREFETCH) {
        push(&p->prefetch_head, &p->prefetch_tail, j);
        p->queued_prefetch++;
    } else {
        push(&p->demand_head, &p->demand_tail, j);
        p->queued_demand++;
    }
    pthread_cond_signal(&p->wake);
    pthread_mutex_unlock(&p->lock);
    if (p->uring) k3_uring_reader_wake(p->uring, 0);
    return 0;
}

static void report_cancelled(k3_read_pool *p, k3_read_job *j) {
    k3_read_done *d = calloc(1, sizeof(*d));
    if (d) {
        d->id = j->id;
        d->slot = j->slot;
        d->cancelled = 1;
        d->result.status = ECANCELED;
    }
    check_read(p, j, d);
    if (d) p->cfg.on_done(p->cfg.ctx, d);
    free(j);
}

int k3_read_pool_cancel_prefetch(k3_read_pool *p) {
    pthread_mutex_lock(&p->lock);
    k3_read_job *list = p->prefetch_head;
    p->prefetch_head = p->prefetch_tail = NULL;
    p->queued_prefetch = 0;
    pthread_mutex_unlock(&p->lock);
    int n = 0;
    while (list) {
        k3_read_job *next = list->next;
        report_cancelled(p, list);
        list = next;
        n++;
    }
    return n;
}

void k3_read_pool_destroy(k3_read_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->lock);
    p->stopping = 1;
    k3_read_job *demand = p->demand_head, *prefetch = p->prefetch_head;
    p->demand_head = p->demand_tail = p->prefetch_head = p->prefetch_tail = NULL;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
    if (p->uring) k3_uring_reader_stop(p->uring); /* returns once the reads in flight are done */
    for (int i = 0; i < p->n_threads; i++) pthread_join(p->threads[i], NULL);
    while (demand) {
        k3_read_job *n = demand->next;
        report_cancelled(p, demand);
        demand = n;
    }
    while (prefetch) {
        k3_read_job *n = prefetch->next;
        report_cancelled(p, prefetch);
        prefetch = n;
    }
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->wake);
    free(p->threads);
    free(p);
}

void k3_read_pool_inject_fault(k3_read_pool *p, int64_t after_reads, int kind) {
    pthread_mutex_lock(&p->lock);
    p->fault_after = after_reads;
    p->fault_kind = kind;
    pthread_mutex_unlock(&p->lock);
}

void k3_read_pool_stats_get(k3_read_pool *p, k3_read_pool_stats *out) {
    pthread_mutex_lock(&p->lock);
    out->reads = p->reads;
    out->device_bytes = p->device_bytes;
    out->requested_bytes = p->requested_bytes;
    out->direct_reads = p->direct_reads;
    out->buffered_reads = p->buffered_reads;
    out->busy_ns = p->busy_ns + (p->inflight > 0 ? k3_now_ns() - p->busy_since : 0);
    out->inflight = p->inflight;
    out->queued_demand = p->queued_demand;
    out->queued_prefetch = p->queued_prefetch;
    out->engine = p->engine_in_use;
    snprintf(out->engine_note, sizeof out->engine_note, "%s", p->engine_note);
    pthread_mutex_unlock(&p->lock);
}
