/* read_pool.c: a fixed set of pread threads serving two FIFO queues (demand before prefetch). */
#define _GNU_SOURCE
#include "read_pool.h"

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
    /* stats (under lock) */
    uint64_t reads, device_bytes, requested_bytes, direct_reads, buffered_reads;
    int64_t busy_ns, busy_since;
    /* fault injection (under lock) */
    int64_t fault_after;
    int fault_short;
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

static void *worker(void *arg) {
    k3_read_pool *p = arg;
    pthread_mutex_lock(&p->lock);
    for (;;) {
        k3_read_job *j = NULL;
        while (!p->stopping && !(j = next_job(p))) pthread_cond_wait(&p->wake, &p->lock);
        if (!j) break;
        if (p->inflight++ == 0) p->busy_since = k3_now_ns();
        int64_t short_at = 0;
        int inject_eio = 0;
        if (p->fault_after >= 0 && p->fault_after-- == 0) {
            if (p->fault_short) short_at = (int64_t)(j->length / 2 > 0 ? j->length / 2 : 1);
            else inject_eio = 1;
        }
        pthread_mutex_unlock(&p->lock);

        k3_read_done *d = NULL;
        if (inject_eio) {
            d = calloc(1, sizeof(*d));
            if (d) {
                d->id = j->id;
                d->slot = j->slot;
                d->start_ns = d->end_ns = k3_now_ns();
                d->result.status = EIO;
                snprintf(d->result.message, sizeof(d->result.message), "%s: read error at offset %llu: injected EIO",
                         p->cfg.files[j->file].path, (unsigned long long)j->offset);
            }
        } else {
            d = calloc(1, sizeof(*d));
            if (d) {
                d->id = j->id;
                d->slot = j->slot;
                d->start_ns = k3_now_ns();
                uint8_t *slot = p->cfg.arena + (uint64_t)j->slot * p->cfg.slot_bytes;
                k3_file_read(&p->cfg.files[j->file], j->offset, j->length, j->base, slot, p->cfg.slot_bytes,
                             (uint64_t)short_at, &d->result);
                d->end_ns = k3_now_ns();
            }
        }

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
        pthread_mutex_unlock(&p->lock);
        if (d) p->cfg.on_done(p->cfg.ctx, d);
        free(j);
        pthread_mutex_lock(&p->lock);
        pthread_cond_broadcast(&p->wake); /* a prefetch slot may have opened */
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

/* ---------------------------------------------------------------- lifecycle */

k3_read_pool *k3_read_pool_create(const k3_read_pool_config *cfg) {
    k3_read_pool *p = calloc(1, sizeof(*p));
    if (!p) return NULL;
    p->cfg = *cfg;
    p->fault_after = -1;
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->wake, NULL);
    p->threads = calloc((size_t)cfg->threads, sizeof(pthread_t));
    if (!p->threads) {
        free(p);
        return NULL;
    }
    for (int i = 0; i < cfg->threads; i++) {
        if (pthread_create(&p->threads[i], NULL, worker, p) != 0) break;
        p->n_threads++;
    }
    if (p->n_threads == 0) {
        free(p->threads);
        free(p);
        return NULL;
    }
    return p;
}

int k3_read_pool_submit(k3_read_pool *p, const k3_read_job *job) {
    k3_read_job *j = malloc(sizeof(*j));
    if (!j) return ENOMEM;
    *j = *job;
    pthread_mutex_lock(&p->lock);
    if (p->stopping) {
        pthread_mutex_unlock(&p->lock);
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
    return 0;
}

static void report_cancelled(k3_read_pool *p, k3_read_job *j) {
    k3_read_done *d = calloc(1, sizeof(*d));
    if (d) {
        d->id = j->id;
        d->slot = j->slot;
        d->cancelled = 1;
        d->result.status = ECANCELED;
        p->cfg.on_done(p->cfg.ctx, d);
    }
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

void k3_read_pool_inject_fault(k3_read_pool *p, int64_t after_reads, int short_read) {
    pthread_mutex_lock(&p->lock);
    p->fault_after = after_reads;
    p->fault_short = short_read;
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
    pthread_mutex_unlock(&p->lock);
}
