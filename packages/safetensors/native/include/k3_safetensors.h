/*
 * k3_safetensors.h: the C side of @k3/safetensors. A strict scanner for safetensors headers and
 * index.json weight maps that stores tensors column-wise (names in one string table, offsets,
 * shapes and dtypes in flat arrays), plus the official layout validation.
 *
 * The pure-TS parser in src/scan.ts and src/index-json.ts is the specification: this code
 * performs the same checks in the same order and writes the same messages, so both backends
 * give identical results and errors (the tests compare them on every fixture and fuzz case).
 */
#ifndef K3_SAFETENSORS_H
#define K3_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- limits */

#define ST_MAX_HEADER_LENGTH 100000000ull
#define ST_MAX_SAFE 9007199254740991ull /* 2^53 - 1: every integer must fit a JS number */
#define ST_MAX_SHARDS 10000
#define ST_MAX_INDEX_BYTES 1000000000ull
#define ST_MAX_JSON_DEPTH 128
#define ST_N_DTYPES 22

/* ---------------------------------------------------------------- errors */

typedef enum {
    ST_OK = 0,
    ST_HEADER_TOO_SMALL,
    ST_HEADER_TOO_LARGE,
    ST_INVALID_HEADER_LENGTH,
    ST_INVALID_UTF8,
    ST_INVALID_JSON,
    ST_INVALID_HEADER,
    ST_INVALID_TENSOR_ENTRY,
    ST_INVALID_METADATA,
    ST_DUPLICATE_KEY,
    ST_UNKNOWN_DTYPE,
    ST_INVALID_OFFSET,
    ST_TENSOR_INVALID_INFO,
    ST_MISALIGNED_SLICE,
    ST_VALIDATION_OVERFLOW,
    ST_METADATA_INCOMPLETE_BUFFER,
    ST_INVALID_INDEX,
    ST_TENSOR_NOT_IN_SHARD,
    ST_TENSOR_NOT_IN_INDEX,
    ST_DUPLICATE_TENSOR,
    ST_IO_ERROR,
    ST_OUT_OF_MEMORY,
    ST_N_CODES
} st_code;

/* The code names used by SafetensorsError (index = st_code). */
extern const char *const st_code_names[ST_N_CODES];

typedef struct {
    st_code code;
    int64_t position;  /* header byte, or -1 */
    int shard;         /* shard the error is about, or -1 (index file / in-memory) */
    char *tensor;      /* malloc'd UTF-8 (may contain NUL), or NULL */
    size_t tensor_len;
    char detail[640];
} st_error;

