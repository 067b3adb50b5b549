/*
 * st_scan.c: the strict single-pass scanner for safetensors headers. It is a line-by-line
 * mirror of src/scan.ts (same checks, same order, same messages): the top level is an object of
 * tensor entries {dtype, shape, data_offsets} plus an optional __metadata__ (object of strings,
 * or null). No recursion: the schema has a fixed depth, so hostile nesting cannot hurt.
 * Names are decoded straight into the table's string table; integers must be <= 2^53-1.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "k3_safetensors.h"
#include "st_json.h"

typedef struct {
    st_json j; /* the shared lexer (st_json.c): position, strings, messages */
    st_table *t;
    st_hash *meta_keys;
} scanner;

/* ---------------------------------------------------------------- growth */

static int grow_entries(st_table *t) {
    if (t->count + 2 <= t->cap) return 0;
    uint32_t c = t->cap ? t->cap * 2 : 64;
    uint8_t *dtype = realloc(t->dtype, c);
    if (dtype) t->dtype = dtype;
    double *begin = realloc(t->begin, c * sizeof(double));
    if (begin) t->begin = begin;
    double *end = realloc(t->end, c * sizeof(double));
    if (end) t->end = end;
    uint32_t *ss = realloc(t->shape_start, (c + 1) * sizeof(uint32_t));
    if (ss) t->shape_start = ss;
    uint32_t *ns = realloc(t->name_start, (c + 1) * sizeof(uint32_t));
    if (ns) t->name_start = ns;
    if (!dtype || !begin || !end || !ss || !ns) return -1;
    t->cap = c;
    return 0;
}

static int push_dim(st_table *t, double v) {
    if (t->n_dims + 1 > t->dims_cap) {
        uint32_t c = t->dims_cap ? t->dims_cap * 2 : 128;
        double *d = realloc(t->dims, c * sizeof(double));
        if (!d) return -1;
        t->dims = d;
        t->dims_cap = c;
    }
    t->dims[t->n_dims++] = v;
    return 0;
}

/* ---------------------------------------------------------------- lexing (st_json.c) */

static void tensor_is(scanner *s, const uint8_t *name, size_t len) { st_error_set_tensor(s->j.e, name, len); }

static int oom(scanner *s) { return st_json_oom(&s->j); }

/* A number that must be a non-negative integer <= 2^53-1. */
static int uint_value(scanner *s, const char *what, const uint8_t *tname, size_t tlen, double *out) {
    const uint8_t *b = s->j.b;
    size_t n = s->j.n, start = s->j.p, p = start;
    int negative = b[p] == '-';
    if (negative) p++;
    uint64_t value = 0;
    int overflow = 0;
    if (p < n && b[p] == '0')
        p++;
    else if (p < n && b[p] >= '1' && b[p] <= '9') {
        while (p < n && b[p] >= '0' && b[p] <= '9') {
            if (!overflow) {
                value = value * 10 + (uint64_t)(b[p] - '0');
                if (value > ST_MAX_SAFE) overflow = 1;
            }
            p++;
        }
    } else {
        s->j.p = p;
        if (p < n) {
            char d[32];
            st_json_describe_byte(b[p], d, sizeof d);
            return st_json_fail(&s->j, ST_INVALID_JSON, p, "invalid number, found %s", d);
        }
        return st_json_fail(&s->j, ST_INVALID_JSON, p, "unexpected end of the header JSON inside a number");
    }
    int fraction = 0;
    if (p < n && b[p] == '.') {
        fraction = 1;
        p++;
        if (!(p < n && b[p] >= '0' && b[p] <= '9')) {
            s->j.p = p;
            return st_json_fail(&s->j, ST_INVALID_JSON, p, "invalid number: no digit after '.'");
        }
        while (p < n && b[p] >= '0' && b[p] <= '9') p++;
    }
    if (p < n && (b[p] == 'e' || b[p] == 'E')) {
        fraction = 1;
        p++;
        if (p < n && (b[p] == '+' || b[p] == '-')) p++;
        if (!(p < n && b[p] >= '0' && b[p] <= '9')) {
            s->j.p = p;
            return st_json_fail(&s->j, ST_INVALID_JSON, p, "invalid number: no digit in the exponent");
        }
        while (p < n && b[p] >= '0' && b[p] <= '9') p++;
    }
    s->j.p = p;
    if (negative || fraction) {
        st_json_fail(&s->j, ST_INVALID_TENSOR_ENTRY, start, "%s must hold non-negative integers", what);
        tensor_is(s, tname, tlen);
        return -1;
    }
    if (overflow) {
        st_json_fail(&s->j, ST_VALIDATION_OVERFLOW, start, "%s holds an integer above 2^53-1", what);
        tensor_is(s, tname, tlen);
        return -1;
    }
    *out = (double)value;
    return 0;
}

