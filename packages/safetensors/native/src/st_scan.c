/*
 * st_scan.c: the strict single-pass scanner for safetensors headers. It is a line-by-line
 * mirror of src/scan.ts (same checks, same order, same messages): the top level is an object of
 * tensor entries {dtype, shape, data_offsets} plus an optional __metadata__ (object of strings,
 * or null). No recursion: the schema has a fixed depth, so hostile nesting cannot hurt.
 * Names are decoded straight into the table's string table; integers must be <= 2^53-1.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "k3_safetensors.h"
#include "st_swar.h"

typedef struct {
    const uint8_t *b;
    size_t n, p;
    st_error *e;
    st_table *t;
    st_hash *meta_keys;
} scanner;

/* ---------------------------------------------------------------- growth */

static int grow_bytes(uint8_t **buf, size_t *cap, size_t need) {
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap : 256;
    while (c < need) c *= 2;
    uint8_t *nb = realloc(*buf, c);
    if (!nb) return -1;
    *buf = nb;
    *cap = c;
    return 0;
}

static int grow_entries(st_table *t) {
    if (t->count + 2 <= t->cap) return 0;
    uint32_t c = t->cap ? t->cap * 2 : 64;
    uint64_t *hashes = realloc(t->hashes, c * sizeof(uint64_t));
    if (!hashes) return -1;
    t->hashes = hashes;
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

/* ---------------------------------------------------------------- messages */

static void describe_byte(int c, char *out, size_t cap) {
    if (c < 0) snprintf(out, cap, "the end of the header");
    else if (c >= 0x21 && c <= 0x7e) snprintf(out, cap, "'%c'", c);
    else snprintf(out, cap, "byte 0x%02x", c);
}

static int fail(scanner *s, st_code code, size_t pos, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int fail(scanner *s, st_code code, size_t pos, const char *fmt, ...) {
    if (s->e->code != ST_OK) return -1;
    s->e->code = code;
    s->e->position = (int64_t)pos;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->e->detail, sizeof s->e->detail, fmt, ap);
    va_end(ap);
    return -1;
}

static void tensor_is(scanner *s, const uint8_t *name, size_t len) { st_error_set_tensor(s->e, name, len); }

static int oom(scanner *s) { return fail(s, ST_OUT_OF_MEMORY, s->p, "out of memory while parsing the header"); }

/* ---------------------------------------------------------------- tokens */

static int peek(const scanner *s) { return s->p < s->n ? s->b[s->p] : -1; }

static void skip_ws(scanner *s) {
    while (s->p < s->n) {
        uint8_t c = s->b[s->p];
        if (c != ' ' && c != '\n' && c != '\r' && c != '\t') break;
        s->p++;
    }
}

static int is_value_start(int c) {
    return c == '{' || c == '[' || c == '"' || c == '-' || (c >= '0' && c <= '9') || c == 't' || c == 'f' || c == 'n';
}

static int expected(scanner *s, const char *what) {
    int c = peek(s);
    if (c < 0) return fail(s, ST_INVALID_JSON, s->p, "unexpected end of the header JSON (expected %s)", what);
    char found[32];
    describe_byte(c, found, sizeof found);
    return fail(s, ST_INVALID_JSON, s->p, "expected %s, found %s", what, found);
}

static int hex4(scanner *s, size_t at, size_t esc_at, uint32_t *out) {
    if (at + 4 > s->n) return fail(s, ST_INVALID_JSON, esc_at, "invalid \\u escape: needs 4 hex digits");
    uint32_t v = 0;
    for (int k = 0; k < 4; k++) {
        uint8_t c = s->b[at + k];
        uint32_t d;
        if (c >= '0' && c <= '9') d = c - '0';
        else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
        else return fail(s, ST_INVALID_JSON, esc_at, "invalid \\u escape: needs 4 hex digits");
        v = v * 16 + d;
    }
    *out = v;
    return 0;
}

static void put_utf8(uint8_t *o, size_t *len, uint32_t cp) {
    if (cp < 0x80) o[(*len)++] = (uint8_t)cp;
    else if (cp < 0x800) {
        o[(*len)++] = (uint8_t)(0xc0 | (cp >> 6));
        o[(*len)++] = (uint8_t)(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
        o[(*len)++] = (uint8_t)(0xe0 | (cp >> 12));
        o[(*len)++] = (uint8_t)(0x80 | ((cp >> 6) & 0x3f));
        o[(*len)++] = (uint8_t)(0x80 | (cp & 0x3f));
    } else {
        o[(*len)++] = (uint8_t)(0xf0 | (cp >> 18));
        o[(*len)++] = (uint8_t)(0x80 | ((cp >> 12) & 0x3f));
        o[(*len)++] = (uint8_t)(0x80 | ((cp >> 6) & 0x3f));
        o[(*len)++] = (uint8_t)(0x80 | (cp & 0x3f));
    }
}

/*
 * The JSON string at p (p at the quote), decoded and appended to *buf at *len (growing it).
 * Decoding never makes a string longer than its JSON text, so the growth is bounded by N.
 */
static int string_into(scanner *s, uint8_t **buf, size_t *cap, size_t *len) {
    const uint8_t *b = s->b;
    size_t n = s->n, p = s->p + 1, start = p;
    p = st_plain_string_end(b, p, n);
    if (p < n && b[p] == '"') {
        if (grow_bytes(buf, cap, *len + (p - start)) != 0) return oom(s);
        memcpy(*buf + *len, b + start, p - start);
        *len += p - start;
        s->p = p + 1;
        return 0;
    }
    /* Escapes: the decoded text is never longer than the rest of the JSON. */
    if (grow_bytes(buf, cap, *len + (n - start) + 4) != 0) return oom(s);
    memcpy(*buf + *len, b + start, p - start);
    *len += p - start;
    size_t run = p;
    for (;;) {
        if (p >= n) {
            s->p = p;
            return fail(s, ST_INVALID_JSON, p, "unexpected end of the header JSON inside a string");
        }
        uint8_t c = b[p];
        if (c == '"') {
            memcpy(*buf + *len, b + run, p - run);
            *len += p - run;
            s->p = p + 1;
            return 0;
        }
        if (c < 0x20) {
            char d[32];
            describe_byte(c, d, sizeof d);
            return fail(s, ST_INVALID_JSON, p, "control character %s inside a string", d);
        }
        if (c != '\\') {
            p++;
            continue;
        }
        memcpy(*buf + *len, b + run, p - run);
        *len += p - run;
        size_t esc_at = p;
        if (p + 1 >= n) {
            s->p = p + 1;
            return fail(s, ST_INVALID_JSON, p + 1, "unexpected end of the header JSON inside a string");
        }
        uint8_t e = b[p + 1];
        p += 2;
        uint8_t *o = *buf;
        switch (e) {
        case '"': o[(*len)++] = '"'; break;
        case '\\': o[(*len)++] = '\\'; break;
        case '/': o[(*len)++] = '/'; break;
        case 'b': o[(*len)++] = '\b'; break;
        case 'f': o[(*len)++] = '\f'; break;
        case 'n': o[(*len)++] = '\n'; break;
        case 'r': o[(*len)++] = '\r'; break;
        case 't': o[(*len)++] = '\t'; break;
        case 'u': {
            uint32_t u, lo;
            if (hex4(s, p, esc_at, &u) != 0) return -1;
            p += 4;
            if (u >= 0xdc00 && u <= 0xdfff) return fail(s, ST_INVALID_JSON, esc_at, "lone low surrogate in a \\u escape");
            if (u >= 0xd800 && u <= 0xdbff) {
                if (p + 1 < n && b[p] == '\\' && b[p + 1] == 'u') {
                    if (hex4(s, p + 2, p, &lo) != 0) return -1;
                    if (lo < 0xdc00 || lo > 0xdfff) return fail(s, ST_INVALID_JSON, esc_at, "lone high surrogate in a \\u escape");
                    p += 6;
                    put_utf8(o, len, 0x10000 + ((u - 0xd800) << 10) + (lo - 0xdc00));
                } else
                    return fail(s, ST_INVALID_JSON, esc_at, "lone high surrogate in a \\u escape");
            } else
                put_utf8(o, len, u);
            break;
        }
        default: {
            char d[32];
            describe_byte(e, d, sizeof d);
            return fail(s, ST_INVALID_JSON, esc_at, "invalid escape %s in a string", d);
        }
        }
        run = p;
    }
}

/* A string decoded into a scratch buffer (reused). */
typedef struct {
    uint8_t *buf;
    size_t cap, len;
} scratch;

static int string_scratch(scanner *s, scratch *x) {
    x->len = 0;
    return string_into(s, &x->buf, &x->cap, &x->len);
}

/* A number that must be a non-negative integer <= 2^53-1. */
static int uint_value(scanner *s, const char *what, const uint8_t *tname, size_t tlen, double *out) {
    const uint8_t *b = s->b;
    size_t n = s->n, start = s->p, p = start;
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
        s->p = p;
        if (p < n) {
            char d[32];
            describe_byte(b[p], d, sizeof d);
            return fail(s, ST_INVALID_JSON, p, "invalid number, found %s", d);
        }
        return fail(s, ST_INVALID_JSON, p, "unexpected end of the header JSON inside a number");
    }
    int fraction = 0;
    if (p < n && b[p] == '.') {
        fraction = 1;
        p++;
        if (!(p < n && b[p] >= '0' && b[p] <= '9')) {
            s->p = p;
            return fail(s, ST_INVALID_JSON, p, "invalid number: no digit after '.'");
        }
        while (p < n && b[p] >= '0' && b[p] <= '9') p++;
    }
    if (p < n && (b[p] == 'e' || b[p] == 'E')) {
        fraction = 1;
        p++;
        if (p < n && (b[p] == '+' || b[p] == '-')) p++;
        if (!(p < n && b[p] >= '0' && b[p] <= '9')) {
            s->p = p;
            return fail(s, ST_INVALID_JSON, p, "invalid number: no digit in the exponent");
        }
        while (p < n && b[p] >= '0' && b[p] <= '9') p++;
    }
    s->p = p;
    if (negative || fraction) {
        fail(s, ST_INVALID_TENSOR_ENTRY, start, "%s must hold non-negative integers", what);
        tensor_is(s, tname, tlen);
        return -1;
    }
    if (overflow) {
        fail(s, ST_VALIDATION_OVERFLOW, start, "%s holds an integer above 2^53-1", what);
        tensor_is(s, tname, tlen);
        return -1;
    }
    *out = (double)value;
    return 0;
}

/* [uint, ...]: shape values go to the dims column (dims=1), offsets to out2 (first 2 kept). */
static int uint_array(scanner *s, const char *what, const uint8_t *tname, size_t tlen, int dims, double *out2,
                      uint64_t *count_out) {
    int c = peek(s);
    if (c != '[') {
        if (is_value_start(c)) {
            fail(s, ST_INVALID_TENSOR_ENTRY, s->p, "%s must be an array of non-negative integers", what);
            tensor_is(s, tname, tlen);
            return -1;
        }
        return expected(s, "a value");
    }
    s->p++;
    skip_ws(s);
    uint64_t count = 0;
    if (peek(s) == ']') {
        s->p++;
        *count_out = 0;
        return 0;
    }
    for (;;) {
        int d = peek(s);
        if (d != '-' && !(d >= '0' && d <= '9')) {
            if (is_value_start(d)) {
                fail(s, ST_INVALID_TENSOR_ENTRY, s->p, "%s must hold non-negative integers", what);
                tensor_is(s, tname, tlen);
                return -1;
            }
            return expected(s, "a value");
        }
        double v = 0;
        if (uint_value(s, what, tname, tlen, &v) != 0) return -1;
        if (dims) {
            if (push_dim(s->t, v) != 0) return oom(s);
        } else if (count < 2)
            out2[count] = v;
        count++;
        skip_ws(s);
        int e = peek(s);
        if (e == ',') {
            s->p++;
            skip_ws(s);
            continue;
        }
        if (e == ']') {
            s->p++;
            *count_out = count;
            return 0;
        }
        return expected(s, "',' or ']'");
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

static int key_is(const scratch *k, const char *word) {
    size_t n = strlen(word);
    return k->len == n && memcmp(k->buf, word, n) == 0;
}

static int entry_fail(scanner *s, st_code code, size_t pos, const uint8_t *name, size_t len, const char *msg) {
    fail(s, code, pos, "%s", msg);
    tensor_is(s, name, len);
    return -1;
}

/* The tensor entry at p; its name is already name `idx` of the string table. */
static int scan_entry(scanner *s, scratch *key, scratch *val) {
    st_table *t = s->t;
    uint32_t idx = t->count;
    const uint8_t *name = t->name_bytes + t->name_start[idx];
    size_t nlen = t->name_start[idx + 1] - t->name_start[idx];
    int c = peek(s);
    if (c != '{') {
        if (is_value_start(c))
            return entry_fail(s, ST_INVALID_TENSOR_ENTRY, s->p, name, nlen,
                              "a tensor entry must be an object with dtype, shape and data_offsets");
        return expected(s, "a value");
    }
    size_t entry_at = s->p;
    s->p++;
    skip_ws(s);
    int dtype = -1, have_shape = 0, have_offsets = 0;
    double offsets[2] = {0, 0};
    uint32_t dims_start = t->n_dims;
    if (peek(s) == '}')
        s->p++;
    else
        for (;;) {
            if (peek(s) != '"') return expected(s, "a string key");
            size_t key_at = s->p;
            if (string_scratch(s, key) != 0) return -1;
            /* string_into may have grown the name table? no: keys go to scratch. */
            skip_ws(s);
            if (peek(s) != ':') return expected(s, "':'");
            s->p++;
            skip_ws(s);
            if (key_is(key, "dtype")) {
                if (dtype >= 0) return entry_fail(s, ST_DUPLICATE_KEY, key_at, name, nlen, "duplicate field dtype in a tensor entry");
                int v = peek(s);
                if (v != '"') {
                    if (is_value_start(v)) return entry_fail(s, ST_INVALID_TENSOR_ENTRY, s->p, name, nlen, "dtype must be a string");
                    return expected(s, "a value");
                }
                size_t at = s->p;
                if (string_scratch(s, val) != 0) return -1;
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
                size_t at = s->p;
                uint64_t count;
                if (uint_array(s, "data_offsets", name, nlen, 0, offsets, &count) != 0) return -1;
                if (count != 2) {
                    fail(s, ST_INVALID_TENSOR_ENTRY, at, "data_offsets must hold exactly 2 integers, found %llu", (unsigned long long)count);
                    tensor_is(s, name, nlen);
                    return -1;
                }
                have_offsets = 1;
            } else
                return entry_fail(s, ST_INVALID_TENSOR_ENTRY, key_at, name, nlen,
                                  "unknown field in a tensor entry (allowed: dtype, shape, data_offsets)");
            skip_ws(s);
            int e = peek(s);
            if (e == ',') {
                s->p++;
                skip_ws(s);
                continue;
            }
            if (e == '}') {
                s->p++;
                break;
            }
            return expected(s, "',' or '}'");
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
    return string_into(s, &t->meta_bytes, &t->meta_bytes_cap, &t->meta_length);
}

static int scan_metadata(scanner *s) {
    static const uint8_t META[] = "__metadata__";
    st_table *t = s->t;
    int c = peek(s);
    if (c == 'n') {
        if (s->p + 4 <= s->n && s->b[s->p + 1] == 'u' && s->b[s->p + 2] == 'l' && s->b[s->p + 3] == 'l') {
            s->p += 4;
            t->has_metadata = 0;
            t->meta_count = 0;
            t->meta_length = 0;
            return 0;
        }
        return fail(s, ST_INVALID_JSON, s->p, "invalid literal (expected null)");
    }
    if (c != '{') {
        if (is_value_start(c))
            return entry_fail(s, ST_INVALID_METADATA, s->p, META, 12, "__metadata__ must be an object of strings (or null)");
        return expected(s, "a value");
    }
    s->p++;
    skip_ws(s);
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
    if (peek(s) == '}') {
        s->p++;
        return 0;
    }
    for (;;) {
        if (peek(s) != '"') return expected(s, "a string key");
        size_t key_at = s->p;
        if (push_meta_string(s) != 0) return -1;
        uint32_t k = t->meta_count;
        t->meta_start[2 * k + 1] = (uint32_t)t->meta_length;
        const uint8_t *key = t->meta_bytes + t->meta_start[2 * k];
        size_t klen = t->meta_length - t->meta_start[2 * k];
        uint32_t prev = st_hash_insert(s->meta_keys, key, klen, st_hash_bytes(key, klen), k);
        if (prev == UINT32_MAX - 1) return oom(s);
        if (prev != UINT32_MAX) return entry_fail(s, ST_DUPLICATE_KEY, key_at, META, 12, "duplicate key in __metadata__");
        skip_ws(s);
        if (peek(s) != ':') return expected(s, "':'");
        s->p++;
        skip_ws(s);
        int v = peek(s);
        if (v != '"') {
            if (is_value_start(v)) return entry_fail(s, ST_INVALID_METADATA, s->p, META, 12, "__metadata__ values must be strings");
            return expected(s, "a value");
        }
        /* the key may not be in the hash twice; meta_count counts the key now */
        t->meta_count = k + 1;
        if (push_meta_string(s) != 0) return -1;
        t->meta_start[2 * k + 2] = (uint32_t)t->meta_length;
        skip_ws(s);
        int e = peek(s);
        if (e == ',') {
            s->p++;
            skip_ws(s);
            continue;
        }
        if (e == '}') {
            s->p++;
            return 0;
        }
        return expected(s, "',' or '}'");
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
    scratch key = {0}, val = {0};
    int seen_metadata = 0, rc = -1;
    skip_ws(s);
    int c = peek(s);
    if (c != '{') {
        if (c == 0xef && s->p + 2 < s->n && s->b[s->p + 1] == 0xbb && s->b[s->p + 2] == 0xbf) {
            fail(s, ST_INVALID_JSON, s->p, "a UTF-8 byte order mark precedes the header JSON");
            goto done;
        }
        if (is_value_start(c)) {
            fail(s, ST_INVALID_HEADER, s->p, "the header must be a JSON object");
            goto done;
        }
        expected(s, "'{'");
        goto done;
    }
    s->p++;
    skip_ws(s);
    t->name_start[0] = 0;
    if (peek(s) == '}')
        s->p++;
    else
        for (;;) {
            if (peek(s) != '"') {
                expected(s, "a string key");
                goto done;
            }
            size_t key_at = s->p;
            if (grow_entries(t) != 0) {
                oom(s);
                goto done;
            }
            /* Decode the key straight into the string table as name `count`. */
            size_t before = t->name_length;
            if (string_into(s, &t->name_bytes, &t->name_cap, &t->name_length) != 0) goto done;
            const uint8_t *k = t->name_bytes + before;
            size_t klen = t->name_length - before;
            skip_ws(s);
            if (peek(s) != ':') {
                expected(s, "':'");
                goto done;
            }
            s->p++;
            skip_ws(s);
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
                t->hashes[t->count] = hk;
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
            skip_ws(s);
            int e = peek(s);
            if (e == ',') {
                s->p++;
                skip_ws(s);
                continue;
            }
            if (e == '}') {
                s->p++;
                break;
            }
            expected(s, "',' or '}'");
            goto done;
        }
    skip_ws(s);
    if (s->p != s->n) {
        char d[32];
        describe_byte(s->b[s->p], d, sizeof d);
        fail(s, ST_INVALID_JSON, s->p, "trailing %s after the header object", d);
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
    free(t->meta_start);
    free(t->meta_bytes);
    free(t->hashes);
    st_hash_free(t->names);
    memset(t, 0, sizeof *t);
}

int st_parse_header(const uint8_t *header, size_t n, uint64_t file_size, st_table *t, st_error *e) {
    memset(t, 0, sizeof *t);
    t->header_length = n;
    t->file_size = file_size;
    int64_t bad = st_utf8_first_invalid(header, n);
    if (bad >= 0) return st_fail(e, ST_INVALID_UTF8, bad, "the header is not valid UTF-8"), -1;
    /* ~100 header bytes per tensor in real checkpoints: size the columns once. */
    uint32_t guess = (uint32_t)(n / 96 + 16);
    t->cap = guess;
    t->dtype = malloc(guess);
    t->begin = malloc(guess * sizeof(double));
    t->end = malloc(guess * sizeof(double));
    t->shape_start = malloc((guess + 1) * sizeof(uint32_t));
    t->name_start = malloc((guess + 1) * sizeof(uint32_t));
    t->hashes = malloc(guess * sizeof(uint64_t));
    /* names take about half of a real header; shapes about 3 dims per tensor */
    t->name_cap = n / 2 + 64;
    t->name_bytes = malloc(t->name_cap);
    t->dims_cap = guess * 3;
    t->dims = malloc(t->dims_cap * sizeof(double));
    if (!t->hashes || !t->name_bytes || !t->dims)
        return st_fail(e, ST_OUT_OF_MEMORY, -1, "out of memory while parsing the header"), -1;
    /* The name hash gets its own, smaller estimate (~128 header bytes per name; K3 has ~150):
       it is zeroed up front, so an oversized table costs page faults on every open, while an
       undersized one only grows (rehashes) once. */
    t->names = st_hash_new((uint32_t)(n / 128 + 16), table_name_of, t);
    if (!t->dtype || !t->begin || !t->end || !t->shape_start || !t->name_start || !t->names)
        return st_fail(e, ST_OUT_OF_MEMORY, -1, "out of memory while parsing the header"), -1;
    t->name_start[0] = 0;
    scanner s = {header, n, 0, e, t, NULL};
    int rc = scan_object(&s);
    st_hash_free(s.meta_keys);
    if (rc != 0) return -1;
    t->shape_start[t->count] = t->n_dims;
    if (st_validate_layout(t, e) != 0) return -1;
    t->layer = malloc((t->count + 1) * sizeof(int32_t));
    t->expert = malloc((t->count + 1) * sizeof(int32_t));
    t->kind = malloc(t->count + 1);
    if (!t->layer || !t->expert || !t->kind)
        return st_fail(e, ST_OUT_OF_MEMORY, -1, "out of memory while parsing the header"), -1;
    for (uint32_t i = 0; i < t->count; i++)
        st_classify(t->name_bytes + t->name_start[i], t->name_start[i + 1] - t->name_start[i], &t->layer[i],
                    &t->expert[i], &t->kind[i]);
    return 0;
}