void st_error_clear(st_error *e);
/* Sets code/position/detail (printf-style); keeps the first error only. Returns 0. */
int st_fail(st_error *e, st_code code, int64_t position, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void st_error_set_tensor(st_error *e, const uint8_t *name, size_t len);

/* ---------------------------------------------------------------- dtypes */

extern const char *const st_dtype_names[ST_N_DTYPES];
extern const uint8_t st_dtype_bits[ST_N_DTYPES];
int st_dtype_code(const uint8_t *s, size_t len); /* -1 when unknown */

/* ---------------------------------------------------------------- the column table */

typedef struct st_hash st_hash;
typedef struct st_arena st_arena;

typedef struct {
    uint32_t count;
    uint64_t header_length;
    uint64_t file_size;
    uint8_t *dtype;
    double *begin, *end;       /* data_offsets, exact integers <= 2^53-1 */
    uint32_t *shape_start;     /* count + 1 */
    double *dims;
    uint32_t n_dims;
    uint32_t *name_start;      /* count + 1 */
    uint8_t *name_bytes;
    size_t name_length;
    int32_t *layer, *expert;
    uint8_t *kind;
    int has_metadata;          /* 0 = absent or null */
    uint32_t meta_count;       /* pairs */
    uint32_t *meta_start;      /* 2 * meta_count + 1 string boundaries */
    uint8_t *meta_bytes;
    size_t meta_length;
    st_hash *names;            /* name -> index, for lookups and duplicate checks */
    int in_arena;              /* the columns (not the metadata) live in an st_arena */
    /* capacities while scanning */
    uint32_t cap, dims_cap, meta_cap;
    size_t name_cap, meta_bytes_cap;
} st_table;

void st_table_free(st_table *t);

/* Checks the 8-byte prefix (prefix_len = bytes available, <= 8). Returns N or -1 with e set. */
int64_t st_header_length(const uint8_t *prefix, size_t prefix_len, uint64_t file_size, st_error *e);

/* Parses and validates the N header bytes of a file of file_size bytes. 0 on success. The
   columns are parsed into per-thread scratch buffers (kept for the next header; dropped after
   headers above 16 MB) and then copied at their exact size into `arena`, or into one malloc
   each when arena is NULL. */
int st_parse_header(const uint8_t *header, size_t n, uint64_t file_size, st_arena *arena, st_table *out, st_error *e);

/* Index of the first byte of the first invalid UTF-8 sequence, or -1. */
int64_t st_utf8_first_invalid(const uint8_t *s, size_t n);

/* The grouping rule of docs/formats.md §1.4 (see src/classify.ts). */
void st_classify(const uint8_t *name, size_t len, int32_t *layer, int32_t *expert, uint8_t *kind);

/* Layout rules (sorted tiling, sizes, coverage); 0 on success. */
int st_validate_layout(st_table *t, st_error *e);

/* ---------------------------------------------------------------- SIMD level */

/* The level string scans use: 0 scalar (SWAR), 1 AVX2, 2 AVX-512 (k3_simd_level of @k3/dense;
   the addon passes the current one before each parse). Results are identical on every level. */
void st_set_simd_level(int simd_level);

/* ---------------------------------------------------------------- memory */

/* malloc/calloc for large blocks: 2 MB aligned and advised as transparent huge pages, so a
   random-access table takes a handful of page faults and TLB entries instead of thousands.
   Release with free(). */
void *st_alloc_big(size_t bytes, int zero);

/* Thread-safe bump allocation in huge-page chunks, 64-byte aligned; freed all at once. */
st_arena *st_arena_new(void);
void *st_arena_alloc(st_arena *a, size_t bytes);
void st_arena_free(st_arena *a);

/* ---------------------------------------------------------------- name hash */

typedef void (*st_name_fn)(const void *ctx, uint32_t value, const uint8_t **name, size_t *len);

st_hash *st_hash_new(uint32_t expected, st_name_fn name_of, const void *ctx);
void st_hash_free(st_hash *h);
uint64_t st_hash_bytes(const uint8_t *s, size_t n);
/* Returns the existing value for the name, or inserts `value` and returns UINT32_MAX. -2 (as
   UINT32_MAX-1) on allocation failure. */
uint32_t st_hash_insert(st_hash *h, const uint8_t *name, size_t len, uint64_t hash, uint32_t value);
uint32_t st_hash_find(const st_hash *h, const uint8_t *name, size_t len, uint64_t hash);
void st_hash_set_ctx(st_hash *h, const void *ctx);
/* Empties the table and sizes it for `expected` names (reusing its slots when the size fits). */
int st_hash_reset(st_hash *h, uint32_t expected);
/* A copy of h (same slots) whose slots live in `arena` (or one malloc when NULL). */
st_hash *st_hash_copy(const st_hash *h, st_arena *arena, const void *ctx);
/* Starts loading the slot a hash probes first (hides the cache miss of a later insert/find). */
void st_hash_prefetch(const st_hash *h, uint64_t hash);

/* ---------------------------------------------------------------- index.json */

typedef struct {
    uint32_t count;              /* weight_map entries */
    const uint8_t *json;         /* the index text (owned when read by st_parse_index_file) */
    uint8_t *owned_json;
    uint32_t *name_off;          /* plain names: offset into json; escaped names: into name_bytes
                                    (32 bits: the index is at most ST_MAX_INDEX_BYTES) */
    uint32_t *name_len;          /* high bit set = escaped (decoded into name_bytes) */
    uint8_t *name_bytes;         /* decoded escaped names only */
    uint32_t *shard_of;          /* per entry */
    uint64_t *hashes;            /* st_hash_bytes of each entry name: filled only when weight_map is
                                    not strictly increasing (the duplicate check hashes then) */
    uint32_t *key_pos;           /* JSON position of each entry's key (for messages) */
    uint32_t n_shards;
    uint32_t *shard_start;       /* n_shards + 1 */
    uint8_t *shard_bytes;
    int64_t metadata_begin, metadata_end; /* raw JSON span of "metadata", or -1 */
    /* capacities */
    uint32_t cap, shard_cap;
    size_t name_cap, name_length, shard_bytes_cap, shard_length;
} st_index;

#define ST_NAME_ESCAPED 0x80000000u

static inline void st_index_name(const st_index *x, uint32_t k, const uint8_t **name, size_t *len) {
    uint32_t l = x->name_len[k];
    *name = (l & ST_NAME_ESCAPED ? x->name_bytes : x->json) + x->name_off[k];
    *len = l & ~ST_NAME_ESCAPED;
}

/* Reads the index file into memory it owns, then parses it. */
int st_parse_index_file(const char *path, st_index *out, st_error *e);
int st_parse_index(const uint8_t *json, size_t n, st_index *out, st_error *e);
void st_index_free(st_index *x);

/* ---------------------------------------------------------------- checkpoints */

typedef void (*st_parallel_fn)(int n_tasks, void (*task)(void *ctx, int i), void *ctx);

typedef struct {
    uint32_t n_shards;
    st_table *tables;
    uint64_t *bases;             /* n_shards + 1 */
    st_arena *arena;             /* the tables' columns */
} st_checkpoint;

/* Reads and parses every shard (in parallel through `parallel`, or serially when NULL), then
   applies the weight-map rules (index != NULL) or the no-duplicate rule. The error reported is
   the first in shard order, as the TS backend would find it. */
int st_open_shards(const char *const *paths, uint32_t n, const st_index *index, st_parallel_fn parallel,
                   st_checkpoint *out, st_error *e);
void st_checkpoint_free(st_checkpoint *c);

/*
 * Speculative open: parses index.json (task 0) and the headers of every candidate file of the
 * directory (tasks 1..n) in one parallel pass, so the index and the shards overlap in time.
 * Nothing is decided yet: st_speculative_finish then takes the tables in index order (reporting
 * the first failing shard in that order, exactly as st_open_shards would) and cross-checks.
 */
typedef struct {
    st_index index;
    st_error index_error;
    uint32_t n;
    const char *const *paths;
    st_table *tables;
    st_error *errors;
    st_arena *arena;             /* the tables' columns (moved to the checkpoint by finish) */
} st_speculative;

int st_speculative_parse(const char *index_path, const char *const *paths, uint32_t n, st_parallel_fn parallel,
                         st_speculative *out);
/* order[k] = candidate holding the index's shard k. Moves the used tables into `c`. */
int st_speculative_finish(st_speculative *sp, const uint32_t *order, st_parallel_fn parallel, st_checkpoint *c,
                          st_error *e);
void st_speculative_free(st_speculative *sp);
/* Global index of a name or -1. */
int64_t st_checkpoint_find(const st_checkpoint *c, const uint8_t *name, size_t len);

#ifdef __cplusplus
}
#endif
#endif
