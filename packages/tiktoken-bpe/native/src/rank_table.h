/* rank_table.h: token bytes → rank, an open-addressing hash table over one byte pool. */
#ifndef K3_RANK_TABLE_H
#define K3_RANK_TABLE_H

#include <stddef.h>
#include <stdint.h>

#define K3_NO_RANK 0xFFFFFFFFu
#define K3_FILTER_BITS (1u << 20) /* 128 KB: stays in cache, unlike the slot array */

typedef struct {
    uint64_t head;  /* first 8 bytes of the token, zero-padded: most keys compare in one step */
    uint32_t token; /* index into offsets/ranks, K3_NO_RANK = empty */
    uint32_t len;
} k3_slot;

typedef struct {
    uint8_t *pool;      /* all token bytes (owned copy) */
    uint32_t *offsets;  /* n + 1 */
    uint32_t *ranks;    /* n */
    size_t n;
    k3_slot *slots;
    size_t mask;
    uint32_t *pair;     /* 65536 ranks of the two-byte tokens, K3_NO_RANK when absent */
    uint64_t *filter;   /* one bit per hash value (K3_FILTER_BITS): a clear bit proves a miss */
    uint32_t single[256]; /* rank of each one-byte token */
    uint32_t *char3;      /* 65536: rank of a 3-byte char a merge may start from whole (char_start.c), or NULL */
    uint16_t *char3_ok;   /* 65536: for which neighbours it may (bit left * 3 + right), or NULL */
} k3_rank_table;

/* Copies the vocabulary and builds the table. Returns 0, or -1 with a message in err
 * (duplicate token bytes, empty token, missing single byte, out of memory). */
int k3_rank_table_init(k3_rank_table *t, const uint8_t *pool, size_t pool_len, const uint32_t *offsets,
                       const uint32_t *ranks, size_t n, char *err, size_t err_n);
void k3_rank_table_free(k3_rank_table *t);

/* Rank of s[0, len), or K3_NO_RANK. */
uint32_t k3_rank_lookup(const k3_rank_table *t, const uint8_t *s, size_t len);

/* Two lookups with overlapped memory access; same results as two k3_rank_lookup calls. */
void k3_rank_lookup2(const k3_rank_table *t, const uint8_t *s1, size_t len1, const uint8_t *s2, size_t len2,
                     uint32_t *r1, uint32_t *r2);

#endif