/* [uint, ...]: shape values go to the dims column (dims=1), offsets to out2 (first 2 kept). */
static int uint_array(scanner *s, const char *what, const uint8_t *tname, size_t tlen, int dims, double *out2,
                      uint64_t *count_out) {
    int c = st_json_peek(&s->j);
    if (c != '[') {
        if (st_json_is_value_start(c)) {
            st_json_fail(&s->j, ST_INVALID_TENSOR_ENTRY, s->j.p, "%s must be an array of non-negative integers", what);
            tensor_is(s, tname, tlen);
            return -1;
        }
        return st_json_expected(&s->j, "a value");
    }
    s->j.p++;
    st_json_skip_ws(&s->j);
    uint64_t count = 0;
    if (st_json_peek(&s->j) == ']') {
        s->j.p++;
        *count_out = 0;
        return 0;
    }
    for (;;) {
        int d = st_json_peek(&s->j);
        if (d != '-' && !(d >= '0' && d <= '9')) {
            if (st_json_is_value_start(d)) {
                st_json_fail(&s->j, ST_INVALID_TENSOR_ENTRY, s->j.p, "%s must hold non-negative integers", what);
                tensor_is(s, tname, tlen);
                return -1;
            }
            return st_json_expected(&s->j, "a value");
        }
        double v = 0;
        if (uint_value(s, what, tname, tlen, &v) != 0) return -1;
        if (dims) {
            if (push_dim(s->t, v) != 0) return oom(s);
        } else if (count < 2)
            out2[count] = v;
        count++;
        int more = st_json_next_or_close(&s->j, ']');
        if (more < 0) return -1;
        if (!more) {
            *count_out = count;
            return 0;
        }
    }
}

/* ---------------------------------------------------------------- entries */

static int describe_dtype(const uint8_t *s, size_t len, char *out, size_t cap) {
    int printable = len <= 32;
    for (size_t i = 0; printable && i < len; i++)
        if (s[i] < 0x20 || s[i] > 0x7e || s[i] == '"' || s[i] == '\\') printable = 0;
    if (printable) return snprintf(out, cap, "unknown dtype \"%.*s\"", (int)len, (const char *)s);
    return snprintf(out, cap, "unknown dtype (not a safetensors dtype name)");
}

static int key_is(const st_bytes *k, const char *word) {
    size_t n = strlen(word);
    return k->len == n && memcmp(k->buf, word, n) == 0;
}

static int entry_fail(scanner *s, st_code code, size_t pos, const uint8_t *name, size_t len, const char *msg) {
    st_json_fail(&s->j, code, pos, "%s", msg);
    tensor_is(s, name, len);
    return -1;
}

/* ---------------------------------------------------------------- the compact fast path */

/*
 * Writers emit every entry as the same compact text: {"dtype":"X","shape":[..],"data_offsets":[a,b]}
 * with plain decimal integers. These functions accept exactly that text and nothing else; on
 * the first byte that differs they return 0 and the general scanner below parses the entry from
 * its start (so every error, and every accepted variant, is the general scanner's). When they
 * succeed the general scanner would have read the same values: no escapes, no white space, keys
 * distinct, integers without sign, fraction, exponent or leading zero, <= 2^53-1.
 */

/* A plain integer at p: the index after its digits, or 0 (the general scanner decides). */
static size_t fast_uint(const uint8_t *b, size_t p, size_t n, double *out) {
    size_t start = p;
    uint64_t v = 0;
    while (p < n && (uint8_t)(b[p] - '0') < 10) {
        if (p - start == 16) return 0; /* 17+ digits: above 2^53-1, or a leading zero */
        v = v * 10 + (uint64_t)(b[p] - '0');
        p++;
    }
    size_t digits = p - start;
    if (digits == 0 || (digits > 1 && b[start] == '0') || v > ST_MAX_SAFE) return 0;
    *out = (double)v;
    return p;
}

