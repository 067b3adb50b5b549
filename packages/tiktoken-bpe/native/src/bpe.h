/* bpe.h: tiktoken's byte_pair_encode of one piece (linear under 100 bytes, heap above). */
#ifndef K3_BPE_H
#define K3_BPE_H

#include "rank_table.h"

#define K3_HEAP_THRESHOLD 100

typedef struct {
    /* scratch reused across pieces by the heap merge */
    uint32_t *next, *prev, *pair_rank, *tok;
    uint64_t *heap;
    size_t cap, heap_cap;
} k3_bpe_scratch;

void k3_bpe_scratch_free(k3_bpe_scratch *s);

/* Appends the ranks of piece[0, len) to out (when out is not NULL); returns their count, or
 * (size_t)-1 when out of memory. `strategy`: 0 = by length (tiktoken), 1 = linear, 2 = heap. */
size_t k3_bpe_encode(const k3_rank_table *t, const uint8_t *piece, size_t len, uint32_t *out, k3_bpe_scratch *scratch,
                     int strategy);

#endif
