/*
 * st_checkpoint.c: every shard header of a checkpoint, read with pread and parsed in parallel
 * (one task per shard on the shared @k3/dense pool), then the weight-map rules or, without an
 * index, the rule that a tensor lives in one file only. Errors are reported for the first shard
 * in order that has one, so the result does not depend on thread timing.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "k3_safetensors.h"

typedef struct {
    const char *const *paths;
    st_table *tables;
    st_error *errors;
    st_arena *arena;
} open_job;

static int pread_all(int fd, uint8_t *dst, size_t len, uint64_t pos) {
    size_t done = 0;
    while (done < len) {
        size_t want = len - done > (1u << 30) ? (1u << 30) : len - done;
        ssize_t got = pread(fd, dst + done, want, (off_t)(pos + done));
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) return -1;
        done += (size_t)got;
    }
    return 0;
}

static void parse_one(void *ctx, int i) {
    open_job *job = ctx;
    st_error *e = &job->errors[i];
    const char *path = job->paths[i];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        st_fail(e, ST_IO_ERROR, -1, "opening: %s", strerror(errno));
        return;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        st_fail(e, ST_IO_ERROR, -1, "stat: %s", strerror(errno));
        close(fd);
        return;
    }
    uint64_t size = (uint64_t)st.st_size;
    uint8_t prefix[8];
    size_t have = size >= 8 ? 8 : 0;
    if (have && pread_all(fd, prefix, 8, 0) != 0) {
        st_fail(e, ST_IO_ERROR, -1, "reading the header length: %s", strerror(errno));
        close(fd);
        return;
    }
    int64_t n = st_header_length(prefix, have, size, e);
    if (n < 0) {
        close(fd);
        return;
    }
    uint8_t *header = malloc(n ? (size_t)n : 1);
    if (!header) {
        st_fail(e, ST_OUT_OF_MEMORY, -1, "out of memory for a %lld-byte header", (long long)n);
        close(fd);
        return;
    }
    if (pread_all(fd, header, (size_t)n, 8) != 0) {
        st_fail(e, ST_IO_ERROR, -1, "reading the %lld-byte header: %s", (long long)n, strerror(errno));
        free(header);
        close(fd);
        return;
    }
    close(fd);
    st_parse_header(header, (size_t)n, size, job->arena, &job->tables[i], e);
    free(header);
}

/* JSON.stringify of a UTF-8 string (for messages that quote a shard name). */
static void json_quote(const uint8_t *s, size_t len, char *out, size_t cap) {
    size_t o = 0;
    if (cap < 8) return;
    out[o++] = '"';
    for (size_t i = 0; i < len && o + 8 < cap; i++) {
        uint8_t c = s[i];
        const char *esc = NULL;
        switch (c) {
        case '"': esc = "\\\""; break;
        case '\\': esc = "\\\\"; break;
        case '\b': esc = "\\b"; break;
        case '\f': esc = "\\f"; break;
        case '\n': esc = "\\n"; break;
        case '\r': esc = "\\r"; break;
        case '\t': esc = "\\t"; break;
        default: break;
        }
        if (esc) {
            memcpy(out + o, esc, 2);
            o += 2;
        } else if (c < 0x20)
            o += (size_t)snprintf(out + o, cap - o, "\\u%04x", c);
        else
            out[o++] = (char)c;
    }
    out[o++] = '"';
    out[o] = 0;
}

typedef struct {
    const st_checkpoint *c;
} global_ctx;

static void global_name_of(const void *ctx, uint32_t g, const uint8_t **name, size_t *len) {
    const st_checkpoint *c = ctx;
    uint32_t lo = 0, hi = c->n_shards - 1;
    while (lo < hi) {
        uint32_t mid = (lo + hi + 1) / 2;
        if (c->bases[mid] <= g) lo = mid;
        else hi = mid - 1;
    }
    const st_table *t = &c->tables[lo];
    uint32_t i = g - (uint32_t)c->bases[lo];
    *name = t->name_bytes + t->name_start[i];
    *len = t->name_start[i + 1] - t->name_start[i];
}

/* Cross-check work split over the pool: entries [k0, k1) of the weight map per task. Entries
   have distinct names, so no two tasks mark the same (shard, tensor): the marks need no lock. */
