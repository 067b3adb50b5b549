/*
 * rank_table.c: the byte-string → rank map. Linear probing over a power-of-two table, twice the
 * token count; each slot keeps the 32-bit hash so most misses never touch the pool. Two-byte
 * tokens also live in a direct 64K table, since every merge starts from byte pairs.
 */
#include "rank_table.h"
#include "char_start.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* Large tables on transparent huge pages when the kernel allows it (madvise mode): building a
 * vocabulary is otherwise dominated by thousands of 4 KB page faults. */
static void *big_alloc(size_t size) {
    void *p = NULL;
    if (size < (1u << 20)) return malloc(size ? size : 1);
    if (posix_memalign(&p, 1u << 21, size)) return NULL;
#ifdef MADV_HUGEPAGE
    madvise(p, size, MADV_HUGEPAGE);
#endif
    return p;
}

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

/* Probe for a key whose hash is known. */
static inline uint32_t probe(const k3_rank_table *t, const uint8_t *s, size_t len, uint32_t h) {
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

uint32_t k3_rank_lookup(const k3_rank_table *t, const uint8_t *s, size_t len) {
    if (len == 2) return t->pair[(size_t)s[0] << 8 | s[1]];
    return probe(t, s, len, hash_bytes(s, len));
}

/* Two independent lookups: both slots are prefetched before either is probed, so their cache
 * misses overlap (the merge always needs the pairs on both sides of the part it just merged). */
void k3_rank_lookup2(const k3_rank_table *t, const uint8_t *s1, size_t len1, const uint8_t *s2, size_t len2,
                     uint32_t *r1, uint32_t *r2) {
    uint32_t h1 = hash_bytes(s1, len1), h2 = hash_bytes(s2, len2);
    __builtin_prefetch(&t->slots[h1 & t->mask]);
    __builtin_prefetch(&t->slots[h2 & t->mask]);
    *r1 = len1 == 2 ? t->pair[(size_t)s1[0] << 8 | s1[1]] : probe(t, s1, len1, h1);
    *r2 = len2 == 2 ? t->pair[(size_t)s2[0] << 8 | s2[1]] : probe(t, s2, len2, h2);
}

void k3_rank_table_free(k3_rank_table *t) {
    free(t->pool);
    free(t->offsets);
    free(t->ranks);
    free(t->slots);
    free(t->pair);
    free(t->filter);
    free(t->char3);
    free(t->char3_ok);
    memset(t, 0, sizeof *t);
}

int k3_rank_table_init(k3_rank_table *t, const uint8_t *pool, size_t pool_len, const uint32_t *offsets,
                       const uint32_t *ranks, size_t n, char *err, size_t err_n) {
    memset(t, 0, sizeof *t);
    /* Load <= 0.8: the filter answers most misses, so probes are mostly hits; a smaller table
     * means fewer page faults at load time and fewer cache misses per hit. */
    size_t size = 1;
    while (size < n + n / 4) size <<= 1;
    t->pool = big_alloc(pool_len);
    t->offsets = malloc((n + 1) * sizeof *t->offsets);
    t->ranks = malloc((n ? n : 1) * sizeof *t->ranks);
    t->slots = big_alloc(size * sizeof *t->slots);
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
    /* Validate spans and hash every token (sequential), then insert in slot order (bucket sort on
     * the home slot) so the table fills almost sequentially instead of by random cache misses. */
    uint8_t single[256] = {0};
    uint32_t *hashes = malloc((n ? n : 1) * sizeof *hashes), *order = malloc((n ? n : 1) * sizeof *order);
    uint32_t *bucket = calloc(4097, sizeof *bucket);
    if (!hashes || !order || !bucket) {
        free(hashes), free(order), free(bucket);
        k3_rank_table_free(t);
        snprintf(err, err_n, "out of memory for %zu tokens", n);
        return -1;
    }
    int shift = 0;
    while ((t->mask >> shift) >= 4096) shift++;
    for (size_t k = 0; k < n; k++) {
        uint32_t o = offsets[k];
        if (offsets[k + 1] <= o || offsets[k + 1] > pool_len) {
            snprintf(err, err_n, "token %zu has an empty or out-of-range byte span", k);
            goto fail;
        }
        if (ranks[k] == K3_NO_RANK) {
            snprintf(err, err_n, "token %zu has rank 2^32-1, which is reserved", k);
            goto fail;
        }
        hashes[k] = hash_bytes(pool + o, offsets[k + 1] - o);
        bucket[((hashes[k] & t->mask) >> shift) + 1]++;
    }
    for (int b = 0; b < 4096; b++) bucket[b + 1] += bucket[b];
    for (size_t k = 0; k < n; k++) order[bucket[(hashes[k] & t->mask) >> shift]++] = (uint32_t)k;
    for (size_t m = 0; m < n; m++) {
        uint32_t k = order[m], o = offsets[k], len = offsets[k + 1] - o, h = hashes[k];
        uint64_t head = head_of(pool + o, len);
        if (len == 1) {
            single[pool[o]] = 1;
            t->single[pool[o]] = ranks[k];
        }
        size_t i = h & t->mask;
        for (; t->slots[i].token != K3_NO_RANK; i = (i + 1) & t->mask) {
            const k3_slot *sl = &t->slots[i];
            if (sl->head == head && sl->len == len && (len <= 8 || memcmp(pool + offsets[sl->token], pool + o, len) == 0)) {
                snprintf(err, err_n, "token of rank %u has the same bytes as rank %u", ranks[k], ranks[sl->token]);
                goto fail;
            }
        }
        uint32_t f = (h >> 11) & (K3_FILTER_BITS - 1);
        t->filter[f >> 6] |= 1ull << (f & 63);
        t->slots[i].token = k;
        t->slots[i].head = head;
        t->slots[i].len = len;
        if (len == 2) t->pair[(size_t)pool[o] << 8 | pool[o + 1]] = ranks[k];
    }
    free(hashes), free(order), free(bucket);
    for (int b = 0; b < 256; b++)
        if (!single[b]) {
            snprintf(err, err_n, "byte 0x%02x has no token (all 256 single bytes are required)", b);
            k3_rank_table_free(t);
            return -1;
        }
    /* Out of memory here only means every merge starts from bytes. */
    (void)k3_char_start_init(t);
    return 0;
fail:
    free(hashes), free(order), free(bucket);
    k3_rank_table_free(t);
    return -1;
}