static int literal_at(const uint8_t *b, size_t p, size_t n, const char *text, size_t len) {
    return p + len <= n && memcmp(b + p, text, len) == 0;
}

/* The entry at p in the compact form: 1 when stored (p moves past it), 0 when not that form. */
static int fast_entry(scanner *s, uint32_t idx) {
    static const char DTYPE[] = "{\"dtype\":\"", SHAPE[] = "\",\"shape\":[", OFFSETS[] = ",\"data_offsets\":[";
    const uint8_t *b = s->j.b;
    size_t n = s->j.n, p = s->j.p;
    st_table *t = s->t;
    if (!literal_at(b, p, n, DTYPE, sizeof DTYPE - 1)) return 0;
    p += sizeof DTYPE - 1;
    size_t d0 = p;
    while (p < n && b[p] != '"') {
        if (b[p] == '\\' || b[p] < 0x20 || p - d0 > 16) return 0;
        p++;
    }
    int dtype = st_dtype_code(b + d0, p - d0);
    if (dtype < 0 || !literal_at(b, p, n, SHAPE, sizeof SHAPE - 1)) return 0;
    p += sizeof SHAPE - 1;
    uint32_t dims_start = t->n_dims;
    double v, offsets[2];
    if (p < n && b[p] == ']')
        p++;
    else
        for (;;) {
            size_t q = fast_uint(b, p, n, &v);
            if (q == 0 || q >= n || push_dim(t, v) != 0) goto general;
            p = q + 1;
            if (b[q] == ']') break;
            if (b[q] != ',') goto general;
        }
    if (!literal_at(b, p, n, OFFSETS, sizeof OFFSETS - 1)) goto general;
    p += sizeof OFFSETS - 1;
    size_t q = fast_uint(b, p, n, &offsets[0]);
    if (q == 0 || q >= n || b[q] != ',') goto general;
    q = fast_uint(b, q + 1, n, &offsets[1]);
    if (q == 0 || q + 1 >= n || b[q] != ']' || b[q + 1] != '}') goto general;
    t->dtype[idx] = (uint8_t)dtype;
    t->begin[idx] = offsets[0];
    t->end[idx] = offsets[1];
    t->shape_start[idx] = dims_start;
    t->count = idx + 1;
    s->j.p = q + 2;
    return 1;
general:
    t->n_dims = dims_start;
    return 0;
}

