/*
 * fuzz_header.c: libFuzzer target for the safetensors header scanner (st_header_length,
 * st_parse_header with its layout validation and st_classify). The input is a whole file.
 *
 * Each input is parsed at every SIMD level this CPU has and with and without an arena; the
 * results must agree (code, error position, tensor count and every column), else abort: the
 * string scans differ per level, their answers must not.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "k3_safetensors.h"
#include "fuzz_common.h"

/* ---------------------------------------------------------------- one parse */

typedef struct {
    st_code code;
    int64_t position;
    uint32_t count;
    uint64_t digest; /* FNV-1a over the columns */
} outcome;

static uint64_t table_digest(const st_table *t) {
    uint64_t h = FUZZ_FNV_SEED;
    h = fuzz_fnv(h, t->dtype, t->count);
    h = fuzz_fnv(h, t->begin, t->count * sizeof(double));
    h = fuzz_fnv(h, t->end, t->count * sizeof(double));
    h = fuzz_fnv(h, t->shape_start, (t->count + 1) * sizeof(uint32_t));
    h = fuzz_fnv(h, t->dims, t->n_dims * sizeof(double));
    h = fuzz_fnv(h, t->name_start, (t->count + 1) * sizeof(uint32_t));
    h = fuzz_fnv(h, t->name_bytes, t->name_length);
    h = fuzz_fnv(h, t->layer, t->count * sizeof(int32_t));
    h = fuzz_fnv(h, t->expert, t->count * sizeof(int32_t));
    h = fuzz_fnv(h, t->kind, t->count);
    for (uint32_t i = 0; i < t->count; i++) { /* every name finds itself */
        const uint8_t *name = t->name_bytes + t->name_start[i];
        size_t len = t->name_start[i + 1] - t->name_start[i];
        if (st_hash_find(t->names, name, len, st_hash_bytes(name, len)) != i) abort();
    }
    return h;
}

static outcome parse_once(const uint8_t *data, size_t size, int level, int use_arena) {
    outcome o = {ST_OK, -1, 0, 0};
    st_error e;
    memset(&e, 0, sizeof e);
    st_error_clear(&e);
    st_set_simd_level(level);
    int64_t n = st_header_length(data, size < 8 ? size : 8, size, &e);
    if (n >= 0) {
        st_arena *arena = use_arena ? st_arena_new() : NULL;
        st_table t;
        if (st_parse_header(data + 8, (size_t)n, size, arena, &t, &e) == 0) {
            o.count = t.count;
            o.digest = table_digest(&t);
        }
        st_table_free(&t);
        st_arena_free(arena);
    }
    o.code = e.code;
    o.position = e.position;
    st_error_clear(&e);
    return o;
}

/* ---------------------------------------------------------------- libFuzzer */

static int levels = 1;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    levels = fuzz_simd_levels();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    outcome ref = parse_once(data, size, 0, 0);
    for (int level = 0; level < levels; level++) {
        outcome o = parse_once(data, size, level, level & 1 ? 0 : 1);
        if (o.code != ref.code || o.position != ref.position || o.count != ref.count || o.digest != ref.digest) {
            fprintf(stderr, "level %d disagrees with scalar: code %d/%d position %lld/%lld count %u/%u\n", level, o.code,
                    ref.code, (long long)o.position, (long long)ref.position, o.count, ref.count);
            abort();
        }
    }
    return 0;
}
