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

typedef struct {
    st_code code;
    int64_t position;
    uint32_t count, n_shards;
    uint64_t digest;
} outcome;

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

static uint64_t index_digest(const st_index *x) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (uint32_t k = 0; k < x->count; k++) {
        const uint8_t *name;
        size_t len;
        st_index_name(x, k, &name, &len);
        h = fnv(h, name, len);
        if (x->shard_of[k] >= x->n_shards) abort();
        h = fnv(h, &x->shard_of[k], sizeof x->shard_of[k]);
    }
    h = fnv(h, x->shard_start, (x->n_shards + 1) * sizeof(uint32_t));
    h = fnv(h, x->shard_bytes, x->shard_length);
    h = fnv(h, &x->metadata_begin, sizeof x->metadata_begin);
    return fnv(h, &x->metadata_end, sizeof x->metadata_end);
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
    __builtin_cpu_init();
    levels = __builtin_cpu_supports("avx512bw") ? 3 : __builtin_cpu_supports("avx2") ? 2 : 1;
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
