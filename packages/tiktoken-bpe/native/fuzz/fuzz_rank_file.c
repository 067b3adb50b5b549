/*
 * fuzz_rank_file.c: libFuzzer target for the tiktoken rank-file parser (k3_parse_rank_file) and
 * what a parsed file feeds: the rank table, the BPE encoder and the decode table.
 *
 * The input is the rank file. When it parses and holds distinct ranks (what src/ranks.ts accepts),
 * an encoder is built from it (pattern family from the input's length) and the input itself is
 * encoded and decoded: the decoded bytes must be the input, else abort (BPE only regroups bytes).
 * Ranks above 2^20 are skipped: the decode table is one entry per id up to the largest rank, and
 * a vocabulary that large is the caller's choice, not a parser fault.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "encoder.h"
#include "rank_file.h"

#define MAX_RANK (1u << 20)

static int distinct_ranks(const uint32_t *ranks, size_t n) {
    uint32_t max = 0;
    for (size_t i = 0; i < n; i++)
        if (ranks[i] > max) max = ranks[i];
    if (max > MAX_RANK) return 0;
    uint8_t *seen = calloc((size_t)max + 1, 1);
    int ok = seen != NULL;
    for (size_t i = 0; ok && i < n; i++) ok = !seen[ranks[i]]++;
    free(seen);
    return ok;
}

/* Encodes then decodes `text` with the vocabulary; aborts when the round trip differs. */
static void round_trip(const uint8_t *pool, size_t pool_len, const uint32_t *offsets, const uint32_t *ranks, size_t n,
                       const uint8_t *text, size_t len) {
    static const uint8_t special[] = "<|endoftext|>";
    const uint32_t special_offsets[2] = {0, sizeof special - 1};
    const uint32_t special_ids[1] = {MAX_RANK + 1};
    char err[256];
    k3_encoder *e = k3_encoder_new(pool, pool_len, offsets, ranks, n, (k3_family)(len % 3), special, sizeof special - 1,
                                   special_offsets, special_ids, 1, err, sizeof err);
    if (!e) return; /* refused: duplicate bytes, a missing single byte, ... */
    uint32_t *ids = malloc((len ? len : 1) * sizeof *ids);
    const uint8_t allowed[1] = {1};
    size_t count = ids ? k3_encoder_encode(e, text, len, allowed, ids) : (size_t)-1;
    const k3_decode_table *table = count != (size_t)-1 ? k3_encoder_decode_table(e) : NULL;
    if (table) {
        size_t cap = len + K3_DECODE_PAD;
        uint8_t *out = malloc(cap);
        int64_t r = out ? k3_decode(table, ids, count, out, cap) : -1;
        if (out && (r != (int64_t)len || memcmp(out, text, len) != 0)) {
            fprintf(stderr, "round trip: %zu bytes in, %zu ids, %lld bytes out\n", len, count, (long long)r);
            abort();
        }
        free(out);
    }
    free(ids);
    k3_encoder_free(e);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* The buffers src/ranks.ts gives the parser (parseRanks). */
    size_t max_lines = size / 6 + 2;
    size_t pool_cap = (size * 3 + 3) / 4 + 4;
    uint8_t *pool = malloc(pool_cap);
    uint32_t *offsets = malloc((max_lines + 1) * sizeof *offsets);
    uint32_t *ranks = malloc(max_lines * sizeof *ranks);
    size_t used = 0;
    if (pool && offsets && ranks) {
        long n = k3_parse_rank_file(data, size, pool, pool_cap, offsets, ranks, max_lines + 1, &used);
        if (n > 0) {
            if (offsets[0] != 0 || offsets[n] != used || used > pool_cap) abort();
            for (long i = 0; i < n; i++)
                if (offsets[i + 1] <= offsets[i]) abort(); /* every token non-empty */
            if (distinct_ranks(ranks, (size_t)n)) round_trip(pool, used, offsets, ranks, (size_t)n, data, size);
        }
    }
    free(pool);
    free(offsets);
    free(ranks);
    return 0;
}