typedef struct {
    st_checkpoint *c;
    const st_index *x;
    uint8_t **marks;
    uint32_t per_task;
    uint32_t *first_missing; /* per task: first entry not found in its shard, or UINT32_MAX */
} check_job;

static void check_range(void *ctx, int task) {
    check_job *j = ctx;
    uint32_t k0 = (uint32_t)task * j->per_task;
    uint32_t k1 = k0 + j->per_task < j->x->count ? k0 + j->per_task : j->x->count;
    j->first_missing[task] = UINT32_MAX;
    /* Shard headers and weight_map usually list a shard's tensors in the same order: try the
       tensor after the previous hit before probing the hash (a sequential compare instead of a
       random cache miss). Names are unique within a shard, so either way finds the same index. */
    uint32_t last_s = UINT32_MAX, last_i = 0;
    for (uint32_t k = k0; k < k1; k++) {
        uint32_t s = j->x->shard_of[k];
        const uint8_t *name;
        size_t len;
        st_index_name(j->x, k, &name, &len);
        uint32_t i = UINT32_MAX;
        if (s == last_s && last_i + 1 < j->c->tables[s].count) {
            const st_table *t = &j->c->tables[s];
            uint32_t a = t->name_start[last_i + 1], z = t->name_start[last_i + 2];
            if (z - a == len && memcmp(t->name_bytes + a, name, len) == 0) i = last_i + 1;
        }
        if (i == UINT32_MAX && s < j->c->n_shards)
            i = st_hash_find(j->c->tables[s].names, name, len, st_hash_bytes(name, len));
        if (i == UINT32_MAX) {
            j->first_missing[task] = k;
            return;
        }
        j->marks[s][i] = 1;
        last_s = s;
        last_i = i;
    }
}

static int cross_check_index(st_checkpoint *c, const st_index *x, st_parallel_fn parallel, st_error *e) {
    enum { TASKS = 16 };
    uint8_t **marks = calloc(c->n_shards ? c->n_shards : 1, sizeof(uint8_t *));
    if (!marks) return st_fail(e, ST_OUT_OF_MEMORY, -1, "out of memory"), -1;
    int rc = 0;
    for (uint32_t s = 0; s < c->n_shards && rc == 0; s++) {
        marks[s] = calloc(c->tables[s].count + 1, 1);
        if (!marks[s]) rc = (st_fail(e, ST_OUT_OF_MEMORY, -1, "out of memory"), -1);
    }
    uint32_t first_missing[TASKS];
    check_job job = {c, x, marks, (x->count + TASKS - 1) / TASKS, first_missing};
    if (job.per_task == 0) job.per_task = 1;
    if (rc == 0) {
        if (parallel && x->count > 4096)
            parallel(TASKS, check_range, &job);
        else
            for (int t = 0; t < TASKS; t++) check_range(&job, t);
    }
    /* The first missing entry in file order is in the lowest task that found one. */
    for (int t = 0; t < TASKS && rc == 0; t++) {
        uint32_t k = first_missing[t];
        if (k == UINT32_MAX) continue;
        uint32_t s = x->shard_of[k];
        const uint8_t *name;
        size_t len;
        st_index_name(x, k, &name, &len);
        char quoted[512];
        json_quote(x->shard_bytes + x->shard_start[s], x->shard_start[s + 1] - x->shard_start[s], quoted, sizeof quoted);
        st_fail(e, ST_TENSOR_NOT_IN_SHARD, -1, "weight_map puts this tensor in %s but that shard does not hold it", quoted);
        st_error_set_tensor(e, name, len);
        e->shard = -1;
        rc = -1;
    }
    for (uint32_t s = 0; s < c->n_shards && rc == 0; s++) {
        const st_table *t = &c->tables[s];
        for (uint32_t i = 0; i < t->count; i++) {
            if (marks[s][i]) continue;
            st_fail(e, ST_TENSOR_NOT_IN_INDEX, -1, "the shard holds a tensor that weight_map does not list");
            st_error_set_tensor(e, t->name_bytes + t->name_start[i], t->name_start[i + 1] - t->name_start[i]);
            e->shard = (int)s;
            rc = -1;
            break;
        }
    }
    for (uint32_t s = 0; s < c->n_shards; s++) free(marks[s]);
    free(marks);
    return rc;
}