/* The tensor entry at p; its name is already name `idx` of the string table. */
static int scan_entry(scanner *s, st_bytes *key, st_bytes *val) {
    st_table *t = s->t;
    uint32_t idx = t->count;
    if (fast_entry(s, idx)) return 0;
    const uint8_t *name = t->name_bytes + t->name_start[idx];
    size_t nlen = t->name_start[idx + 1] - t->name_start[idx];
    int c = st_json_peek(&s->j);
    if (c != '{') {
        if (st_json_is_value_start(c))
            return entry_fail(s, ST_INVALID_TENSOR_ENTRY, s->j.p, name, nlen,
                              "a tensor entry must be an object with dtype, shape and data_offsets");
        return st_json_expected(&s->j, "a value");
    }
    size_t entry_at = s->j.p;
    s->j.p++;
    st_json_skip_ws(&s->j);
    int dtype = -1, have_shape = 0, have_offsets = 0;
    double offsets[2] = {0, 0};
    uint32_t dims_start = t->n_dims;
    if (st_json_peek(&s->j) == '}')
        s->j.p++;
    else
        for (;;) {
            size_t key_at = s->j.p;
            if (st_json_key(&s->j, key) != 0) return -1;
            if (key_is(key, "dtype")) {
                if (dtype >= 0) return entry_fail(s, ST_DUPLICATE_KEY, key_at, name, nlen, "duplicate field dtype in a tensor entry");
                int v = st_json_peek(&s->j);
                if (v != '"') {
                    if (st_json_is_value_start(v)) return entry_fail(s, ST_INVALID_TENSOR_ENTRY, s->j.p, name, nlen, "dtype must be a string");
                    return st_json_expected(&s->j, "a value");
                }
                size_t at = s->j.p;
                val->len = 0;
                if (st_json_string(&s->j, val) != 0) return -1;
                dtype = st_dtype_code(val->buf, val->len);
                if (dtype < 0) {
                    char msg[96];
                    describe_dtype(val->buf, val->len, msg, sizeof msg);
                    return entry_fail(s, ST_UNKNOWN_DTYPE, at, name, nlen, msg);
                }
            } else if (key_is(key, "shape")) {
                if (have_shape) return entry_fail(s, ST_DUPLICATE_KEY, key_at, name, nlen, "duplicate field shape in a tensor entry");
                uint64_t count;
                if (uint_array(s, "shape", name, nlen, 1, NULL, &count) != 0) return -1;
                have_shape = 1;
            } else if (key_is(key, "data_offsets")) {
                if (have_offsets)
                    return entry_fail(s, ST_DUPLICATE_KEY, key_at, name, nlen, "duplicate field data_offsets in a tensor entry");
                size_t at = s->j.p;
                uint64_t count;
                if (uint_array(s, "data_offsets", name, nlen, 0, offsets, &count) != 0) return -1;
                if (count != 2) {
                    st_json_fail(&s->j, ST_INVALID_TENSOR_ENTRY, at, "data_offsets must hold exactly 2 integers, found %llu", (unsigned long long)count);
                    tensor_is(s, name, nlen);
                    return -1;
                }
                have_offsets = 1;
            } else
                return entry_fail(s, ST_INVALID_TENSOR_ENTRY, key_at, name, nlen,
                                  "unknown field in a tensor entry (allowed: dtype, shape, data_offsets)");
            int more = st_json_next_or_close(&s->j, '}');
            if (more < 0) return -1;
            if (!more) break;
        }
    if (dtype < 0) return entry_fail(s, ST_INVALID_TENSOR_ENTRY, entry_at, name, nlen, "missing field dtype");
    if (!have_shape) return entry_fail(s, ST_INVALID_TENSOR_ENTRY, entry_at, name, nlen, "missing field shape");
    if (!have_offsets) return entry_fail(s, ST_INVALID_TENSOR_ENTRY, entry_at, name, nlen, "missing field data_offsets");
    t->dtype[idx] = (uint8_t)dtype;
    t->begin[idx] = offsets[0];
    t->end[idx] = offsets[1];
    t->shape_start[idx] = dims_start;
    t->count = idx + 1;
    return 0;
}

/* ---------------------------------------------------------------- __metadata__ */

static void meta_name_of(const void *ctx, uint32_t k, const uint8_t **name, size_t *len) {
    const st_table *t = ctx;
    *name = t->meta_bytes + t->meta_start[2 * k];
    *len = t->meta_start[2 * k + 1] - t->meta_start[2 * k];
}

static int push_meta_string(scanner *s) {
    st_table *t = s->t;
    uint32_t slots = 2 * t->meta_count + 2;
    if (slots + 1 > t->meta_cap) {
        uint32_t c = t->meta_cap ? t->meta_cap * 2 : 16;
        while (c < slots + 1) c *= 2;
        uint32_t *m = realloc(t->meta_start, c * sizeof(uint32_t));
        if (!m) return oom(s);
        t->meta_start = m;
        t->meta_cap = c;
    }
    return st_json_string_onto(&s->j, &t->meta_bytes, &t->meta_bytes_cap, &t->meta_length);
}

