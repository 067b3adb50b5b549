/*
 * decode.c: tiktoken's `decode_bytes`: the concatenated bytes of each id, specials included. One
 * table entry per id (offset and length into one pool) makes each token a table read and a copy.
 * Tokens of at most K3_DECODE_PAD bytes (nearly all; Kimi's average is ~4) are moved with one
 * fixed-size 16-byte copy and the write position then advances by the true length: the pool and
 * the output both carry K3_DECODE_PAD bytes of slack, so that over-copy stays in bounds. The
 * bytes written are the same as with a plain memcpy of each token (the slack past the end is not
 * part of the result).
 */
#include "decode.h"
#include <stdlib.h>
#include <string.h>

void k3_decode_table_free(k3_decode_table *t) {
    free(t->entries);
    free(t->pool);
    t->entries = NULL;
    t->pool = NULL;
    t->n_ids = 0;
}

int k3_decode_table_init(k3_decode_table *t, const uint8_t *pool, const uint32_t *offsets, const uint32_t *ranks,
                         size_t n, const uint8_t *special_pool, const uint32_t *special_offsets,
                         const uint32_t *special_ids, size_t n_special) {
    memset(t, 0, sizeof *t);
    size_t n_ids = 0, rank_bytes = offsets[n], special_bytes = special_offsets[n_special];
    for (size_t i = 0; i < n; i++)
        if ((size_t)ranks[i] + 1 > n_ids) n_ids = (size_t)ranks[i] + 1;
    for (size_t j = 0; j < n_special; j++)
        if ((size_t)special_ids[j] + 1 > n_ids) n_ids = (size_t)special_ids[j] + 1;
    t->entries = malloc(n_ids * sizeof *t->entries);
    t->pool = malloc(rank_bytes + special_bytes + K3_DECODE_PAD);
    if (!t->entries || !t->pool) {
        k3_decode_table_free(t);
        return -1;
    }
    t->n_ids = n_ids;
    for (size_t id = 0; id < n_ids; id++) t->entries[id] = (k3_decode_entry){0, K3_DECODE_NONE};
    memcpy(t->pool, pool, rank_bytes);
    memcpy(t->pool + rank_bytes, special_pool, special_bytes);
    memset(t->pool + rank_bytes + special_bytes, 0, K3_DECODE_PAD);
    for (size_t i = 0; i < n; i++) t->entries[ranks[i]] = (k3_decode_entry){offsets[i], offsets[i + 1] - offsets[i]};
    for (size_t j = 0; j < n_special; j++)
        t->entries[special_ids[j]] = (k3_decode_entry){(uint32_t)(rank_bytes + special_offsets[j]),
                                                       special_offsets[j + 1] - special_offsets[j]};
    return 0;
}

int64_t k3_decode(const k3_decode_table *t, const uint32_t *ids, size_t n, uint8_t *out, size_t cap) {
    const k3_decode_entry *e = t->entries;
    const uint8_t *pool = t->pool;
    size_t limit = cap >= K3_DECODE_PAD ? cap - K3_DECODE_PAD : 0; /* bytes of result out may hold */
    size_t w = 0, i = 0;
    for (; i < n; i++) {
        uint32_t id = ids[i];
        if (id >= t->n_ids || e[id].len == K3_DECODE_NONE) return -(int64_t)i - 1;
        size_t len = e[id].len;
        if (len > limit - w) break; /* w <= limit always holds */
        const uint8_t *src = pool + e[id].off;
        if (len <= K3_DECODE_PAD)
            memcpy(out + w, src, K3_DECODE_PAD);
        else
            memcpy(out + w, src, len);
        w += len;
    }
    if (i == n) return (int64_t)w;
    /* Too small: finish the count (and the unknown-id check) without writing. */
    for (; i < n; i++) {
        uint32_t id = ids[i];
        if (id >= t->n_ids || e[id].len == K3_DECODE_NONE) return -(int64_t)i - 1;
        w += e[id].len;
    }
    return (int64_t)w;
}
