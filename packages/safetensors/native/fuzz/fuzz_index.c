/*
 * fuzz_index.c: libFuzzer target for the index.json weight-map scanner (st_parse_index). The input
 * is the index text. Parsed at every SIMD level this CPU has; the results must agree (code, error
 * position, entries, shard names), else abort.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "k3_safetensors.h"
#include "fuzz_common.h"

typedef struct {
    st_code code;
    int64_t position;
    uint32_t count, n_shards;
    uint64_t digest;
} outcome;

static uint64_t index_digest(const st_index *x) {
    uint64_t h = FUZZ_FNV_SEED;
    for (uint32_t k = 0; k < x->count; k++) {
        const uint8_t *name;
        size_t len;
        st_index_name(x, k, &name, &len);
        h = fuzz_fnv(h, name, len);
        if (x->shard_of[k] >= x->n_shards) abort();
        h = fuzz_fnv(h, &x->shard_of[k], sizeof x->shard_of[k]);
    }
    h = fuzz_fnv(h, x->shard_start, (x->n_shards + 1) * sizeof(uint32_t));
    h = fuzz_fnv(h, x->shard_bytes, x->shard_length);
    h = fuzz_fnv(h, &x->metadata_begin, sizeof x->metadata_begin);
    return fuzz_fnv(h, &x->metadata_end, sizeof x->metadata_end);
}

static outcome parse_once(const uint8_t *data, size_t size, int level) {
    outcome o = {ST_OK, -1, 0, 0, 0};
    st_error e;
    memset(&e, 0, sizeof e);
    st_error_clear(&e);
    st_set_simd_level(level);
    st_index x;
    if (st_parse_index(data, size, &x, &e) == 0) {
        o.count = x.count;
        o.n_shards = x.n_shards;
        o.digest = index_digest(&x);
    }
    st_index_free(&x);
    o.code = e.code;
    o.position = e.position;
    st_error_clear(&e);
    return o;
}

static int levels = 1;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    levels = fuzz_simd_levels();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    outcome ref = parse_once(data, size, 0);
    for (int level = 1; level < levels; level++) {
        outcome o = parse_once(data, size, level);
        if (o.code != ref.code || o.position != ref.position || o.count != ref.count || o.n_shards != ref.n_shards ||
            o.digest != ref.digest) {
            fprintf(stderr, "level %d disagrees with scalar: code %d/%d position %lld/%lld count %u/%u\n", level, o.code,
                    ref.code, (long long)o.position, (long long)ref.position, o.count, ref.count);
            abort();
        }
    }
    return 0;
}
