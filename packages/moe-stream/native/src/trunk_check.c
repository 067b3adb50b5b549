/* trunk_check.c: each read hashes the parts of tensors it holds; the last read of a load combines
   them (crc32_combine) and compares every tensor with the manifest. */
#define _GNU_SOURCE /* qsort_r */
#include "trunk_check.h"
#include "crc32.h"

#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct part {
    uint32_t tensor, read;
    uint64_t offset, length; /* file range: the tensor's bytes inside this read */
    uint32_t crc;
} part;

struct k3_check_load {
    char *label;
    uint32_t n_tensors;
    char **names;
    uint64_t *offsets, *lengths;
    uint32_t *expects;
    uint32_t n_reads;
    uint64_t *read_offsets;
    uint32_t n_parts;
    part *parts; /* by tensor, then file offset */
    atomic_int pending;
    atomic_int failed;
};

static void load_free(k3_check_load *l) {
    if (!l) return;
    if (l->names)
        for (uint32_t i = 0; i < l->n_tensors; i++) free(l->names[i]);
    free(l->names);
    free(l->label);
    free(l->offsets);
    free(l->lengths);
    free(l->expects);
    free(l->read_offsets);
    free(l->parts);
    free(l);
}

/* The reads in file order (they tile the load's range; a tensor's parts follow that order). */
static int by_offset(const void *a, const void *b, void *ctx) {
    const uint64_t *off = ctx;
    uint64_t x = off[*(const uint32_t *)a], y = off[*(const uint32_t *)b];
    return x < y ? -1 : x > y;
}

static int make_parts(k3_check_load *l, const uint64_t *read_lengths, char *message, size_t message_len) {
    uint32_t *order = malloc(sizeof(uint32_t) * (l->n_reads ? l->n_reads : 1));
    /* At most one part per (tensor, read) overlap: tensors and reads are both disjoint ranges. */
    l->parts = malloc(sizeof(part) * ((size_t)l->n_tensors + l->n_reads + 1));
    if (!order || !l->parts) {
        free(order);
        snprintf(message, message_len, "out of memory");
        return -1;
    }
    for (uint32_t r = 0; r < l->n_reads; r++) order[r] = r;
    qsort_r(order, l->n_reads, sizeof(uint32_t), by_offset, l->read_offsets);
    for (uint32_t t = 0; t < l->n_tensors; t++) {
        uint64_t at = l->offsets[t], end = at + l->lengths[t];
        for (uint32_t i = 0; i < l->n_reads && at < end; i++) {
            uint32_t r = order[i];
            uint64_t rs = l->read_offsets[r], re = rs + read_lengths[r];
            if (re <= at || rs > at) continue;
            uint64_t stop = re < end ? re : end;
            if (l->n_parts >= l->n_tensors + l->n_reads) break;
            l->parts[l->n_parts++] = (part){t, r, at, stop - at, 0};
            at = stop;
        }
        if (at < end) {
            free(order);
            snprintf(message, message_len, "%s: tensor %s bytes [%" PRIu64 ", %" PRIu64 ") are in none of the reads",
                     l->label, l->names[t], at, end);
            return -1;
        }
    }
    free(order);
    return 0;
}

static char *dup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

k3_check_load *k3_check_load_new(const char *label, uint32_t n_tensors, const char *const *names, const uint64_t *offsets,
                                 const uint64_t *lengths, const uint32_t *expects, uint32_t n_reads,
                                 const uint64_t *read_offsets, const uint64_t *read_lengths, char *message, size_t message_len) {
    k3_check_load *l = calloc(1, sizeof(*l));
    size_t nt = n_tensors ? n_tensors : 1, nr = n_reads ? n_reads : 1;
    if (!l || !(l->label = dup(label)) || !(l->names = calloc(nt, sizeof(char *))) ||
        !(l->offsets = malloc(nt * sizeof(uint64_t))) || !(l->lengths = malloc(nt * sizeof(uint64_t))) ||
        !(l->expects = malloc(nt * sizeof(uint32_t))) || !(l->read_offsets = malloc(nr * sizeof(uint64_t)))) {
        load_free(l);
        snprintf(message, message_len, "out of memory");
        return NULL;
    }
    l->n_tensors = n_tensors;
    l->n_reads = n_reads;
    for (uint32_t t = 0; t < n_tensors; t++) {
        if (!(l->names[t] = dup(names[t]))) {
            load_free(l);
            snprintf(message, message_len, "out of memory");
            return NULL;
        }
        l->offsets[t] = offsets[t];
        l->lengths[t] = lengths[t];
        l->expects[t] = expects[t];
    }
    memcpy(l->read_offsets, read_offsets, n_reads * sizeof(uint64_t));
    if (make_parts(l, read_lengths, message, message_len) != 0) {
        load_free(l);
        return NULL;
    }
    atomic_init(&l->pending, (int)n_reads);
    atomic_init(&l->failed, 0);
    return l;
}

/* Every tensor's crc32 from its parts, against the manifest; names the mismatch first in the file. */
static int compare(k3_check_load *l, k3_check_verdict *v) {
    *v = (k3_check_verdict){0};
    uint32_t i = 0;
    for (uint32_t t = 0; t < l->n_tensors; t++) {
        uint32_t crc = 0;
        for (; i < l->n_parts && l->parts[i].tensor == t; i++) crc = k3_crc32_combine(crc, l->parts[i].crc, l->parts[i].length);
        if (crc == l->expects[t]) continue;
        if (v->failed) v->others++;
        if (!v->failed || l->offsets[t] < l->offsets[v->tensor]) {
            v->failed = 1;
            v->tensor = t;
            v->expect = l->expects[t];
            v->got = crc;
        }
    }
    return v->failed;
}

int k3_check_read_done(k3_check_load *l, uint32_t read, const uint8_t *data, const char *path,
                       k3_check_verdict *verdict, k3_read_result *result) {
    if (data) {
        for (uint32_t i = 0; i < l->n_parts; i++) {
            part *p = &l->parts[i];
            if (p->read == read) p->crc = k3_crc32(0, data + (p->offset - l->read_offsets[read]), (size_t)p->length);
        }
    } else {
        atomic_store(&l->failed, 1);
    }
    /* acq_rel: the last reader sees every other reader's part crcs. */
    if (atomic_fetch_sub_explicit(&l->pending, 1, memory_order_acq_rel) != 1) return 0;
    int bad = 0;
    k3_check_verdict v = {0};
    if (!atomic_load(&l->failed) && compare(l, &v)) {
        bad = 1;
        if (verdict) *verdict = v;
        if (result) {
            result->status = EBADMSG;
            snprintf(result->message, sizeof result->message,
                     "%s: %s tensor %s at offset %" PRIu64 " (+%" PRIu64 " bytes) reads with crc32 0x%08x, the manifest says 0x%08x%s: "
                     "the trunk file is corrupt or not this manifest's (re-pack it: k3 pack)",
                     path, l->label, l->names[v.tensor], l->offsets[v.tensor], l->lengths[v.tensor], v.got, v.expect,
                     v.others ? " (and other tensors)" : "");
        }
    }
    load_free(l);
    return bad;
}
