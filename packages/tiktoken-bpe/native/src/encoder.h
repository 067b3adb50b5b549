/* encoder.h: a tokenizer instance: rank table, pattern family, special tokens; encode/count. */
#ifndef K3_ENCODER_H
#define K3_ENCODER_H

#include "bpe.h"
#include "decode.h"
#include "piece_cache.h"
#include "pretokenize.h"

typedef struct {
    k3_rank_table table;
    k3_family family;
    uint8_t *special_pool;
    uint32_t *special_offsets; /* n_special + 1 */
    uint32_t *special_ids;
    size_t n_special;
    uint32_t *by_first;        /* special indices grouped by first byte, longest first */
    uint32_t first_start[257]; /* by_first[first_start[b] .. first_start[b+1]) start with byte b */
    k3_bpe_scratch scratch;
    k3_piece_cache cache;
    k3_decode_table decode; /* built on the first decode (k3_encoder_decode_table) */
} k3_encoder;

k3_encoder *k3_encoder_new(const uint8_t *pool, size_t pool_len, const uint32_t *offsets, const uint32_t *ranks,
                           size_t n, k3_family family, const uint8_t *special_pool, size_t special_pool_len,
                           const uint32_t *special_offsets, const uint32_t *special_ids, size_t n_special, char *err,
                           size_t err_n);
void k3_encoder_free(k3_encoder *e);

/* Leftmost special with mask[i] != 0 in s[from, end): its index (and *pos), or -1. */
long k3_encoder_find_special(const k3_encoder *e, const uint8_t *s, size_t from, size_t end, const uint8_t *mask,
                             size_t *pos);

/* Ids of s[0, len) into out (capacity >= len; NULL = count only). `allowed` may be NULL.
 * Returns the count, or (size_t)-1 when out of memory. */
size_t k3_encoder_encode(k3_encoder *e, const uint8_t *s, size_t len, const uint8_t *allowed, uint32_t *out);

/* The decode table, built on first use; NULL when out of memory. */
const k3_decode_table *k3_encoder_decode_table(k3_encoder *e);

#endif
