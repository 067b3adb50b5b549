/* decode.h: ids → bytes through a flat id-indexed table (offset, length) over one padded byte pool. */
#ifndef K3_DECODE_H
#define K3_DECODE_H

#include <stddef.h>
#include <stdint.h>

/* Short tokens are copied with one fixed K3_DECODE_PAD-byte move, so the pool carries that many
 * bytes after its last token and every output buffer must have that many bytes of slack. */
#define K3_DECODE_PAD 16u
#define K3_DECODE_NONE 0xFFFFFFFFu /* length of an id that is neither a rank nor a special */

typedef struct {
    uint32_t off;
    uint32_t len; /* K3_DECODE_NONE = unknown id */
} k3_decode_entry;

typedef struct {
    k3_decode_entry *entries; /* n_ids */
    size_t n_ids;             /* max id + 1 */
    uint8_t *pool;            /* every token's bytes, then K3_DECODE_PAD zero bytes */
} k3_decode_table;

/* Builds the table from the ranks (token i = pool[offsets[i], offsets[i+1]) with rank ranks[i]) and
 * the specials (bytes special_pool[special_offsets[j], special_offsets[j+1]), id special_ids[j]).
 * Returns 0, or -1 when out of memory (the table is then empty and may be freed). */
int k3_decode_table_init(k3_decode_table *t, const uint8_t *pool, const uint32_t *offsets, const uint32_t *ranks,
                         size_t n, const uint8_t *special_pool, const uint32_t *special_offsets,
                         const uint32_t *special_ids, size_t n_special);
void k3_decode_table_free(k3_decode_table *t);

/* Writes the bytes of ids[0, n) to out (capacity cap bytes, of which the last K3_DECODE_PAD are slack
 * that may be overwritten). Returns:
 *   r >= 0 and r + K3_DECODE_PAD <= cap: done, r bytes written;
 *   r >= 0 and r + K3_DECODE_PAD >  cap: out is too small, r bytes are needed (contents undefined);
 *   r < 0: ids[-r - 1] is unknown (the leftmost unknown id). */
int64_t k3_decode(const k3_decode_table *t, const uint32_t *ids, size_t n, uint8_t *out, size_t cap);

#endif