static int check_no_duplicates(st_checkpoint *c, const char *const *paths, st_error *e) {
    st_hash *all = st_hash_new((uint32_t)c->bases[c->n_shards], global_name_of, c);
    if (!all) return st_fail(e, ST_OUT_OF_MEMORY, -1, "out of memory"), -1;
    /* Inserts are bound by cache misses: each name's hash is computed AHEAD names early (kept in
       a ring) and its slot prefetched. Hashes are not stored per table: only this path needs them. */
    enum { AHEAD = 16 };
    uint64_t ring[AHEAD];
    for (uint32_t s = 0; s < c->n_shards; s++) {
        const st_table *t = &c->tables[s];
        for (uint32_t i = 0; i < t->count && i < AHEAD; i++)
            ring[i] = st_hash_bytes(t->name_bytes + t->name_start[i], t->name_start[i + 1] - t->name_start[i]);
        for (uint32_t i = 0; i < t->count; i++) {
            uint64_t hash = ring[i % AHEAD];
            uint32_t ahead = i + AHEAD;
            if (ahead < t->count) {
                ring[i % AHEAD] = st_hash_bytes(t->name_bytes + t->name_start[ahead], t->name_start[ahead + 1] - t->name_start[ahead]);
                st_hash_prefetch(all, ring[i % AHEAD]);
            }
            const uint8_t *name = t->name_bytes + t->name_start[i];
            size_t len = t->name_start[i + 1] - t->name_start[i];
            uint32_t prev = st_hash_insert(all, name, len, hash, (uint32_t)(c->bases[s] + i));
            if (prev == UINT32_MAX) continue;
            st_hash_free(all);
            if (prev == UINT32_MAX - 1) return st_fail(e, ST_OUT_OF_MEMORY, -1, "out of memory"), -1;
            uint32_t ps = 0;
            while (ps + 1 < c->n_shards && c->bases[ps + 1] <= prev) ps++;
            st_fail(e, ST_DUPLICATE_TENSOR, -1, "the tensor is also in %s", paths[ps]);
            st_error_set_tensor(e, name, len);
            e->shard = (int)s;
            return -1;
        }
    }
    st_hash_free(all);
    return 0;
}

int st_open_shards(const char *const *paths, uint32_t n, const st_index *index, st_parallel_fn parallel, st_checkpoint *c,
                   st_error *e) {
    memset(c, 0, sizeof *c);
    c->tables = calloc(n ? n : 1, sizeof(st_table));
    c->bases = calloc(n + 1, sizeof(uint64_t));
    c->arena = st_arena_new();
    st_error *errors = calloc(n ? n : 1, sizeof(st_error));
    if (!c->tables || !c->bases || !c->arena || !errors) {
        free(errors);
        return st_fail(e, ST_OUT_OF_MEMORY, -1, "out of memory"), -1;
    }
    c->n_shards = n;
    for (uint32_t i = 0; i < n; i++) {
        errors[i].position = -1;
        errors[i].shard = -1;
    }
    open_job job = {paths, c->tables, errors, c->arena};
    if (parallel && n > 1)
        parallel((int)n, parse_one, &job);
    else
        for (uint32_t i = 0; i < n; i++) parse_one(&job, (int)i);
    int rc = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (errors[i].code != ST_OK && rc == 0) {
            free(e->tensor);
            *e = errors[i];
            e->shard = (int)i;
            errors[i].tensor = NULL;
            rc = -1;
        }
        free(errors[i].tensor);
    }
    free(errors);
    if (rc != 0) return -1;
    for (uint32_t s = 0; s < n; s++) {
        c->bases[s + 1] = c->bases[s] + c->tables[s].count;
        st_hash_set_ctx(c->tables[s].names, &c->tables[s]);
    }
    if (c->bases[n] >= UINT32_MAX - 2) return st_fail(e, ST_INVALID_INDEX, -1, "more than 4 billion tensors"), -1;
    return index ? cross_check_index(c, index, parallel, e) : check_no_duplicates(c, paths, e);
}

void st_checkpoint_free(st_checkpoint *c) {
    if (c->tables)
        for (uint32_t s = 0; s < c->n_shards; s++) st_table_free(&c->tables[s]);
    free(c->tables);
    free(c->bases);
    st_arena_free(c->arena);
    memset(c, 0, sizeof *c);
}