static int scan_metadata(scanner *s) {
    static const uint8_t META[] = "__metadata__";
    st_table *t = s->t;
    int c = st_json_peek(&s->j);
    if (c == 'n') {
        if (s->j.p + 4 <= s->j.n && s->j.b[s->j.p + 1] == 'u' && s->j.b[s->j.p + 2] == 'l' && s->j.b[s->j.p + 3] == 'l') {
            s->j.p += 4;
            t->has_metadata = 0;
            t->meta_count = 0;
            t->meta_length = 0;
            return 0;
        }
        return st_json_fail(&s->j, ST_INVALID_JSON, s->j.p, "invalid literal (expected null)");
    }
    if (c != '{') {
        if (st_json_is_value_start(c))
            return entry_fail(s, ST_INVALID_METADATA, s->j.p, META, 12, "__metadata__ must be an object of strings (or null)");
        return st_json_expected(&s->j, "a value");
    }
    s->j.p++;
    st_json_skip_ws(&s->j);
    t->has_metadata = 1;
    t->meta_count = 0;
    t->meta_length = 0;
    if (!t->meta_start) {
        t->meta_start = malloc(16 * sizeof(uint32_t));
        if (!t->meta_start) return oom(s);
        t->meta_cap = 16;
    }
    t->meta_start[0] = 0;
    st_hash_free(s->meta_keys);
    s->meta_keys = st_hash_new(8, meta_name_of, t);
    if (!s->meta_keys) return oom(s);
    if (st_json_peek(&s->j) == '}') {
        s->j.p++;
        return 0;
    }
    for (;;) {
        if (st_json_peek(&s->j) != '"') return st_json_expected(&s->j, "a string key");
        size_t key_at = s->j.p;
        if (push_meta_string(s) != 0) return -1;
        uint32_t k = t->meta_count;
        t->meta_start[2 * k + 1] = (uint32_t)t->meta_length;
        const uint8_t *key = t->meta_bytes + t->meta_start[2 * k];
        size_t klen = t->meta_length - t->meta_start[2 * k];
        uint32_t prev = st_hash_insert(s->meta_keys, key, klen, st_hash_bytes(key, klen), k);
        if (prev == UINT32_MAX - 1) return oom(s);
        if (prev != UINT32_MAX) return entry_fail(s, ST_DUPLICATE_KEY, key_at, META, 12, "duplicate key in __metadata__");
        st_json_skip_ws(&s->j);
        if (st_json_peek(&s->j) != ':') return st_json_expected(&s->j, "':'");
        s->j.p++;
        st_json_skip_ws(&s->j);
        int v = st_json_peek(&s->j);
        if (v != '"') {
            if (st_json_is_value_start(v)) return entry_fail(s, ST_INVALID_METADATA, s->j.p, META, 12, "__metadata__ values must be strings");
            return st_json_expected(&s->j, "a value");
        }
        /* the key may not be in the hash twice; meta_count counts the key now */
        t->meta_count = k + 1;
        if (push_meta_string(s) != 0) return -1;
        t->meta_start[2 * k + 2] = (uint32_t)t->meta_length;
        int more = st_json_next_or_close(&s->j, '}');
        if (more < 0) return -1;
        if (!more) return 0;
    }
}

/* ---------------------------------------------------------------- the header object */

static void table_name_of(const void *ctx, uint32_t i, const uint8_t **name, size_t *len) {
    const st_table *t = ctx;
    *name = t->name_bytes + t->name_start[i];
    *len = t->name_start[i + 1] - t->name_start[i];
}

