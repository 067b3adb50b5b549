/*
 * encoder.c: tiktoken's `_encode_native`: find the next allowed special token, split the text
 * before it into pieces with the family's pre-tokenizer (each segment on its own, so `(?!\S)`
 * sees the segment end), BPE each piece, then emit the special's id.
 */
#include "encoder.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void k3_encoder_free(k3_encoder *e) {
    if (!e) return;
    k3_rank_table_free(&e->table);
    k3_bpe_scratch_free(&e->scratch);
    k3_piece_cache_free(&e->cache);
    k3_decode_table_free(&e->decode);
    free(e->special_pool);
    free(e->special_offsets);
    free(e->special_ids);
    free(e->by_first);
    free(e);
}

static const k3_encoder *sort_ctx;
static int by_length_desc(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    const uint32_t *o = sort_ctx->special_offsets;
    uint32_t lx = o[x + 1] - o[x], ly = o[y + 1] - o[y];
    uint8_t fx = sort_ctx->special_pool[o[x]], fy = sort_ctx->special_pool[o[y]];
    if (fx != fy) return fx < fy ? -1 : 1;
    if (lx != ly) return lx > ly ? -1 : 1;
    return x < y ? -1 : x > y;
}

k3_encoder *k3_encoder_new(const uint8_t *pool, size_t pool_len, const uint32_t *offsets, const uint32_t *ranks,
                           size_t n, k3_family family, const uint8_t *special_pool, size_t special_pool_len,
                           const uint32_t *special_offsets, const uint32_t *special_ids, size_t n_special, char *err,
                           size_t err_n) {
    k3_encoder *e = calloc(1, sizeof *e);
    if (!e) {
        snprintf(err, err_n, "out of memory");
        return NULL;
    }
    if (k3_rank_table_init(&e->table, pool, pool_len, offsets, ranks, n, err, err_n)) {
        free(e);
        return NULL;
    }
    e->family = family;
    e->n_special = n_special;
    k3_piece_cache_init(&e->cache);
    e->special_pool = malloc(special_pool_len ? special_pool_len : 1);
    e->special_offsets = malloc((n_special + 1) * sizeof *e->special_offsets);
    e->special_ids = malloc((n_special ? n_special : 1) * sizeof *e->special_ids);
    e->by_first = malloc((n_special ? n_special : 1) * sizeof *e->by_first);
    if (!e->special_pool || !e->special_offsets || !e->special_ids || !e->by_first) {
        snprintf(err, err_n, "out of memory");
        k3_encoder_free(e);
        return NULL;
    }
    memcpy(e->special_pool, special_pool, special_pool_len);
    memcpy(e->special_offsets, special_offsets, (n_special + 1) * sizeof *special_offsets);
    memcpy(e->special_ids, special_ids, n_special * sizeof *special_ids);
    for (size_t i = 0; i < n_special; i++) {
        if (special_offsets[i + 1] <= special_offsets[i] || special_offsets[i + 1] > special_pool_len) {
            snprintf(err, err_n, "special token %zu has an empty or out-of-range byte span", i);
            k3_encoder_free(e);
            return NULL;
        }
        e->by_first[i] = (uint32_t)i;
    }
    sort_ctx = e;
    qsort(e->by_first, n_special, sizeof *e->by_first, by_length_desc);
    size_t k = 0;
    for (int b = 0; b <= 256; b++) {
        e->first_start[b] = (uint32_t)k;
        while (b < 256 && k < n_special && e->special_pool[e->special_offsets[e->by_first[k]]] == b) k++;
    }
    return e;
}

long k3_encoder_find_special(const k3_encoder *e, const uint8_t *s, size_t from, size_t end, const uint8_t *mask,
                             size_t *pos) {
    if (!e->n_special) return -1;
    for (size_t p = from; p < end; p++) {
        uint8_t b = s[p];
        for (uint32_t k = e->first_start[b]; k < e->first_start[b + 1]; k++) {
            uint32_t i = e->by_first[k];
            if (!mask[i]) continue;
            uint32_t o = e->special_offsets[i], len = e->special_offsets[i + 1] - o;
            if (p + len <= end && memcmp(s + p, e->special_pool + o, len) == 0) {
                *pos = p;
                return (long)i;
            }
        }
    }
    return -1;
}

size_t k3_encoder_encode(k3_encoder *e, const uint8_t *s, size_t len, const uint8_t *allowed, uint32_t *out) {
    size_t start = 0, count = 0;
    for (;;) {
        size_t at = len;
        long sp = allowed ? k3_encoder_find_special(e, s, start, len, allowed, &at) : -1;
        size_t seg_end = sp >= 0 ? at : len;
        for (size_t p = start; p < seg_end;) {
            size_t q = k3_piece_end(s, p, seg_end, e->family);
            int hit = k3_piece_cache_get(&e->cache, s + p, q - p, out ? out + count : NULL);
            if (hit >= 0) {
                count += (size_t)hit;
                p = q;
                continue;
            }
            uint32_t small[K3_PIECE_CACHE_MAX_TOKENS + 1];
            int cacheable = q - p <= K3_PIECE_CACHE_MAX_BYTES;
            /* Cacheable pieces (<= 26 bytes) merge into `small` when counting only. */
            uint32_t *dst = out ? out + count : (cacheable && q - p <= K3_PIECE_CACHE_MAX_TOKENS ? small : NULL);
            size_t got = k3_bpe_encode(&e->table, s + p, q - p, dst, &e->scratch, 0);
            if (got == (size_t)-1) return (size_t)-1;
            if (cacheable && dst) k3_piece_cache_put(&e->cache, s + p, q - p, dst, got);
            count += got;
            p = q;
        }
        if (sp < 0) break;
        if (out) out[count] = e->special_ids[sp];
        count++;
        start = at + (e->special_offsets[sp + 1] - e->special_offsets[sp]);
    }
    return count;
}

const k3_decode_table *k3_encoder_decode_table(k3_encoder *e) {
    if (e->decode.entries) return &e->decode;
    const k3_rank_table *t = &e->table;
    if (k3_decode_table_init(&e->decode, t->pool, t->offsets, t->ranks, t->n, e->special_pool, e->special_offsets,
                             e->special_ids, e->n_special))
        return NULL;
    return &e->decode;
}