int64_t st_checkpoint_find(const st_checkpoint *c, const uint8_t *name, size_t len) {
    uint64_t h = st_hash_bytes(name, len);
    for (uint32_t s = 0; s < c->n_shards; s++) {
        if (!c->tables[s].names) continue;
        uint32_t i = st_hash_find(c->tables[s].names, name, len, h);
        if (i != UINT32_MAX) return (int64_t)(c->bases[s] + i);
    }
    return -1;
}

/* ---------------------------------------------------------------- speculative open */

typedef struct {
    st_speculative *sp;
    open_job shards;
    const char *index_path;
} spec_job;

static void spec_task(void *ctx, int i) {
    spec_job *j = ctx;
    if (i == 0)
        st_parse_index_file(j->index_path, &j->sp->index, &j->sp->index_error);
    else
        parse_one(&j->shards, i - 1);
}

int st_speculative_parse(const char *index_path, const char *const *paths, uint32_t n, st_parallel_fn parallel,
                         st_speculative *sp) {
    memset(sp, 0, sizeof *sp);
    sp->index_error.position = -1;
    sp->index_error.shard = -1;
    sp->n = n;
    sp->paths = paths;
    sp->tables = calloc(n ? n : 1, sizeof(st_table));
    sp->errors = calloc(n ? n : 1, sizeof(st_error));
    sp->arena = st_arena_new();
    if (!sp->tables || !sp->errors || !sp->arena) return st_fail(&sp->index_error, ST_OUT_OF_MEMORY, -1, "out of memory"), -1;
    for (uint32_t i = 0; i < n; i++) {
        sp->errors[i].position = -1;
        sp->errors[i].shard = -1;
    }
    spec_job job = {sp, {paths, sp->tables, sp->errors, sp->arena}, index_path};
    if (parallel)
        parallel((int)n + 1, spec_task, &job);
    else
        for (uint32_t i = 0; i <= n; i++) spec_task(&job, (int)i);
    return 0;
}

int st_speculative_finish(st_speculative *sp, const uint32_t *order, st_parallel_fn parallel, st_checkpoint *c,
                          st_error *e) {
    uint32_t n = sp->index.n_shards;
    memset(c, 0, sizeof *c);
    for (uint32_t k = 0; k < n; k++) {
        uint32_t j = order[k];
        if (j >= sp->n) return st_fail(e, ST_INVALID_INDEX, -1, "internal: bad candidate order"), -1;
        if (sp->errors[j].code != ST_OK) {
            free(e->tensor);
            *e = sp->errors[j];
            sp->errors[j].tensor = NULL;
            e->shard = (int)k;
            return -1;
        }
    }
    c->tables = calloc(n ? n : 1, sizeof(st_table));
    c->bases = calloc(n + 1, sizeof(uint64_t));
    if (!c->tables || !c->bases) return st_fail(e, ST_OUT_OF_MEMORY, -1, "out of memory"), -1;
    c->arena = sp->arena; /* the checkpoint owns the columns now (unused candidates' stay until it is freed) */
    sp->arena = NULL;
    c->n_shards = n;
    for (uint32_t k = 0; k < n; k++) {
        c->tables[k] = sp->tables[order[k]];
        memset(&sp->tables[order[k]], 0, sizeof(st_table));
        st_hash_set_ctx(c->tables[k].names, &c->tables[k]);
        c->bases[k + 1] = c->bases[k] + c->tables[k].count;
    }
    if (c->bases[n] >= UINT32_MAX - 2) return st_fail(e, ST_INVALID_INDEX, -1, "more than 4 billion tensors"), -1;
    return cross_check_index(c, &sp->index, parallel, e);
}

void st_speculative_free(st_speculative *sp) {
    if (sp->tables)
        for (uint32_t i = 0; i < sp->n; i++) st_table_free(&sp->tables[i]);
    if (sp->errors)
        for (uint32_t i = 0; i < sp->n; i++) free(sp->errors[i].tensor);
    free(sp->tables);
    free(sp->errors);
    free(sp->index_error.tensor);
    st_index_free(&sp->index);
    st_arena_free(sp->arena);
    memset(sp, 0, sizeof *sp);
}