static int scan_object(scanner *s) {
    st_table *t = s->t;
    st_bytes key = {0}, val = {0};
    int seen_metadata = 0, rc = -1;
    st_json_skip_ws(&s->j);
    int c = st_json_peek(&s->j);
    if (c != '{') {
        if (c == 0xef && s->j.p + 2 < s->j.n && s->j.b[s->j.p + 1] == 0xbb && s->j.b[s->j.p + 2] == 0xbf) {
            st_json_fail(&s->j, ST_INVALID_JSON, s->j.p, "a UTF-8 byte order mark precedes the header JSON");
            goto done;
        }
        if (st_json_is_value_start(c)) {
            st_json_fail(&s->j, ST_INVALID_HEADER, s->j.p, "the header must be a JSON object");
            goto done;
        }
        st_json_expected(&s->j, "'{'");
        goto done;
    }
    s->j.p++;
    st_json_skip_ws(&s->j);
    t->name_start[0] = 0;
    if (st_json_peek(&s->j) == '}')
        s->j.p++;
    else
        for (;;) {
            if (st_json_peek(&s->j) != '"') {
                st_json_expected(&s->j, "a string key");
                goto done;
            }
            size_t key_at = s->j.p;
            if (grow_entries(t) != 0) {
                oom(s);
                goto done;
            }
            /* Decode the key straight into the string table as name `count`. */
            size_t before = t->name_length;
            if (st_json_string_onto(&s->j, &t->name_bytes, &t->name_cap, &t->name_length) != 0) goto done;
            const uint8_t *k = t->name_bytes + before;
            size_t klen = t->name_length - before;
            st_json_skip_ws(&s->j);
            if (st_json_peek(&s->j) != ':') {
                st_json_expected(&s->j, "':'");
                goto done;
            }
            s->j.p++;
            st_json_skip_ws(&s->j);
            if (klen == 12 && memcmp(k, "__metadata__", 12) == 0) {
                t->name_length = before;
                if (seen_metadata) {
                    entry_fail(s, ST_DUPLICATE_KEY, key_at, (const uint8_t *)"__metadata__", 12, "duplicate __metadata__");
                    goto done;
                }
                seen_metadata = 1;
                if (scan_metadata(s) != 0) goto done;
            } else {
                t->name_start[t->count + 1] = (uint32_t)t->name_length;
                uint64_t hk = st_hash_bytes(k, klen);
                uint32_t prev = st_hash_insert(t->names, k, klen, hk, t->count);
                if (prev == UINT32_MAX - 1) {
                    oom(s);
                    goto done;
                }
                if (prev != UINT32_MAX) {
                    entry_fail(s, ST_DUPLICATE_KEY, key_at, k, klen, "duplicate tensor name");
                    goto done;
                }
                if (scan_entry(s, &key, &val) != 0) goto done;
            }
            int more = st_json_next_or_close(&s->j, '}');
            if (more < 0) goto done;
            if (!more) break;
        }
    st_json_skip_ws(&s->j);
    if (s->j.p != s->j.n) {
        char d[32];
        st_json_describe_byte(s->j.b[s->j.p], d, sizeof d);
        st_json_fail(&s->j, ST_INVALID_JSON, s->j.p, "trailing %s after the header object", d);
        goto done;
    }
    rc = 0;
done:
    free(key.buf);
    free(val.buf);
    return rc;
}

/* ---------------------------------------------------------------- entry points */

int64_t st_header_length(const uint8_t *prefix, size_t prefix_len, uint64_t file_size, st_error *e) {
    if (file_size < 8 || prefix_len < 8) {
        st_fail(e, ST_HEADER_TOO_SMALL, -1, "the file has %llu bytes, fewer than the 8-byte header length",
                (unsigned long long)file_size);
        return -1;
    }
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = (n << 8) | prefix[i];
    if (n > ST_MAX_HEADER_LENGTH) {
        st_fail(e, ST_HEADER_TOO_LARGE, -1, "header length %llu exceeds %llu bytes", (unsigned long long)n,
                (unsigned long long)ST_MAX_HEADER_LENGTH);
        return -1;
    }
    if (8 + n > file_size) {
        st_fail(e, ST_INVALID_HEADER_LENGTH, -1, "header length %llu runs past the end of the %llu-byte file",
                (unsigned long long)n, (unsigned long long)file_size);
        return -1;
    }
    return (int64_t)n;
}

void st_table_free(st_table *t) {
    if (!t->in_arena) {
        free(t->dtype);
        free(t->begin);
        free(t->end);
        free(t->shape_start);
        free(t->dims);
        free(t->name_start);
        free(t->name_bytes);
        free(t->layer);
        free(t->expert);
        free(t->kind);
    }
    free(t->meta_start);
    free(t->meta_bytes);
    st_hash_free(t->names);
    memset(t, 0, sizeof *t);
}

/* ---------------------------------------------------------------- scratch columns */

/*
 * Parses reuse the same scratch columns header after header: their pages are faulted in once
 * per set, not once per shard and open. A parsed table is then copied at its
 * exact size into the checkpoint's arena (huge pages, see st_arena.c). Scratch sized for a
 * header above SCRATCH_KEEP bytes is dropped after that header (K3's are 0.8 MB: ~1.3 MB of
 * scratch per set, one set per thread parsing at the same time).
 */
#define SCRATCH_KEEP (4u << 20)

