/* piece_cache.h: a direct-mapped cache of short pieces → their token ids (per encoder). */
#ifndef K3_PIECE_CACHE_H
#define K3_PIECE_CACHE_H

#include <stddef.h>
#include <stdint.h>

#define K3_PIECE_CACHE_SLOTS (1u << 14) /* 16384 × 64 B = 1 MB */
#define K3_PIECE_CACHE_MAX_BYTES 26
#define K3_PIECE_CACHE_MAX_TOKENS 8

typedef struct {
    uint8_t len;    /* 0 = empty */
    uint8_t ntok;
    uint8_t key[K3_PIECE_CACHE_MAX_BYTES];
    uint32_t tok[K3_PIECE_CACHE_MAX_TOKENS];
    uint32_t pad;
} k3_piece_entry; /* 64 bytes: one cache line */

typedef struct {
    k3_piece_entry *slots; /* NULL when allocation failed: the cache is then simply off */
} k3_piece_cache;

void k3_piece_cache_init(k3_piece_cache *c);
void k3_piece_cache_free(k3_piece_cache *c);

/* Token count of a cached piece (ids copied to out when not NULL), or -1 on a miss. */
int k3_piece_cache_get(const k3_piece_cache *c, const uint8_t *s, size_t len, uint32_t *out);

/* Stores the ids of a piece when it is short enough. */
void k3_piece_cache_put(k3_piece_cache *c, const uint8_t *s, size_t len, const uint32_t *ids, size_t n);

#endif
