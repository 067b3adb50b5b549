/*
 * rank_table.c: the byte-string → rank map. Linear probing over a power-of-two table, twice the
 * token count; each slot keeps the 32-bit hash so most misses never touch the pool. Two-byte
 * tokens also live in a direct 64K table, since every merge starts from byte pairs.
 */
#include "rank_table.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* First min(len, 8) bytes as a zero-padded word. */
static inline uint64_t head_of(const uint8_t *s, size_t len) {
    uint64_t w = 0;
    memcpy(&w, s, len < 8 ? len : 8);
    return w;
}

/* A multiply-xorshift hash over 8-byte words; cheap for the short keys BPE looks up. */
static inline uint32_t hash_bytes(const uint8_t *s, size_t len) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (uint64_t)len;
    if (len <= 8) {
        h = (h ^ head_of(s, len)) * 0xBF58476D1CE4E5B9ull;
        h ^= h >> 31;
        h *= 0x94D049BB133111EBull;
        return (uint32_t)(h >> 32);
    }
    while (len >= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = (h ^ w) * 0xBF58476D1CE4E5B9ull;
        h ^= h >> 31;
        s += 8;
        len -= 8;
    }
    if (len) {
        uint64_t w = 0;
        memcpy(&w, s, len);
        h = (h ^ w) * 0x94D049BB133111EBull;
        h ^= h >> 29;
    }
    h *= 0xBF58476D1CE4E5B9ull;
    return (uint32_t)(h >> 32);
}

uint32_t k3_rank_lookup(const k3_rank_table *t, const uint8_t *s, size_t len) {
    if (len == 2) return t->pair[(size_t)s[0] << 8 | s[1]];
    uint32_t h = hash_bytes(s, len);
    uint32_t f = (h >> 11) & (K3_FILTER_BITS - 1);
    if (!(t->filter[f >> 6] >> (f & 63) & 1)) return K3_NO_RANK;
    uint64_t head = head_of(s, len);
    for (size_t i = h & t->mask;; i = (i + 1) & t->mask) {
        const k3_slot *slot = &t->slots[i];
        if (slot->token == K3_NO_RANK) return K3_NO_RANK;
        if (slot->head != head || slot->len != len) continue;
        if (len <= 8 || memcmp(t->pool + t->offsets[slot->token] + 8, s + 8, len - 8) == 0) return t->ranks[slot->token];
    }
}

void k3_rank_table_free(k3_rank_table *t) {
    free(t->pool);
    free(t->offsets);
    free(t->ranks);
    free(t->slots);
    free(t->pair);
    free(t->filter);
    memset(t, 0, sizeof *t);
}

int k3_rank_table_init(k3_rank_table *t, const uint8_t *pool, size_t pool_len, const uint32_t *offsets,
                       const uint32_t *ranks, size_t n, char *err, size_t err_n) {
    memset(t, 0, sizeof *t);
    size_t size = 1;
    while (size < 2 * n) size <<= 1;
    t->pool = malloc(pool_len ? pool_len : 1);
    t->offsets = malloc((n + 1) * sizeof *t->offsets);
    t->ranks = malloc((n ? n : 1) * sizeof *t->ranks);
    t->slots = malloc(size * sizeof *t->slots);
    t->pair = malloc(65536 * sizeof *t->pair);
    t->filter = calloc(K3_FILTER_BITS / 64, sizeof *t->filter);
    if (!t->pool || !t->offsets || !t->ranks || !t->slots || !t->pair || !t->filter) {
        k3_rank_table_free(t);
        snprintf(err, err_n, "out of memory for %zu tokens", n);
        return -1;
    }
    memcpy(t->pool, pool, pool_len);
    memcpy(t->offsets, offsets, (n + 1) * sizeof *offsets);
    memcpy(t->ranks, ranks, n * sizeof *ranks);
    t->n = n;
    t->mask = size - 1;
    for (size_t i = 0; i < size; i++) t->slots[i].token = K3_NO_RANK;
    for (size_t i = 0; i < 65536; i++) t->pair[i] = K3_NO_RANK;
    uint8_t single[256] = {0};
    for (size_t k = 0; k < n; k++) {
        uint32_t o = offsets[k], len = offsets[k + 1] - offsets[k];
        if (offsets[k + 1] <= o || offsets[k + 1] > pool_len) {
            snprintf(err, err_n, "token %zu has an empty or out-of-range byte span", k);
            k3_rank_table_free(t);
            return -1;
        }
        if (ranks[k] == K3_NO_RANK) {
            snprintf(err, err_n, "token %zu has rank 2^32-1, which is reserved", k);
            k3_rank_table_free(t);
            return -1;
        }
        if (len == 1) single[pool[o]] = 1;
        uint32_t h = hash_bytes(pool + o, len);
        size_t i = h & t->mask;
        for (; t->slots[i].token != K3_NO_RANK; i = (i + 1) & t->mask) {
            uint32_t other = t->slots[i].token, oo = offsets[other];
            if (offsets[other + 1] - oo == len && memcmp(pool + oo, pool + o, len) == 0) {
                snprintf(err, err_n, "token of rank %u has the same bytes as rank %u", ranks[k], ranks[other]);
                k3_rank_table_free(t);
                return -1;
            }
        }
        uint32_t f = (h >> 11) & (K3_FILTER_BITS - 1);
        t->filter[f >> 6] |= 1ull << (f & 63);
        t->slots[i].token = (uint32_t)k;
        t->slots[i].head = head_of(pool + o, len);
        t->slots[i].len = len;
        if (len == 2) t->pair[(size_t)pool[o] << 8 | pool[o + 1]] = ranks[k];
    }
    for (int b = 0; b < 256; b++)
        if (!single[b]) {
            snprintf(err, err_n, "byte 0x%02x has no token (all 256 single bytes are required)", b);
            k3_rank_table_free(t);
            return -1;
        }
    return 0;
}