typedef struct {
    uint8_t *dtype;
    double *begin, *end, *dims;
    uint32_t *shape_start, *name_start;
    uint8_t *name_bytes;
    uint32_t cap, dims_cap;
    size_t name_cap;
    st_hash *names;
    size_t sized_for; /* the header length the buffers were last sized for */
} scratch_columns;

/* Scratch sets shared by the process: a parse claims a free one for the duration of one header
   (the lowest free first, so 2 parse threads keep reusing 2 sets). Not thread-local storage: an
   addon can be unloaded before a worker thread exits, and a thread-exit destructor would then
   run unloaded code. With more parses at once than sets, the extra ones use a temporary set. */
enum { SCRATCH_SETS = 16 };
static scratch_columns scratch_sets[SCRATCH_SETS];
static atomic_int scratch_busy[SCRATCH_SETS];

static void scratch_drop(scratch_columns *x);

static scratch_columns *scratch_claim(void) {
    for (int i = 0; i < SCRATCH_SETS; i++) {
        int idle = 0;
        if (atomic_compare_exchange_strong(&scratch_busy[i], &idle, 1)) return &scratch_sets[i];
    }
    return calloc(1, sizeof(scratch_columns));
}

static void scratch_release(scratch_columns *x) {
    if (x >= scratch_sets && x < scratch_sets + SCRATCH_SETS) {
        if (x->sized_for > SCRATCH_KEEP) scratch_drop(x);
        atomic_store(&scratch_busy[x - scratch_sets], 0);
    } else {
        scratch_drop(x);
        free(x);
    }
}

static void scratch_drop(scratch_columns *x) {
    free(x->dtype);
    free(x->begin);
    free(x->end);
    free(x->dims);
    free(x->shape_start);
    free(x->name_start);
    free(x->name_bytes);
    st_hash_free(x->names);
    memset(x, 0, sizeof *x);
}

static void table_name_of(const void *ctx, uint32_t i, const uint8_t **name, size_t *len);

/* Sizes the scratch for an n-byte header (~100 header bytes per tensor in real checkpoints,
   names about half the bytes, ~3 dims per tensor; the name hash ~128 bytes per name, since it
   is zeroed per header) and lends it to t. */
static int scratch_lend(scratch_columns *x, size_t n, st_table *t) {
    uint32_t guess = (uint32_t)(n / 96 + 16);
    if (x->cap < guess || x->name_cap < n / 2 + 64 || x->dims_cap < guess * 3) {
        st_hash *names = x->names;
        x->names = NULL;
        scratch_drop(x);
        x->names = names;
        x->cap = guess;
        x->dims_cap = guess * 3;
        x->name_cap = n / 2 + 64;
        x->dtype = malloc(guess);
        x->begin = malloc(guess * sizeof(double));
        x->end = malloc(guess * sizeof(double));
        x->shape_start = malloc((guess + 1) * sizeof(uint32_t));
        x->name_start = malloc((guess + 1) * sizeof(uint32_t));
        x->name_bytes = malloc(x->name_cap);
        x->dims = malloc(x->dims_cap * sizeof(double));
    }
    uint32_t expected = (uint32_t)(n / 128 + 16);
    if (!x->names) x->names = st_hash_new(expected, table_name_of, t);
    else if (st_hash_reset(x->names, expected) != 0) {
        st_hash_free(x->names);
        x->names = NULL;
    }
    if (!x->dtype || !x->begin || !x->end || !x->shape_start || !x->name_start || !x->name_bytes || !x->dims || !x->names) {
        scratch_drop(x);
        return -1;
    }
    x->sized_for = n;
    st_hash_set_ctx(x->names, t);
    t->dtype = x->dtype;
    t->begin = x->begin;
    t->end = x->end;
    t->shape_start = x->shape_start;
    t->name_start = x->name_start;
    t->name_bytes = x->name_bytes;
    t->dims = x->dims;
    t->cap = x->cap;
    t->dims_cap = x->dims_cap;
    t->name_cap = x->name_cap;
    t->names = x->names;
    return 0;
}

/* Takes the (possibly regrown) buffers back from t, whose column pointers are cleared. */
static void scratch_reclaim(scratch_columns *x, st_table *t) {
    x->dtype = t->dtype;
    x->begin = t->begin;
    x->end = t->end;
    x->shape_start = t->shape_start;
    x->name_start = t->name_start;
    x->name_bytes = t->name_bytes;
    x->dims = t->dims;
    x->cap = t->cap;
    x->dims_cap = t->dims_cap;
    x->name_cap = t->name_cap;
    x->names = t->names;
    t->dtype = NULL;
    t->begin = t->end = t->dims = NULL;
    t->shape_start = t->name_start = NULL;
    t->name_bytes = NULL;
    t->names = NULL;
    t->cap = t->dims_cap = 0;
    t->name_cap = 0;
}

/* `bytes` of fresh memory from the arena, or from malloc when there is none. */
static void *place(st_arena *arena, size_t bytes) {
    return arena ? st_arena_alloc(arena, bytes ? bytes : 1) : malloc(bytes ? bytes : 1);
}

static void *place_copy(st_arena *arena, const void *from, size_t bytes) {
    void *p = place(arena, bytes);
    if (p && bytes) memcpy(p, from, bytes);
    return p;
}

/* Copies the scratch columns of a parsed table to their final home at their exact size, and
   fills the grouping columns (layer, expert, kind) there. */
static int finalize(st_table *t, const scratch_columns *x, st_arena *arena) {
    uint32_t count = t->count;
    t->in_arena = arena != NULL;
    t->dtype = place_copy(arena, x->dtype, count);
    t->begin = place_copy(arena, x->begin, count * sizeof(double));
    t->end = place_copy(arena, x->end, count * sizeof(double));
    t->shape_start = place_copy(arena, x->shape_start, (count + 1) * sizeof(uint32_t));
    t->name_start = place_copy(arena, x->name_start, (count + 1) * sizeof(uint32_t));
    t->name_bytes = place_copy(arena, x->name_bytes, t->name_length);
    t->dims = place_copy(arena, x->dims, t->n_dims * sizeof(double));
    t->layer = place(arena, (count + 1) * sizeof(int32_t));
    t->expert = place(arena, (count + 1) * sizeof(int32_t));
    t->kind = place(arena, count + 1);
    t->names = st_hash_copy(x->names, arena, t);
    t->cap = count;
    t->dims_cap = t->n_dims;
    t->name_cap = t->name_length;
    if (!t->dtype || !t->begin || !t->end || !t->shape_start || !t->name_start || !t->name_bytes || !t->dims || !t->layer ||
        !t->expert || !t->kind || !t->names)
        return -1;
    for (uint32_t i = 0; i < count; i++)
        st_classify(t->name_bytes + t->name_start[i], t->name_start[i + 1] - t->name_start[i], &t->layer[i], &t->expert[i],
                    &t->kind[i]);
    return 0;
}

/* ---------------------------------------------------------------- entry point */

int st_parse_header(const uint8_t *header, size_t n, uint64_t file_size, st_arena *arena, st_table *t, st_error *e) {
    memset(t, 0, sizeof *t);
    t->header_length = n;
    t->file_size = file_size;
    int64_t bad = st_utf8_first_invalid(header, n);
    if (bad >= 0) return st_fail(e, ST_INVALID_UTF8, bad, "the header is not valid UTF-8"), -1;
    scratch_columns *x = scratch_claim();
    if (!x) return st_fail(e, ST_OUT_OF_MEMORY, -1, "out of memory while parsing the header"), -1;
    if (scratch_lend(x, n, t) != 0) {
        scratch_release(x);
        return st_fail(e, ST_OUT_OF_MEMORY, -1, "out of memory while parsing the header"), -1;
    }
    t->name_start[0] = 0;
    scanner s = {{header, n, 0, e, "header"}, t, NULL};
    int rc = scan_object(&s);
    st_hash_free(s.meta_keys);
    if (rc == 0) {
        t->shape_start[t->count] = t->n_dims;
        rc = st_validate_layout(t, e);
    }
    scratch_reclaim(x, t);
    if (rc == 0 && finalize(t, x, arena) != 0) rc = (st_fail(e, ST_OUT_OF_MEMORY, -1, "out of memory while parsing the header"), -1);
    scratch_release(x);
    return rc;
}
