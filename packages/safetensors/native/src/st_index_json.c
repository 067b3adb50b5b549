/*
 * st_index_json.c: model.safetensors.index.json, mirroring src/index-json.ts: "weight_map" is
 * an object of tensor name -> shard file (names unique), "metadata" is kept as its raw JSON span
 * (object or null), other keys are skipped with full syntax checks and bounded nesting.
 */
#include <errno.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "k3_safetensors.h"
#include "st_swar.h"

typedef struct {
    const uint8_t *b;
    size_t n, p;
    st_error *e;
    uint8_t *scratch;
    size_t scratch_cap, scratch_len;
} ix_scanner;

static void describe_byte(int c, char *out, size_t cap) {
    if (c < 0) snprintf(out, cap, "the end of the header");
    else if (c >= 0x21 && c <= 0x7e) snprintf(out, cap, "'%c'", c);
    else snprintf(out, cap, "byte 0x%02x", c);
}

static int fail(ix_scanner *s, st_code code, size_t pos, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int fail(ix_scanner *s, st_code code, size_t pos, const char *fmt, ...) {
    if (s->e->code != ST_OK) return -1;
    s->e->code = code;
    s->e->position = (int64_t)pos;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->e->detail, sizeof s->e->detail, fmt, ap);
    va_end(ap);
    return -1;
}

static int peek(const ix_scanner *s) { return s->p < s->n ? s->b[s->p] : -1; }

static void skip_ws(ix_scanner *s) {
    while (s->p < s->n) {
        uint8_t c = s->b[s->p];
        if (c != ' ' && c != '\n' && c != '\r' && c != '\t') break;
        s->p++;
    }
}

static int is_value_start(int c) {
    return c == '{' || c == '[' || c == '"' || c == '-' || (c >= '0' && c <= '9') || c == 't' || c == 'f' || c == 'n';
}

static int expected(ix_scanner *s, const char *what) {
    int c = peek(s);
    if (c < 0) return fail(s, ST_INVALID_JSON, s->p, "unexpected end of the index JSON (expected %s)", what);
    char d[32];
    describe_byte(c, d, sizeof d);
    return fail(s, ST_INVALID_JSON, s->p, "expected %s, found %s", what, d);
}

static int grow(uint8_t **buf, size_t *cap, size_t need) {
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap : 256;
    while (c < need) c *= 2;
    uint8_t *nb = realloc(*buf, c);
    if (!nb) return -1;
    *buf = nb;
    *cap = c;
    return 0;
}

static int hex4(ix_scanner *s, size_t at, size_t esc_at, uint32_t *out) {
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

/* Decodes the string at p, appending to (*buf, *len). */
static int string_into(ix_scanner *s, uint8_t **buf, size_t *cap, size_t *len) {
    const uint8_t *b = s->b;
    size_t n = s->n, p = s->p + 1, start = p;
    p = st_plain_string_end(b, p, n);
    if (p < n && b[p] == '"') {
        if (grow(buf, cap, *len + (p - start)) != 0) return fail(s, ST_OUT_OF_MEMORY, p, "out of memory");
        memcpy(*buf + *len, b + start, p - start);
        *len += p - start;
        s->p = p + 1;
        return 0;
    }
    if (grow(buf, cap, *len + (n - start) + 4) != 0) return fail(s, ST_OUT_OF_MEMORY, p, "out of memory");
    memcpy(*buf + *len, b + start, p - start);
    *len += p - start;
    size_t run = p;
    for (;;) {
        if (p >= n) {
            s->p = p;
            return fail(s, ST_INVALID_JSON, p, "unexpected end of the index JSON inside a string");
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
            return fail(s, ST_INVALID_JSON, p + 1, "unexpected end of the index JSON inside a string");
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

static int skip_string(ix_scanner *s) {
    s->scratch_len = 0;
    return string_into(s, &s->scratch, &s->scratch_cap, &s->scratch_len);
}

static int digit_at(const ix_scanner *s, size_t p) { return p < s->n && s->b[p] >= '0' && s->b[p] <= '9'; }

static int number(ix_scanner *s) {
    size_t p = s->p;
    if (s->b[p] == '-') p++;
    if (p < s->n && s->b[p] == '0')
        p++;
    else if (p < s->n && s->b[p] >= '1' && s->b[p] <= '9')
        while (digit_at(s, p)) p++;
    else {
        s->p = p;
        return expected(s, "a digit");
    }
    if (p < s->n && s->b[p] == '.') {
        p++;
        if (!digit_at(s, p)) {
            s->p = p;
            return expected(s, "a digit");
        }
        while (digit_at(s, p)) p++;
    }
    if (p < s->n && (s->b[p] == 'e' || s->b[p] == 'E')) {
        p++;
        if (p < s->n && (s->b[p] == '+' || s->b[p] == '-')) p++;
        if (!digit_at(s, p)) {
            s->p = p;
            return expected(s, "a digit");
        }
        while (digit_at(s, p)) p++;
    }
    s->p = p;
    return 0;
}

static int literal(ix_scanner *s, const char *word) {
    size_t len = strlen(word);
    for (size_t k = 0; k < len; k++) {
        if (s->p + k >= s->n || s->b[s->p + k] != (uint8_t)word[k]) {
            s->p += k;
            char what[16];
            snprintf(what, sizeof what, "'%s'", word);
            return expected(s, what);
        }
    }
    s->p += len;
    return 0;
}

static int key_colon(ix_scanner *s) {
    if (peek(s) != '"') return expected(s, "a string key");
    if (skip_string(s) != 0) return -1;
    skip_ws(s);
    if (peek(s) != ':') return expected(s, "':'");
    s->p++;
    skip_ws(s);
    return 0;
}

/* Skips any value with an explicit stack of closers (no recursion). */
static int skip_value(ix_scanner *s) {
    uint8_t stack[ST_MAX_JSON_DEPTH];
    int depth = 0;
    for (;;) {
        int c = peek(s);
        if (c == '{' || c == '[') {
            if (depth >= ST_MAX_JSON_DEPTH) return fail(s, ST_INVALID_INDEX, s->p, "JSON nesting deeper than %d", ST_MAX_JSON_DEPTH);
            s->p++;
            skip_ws(s);
            uint8_t closer = c == '{' ? '}' : ']';
            if (peek(s) == closer)
                s->p++;
            else {
                stack[depth++] = closer;
                if (closer == '}' && key_colon(s) != 0) return -1;
                continue;
            }
        } else if (c == '"') {
            if (skip_string(s) != 0) return -1;
        } else if (c == '-' || (c >= '0' && c <= '9')) {
            if (number(s) != 0) return -1;
        } else if (c == 't') {
            if (literal(s, "true") != 0) return -1;
        } else if (c == 'f') {
            if (literal(s, "false") != 0) return -1;
        } else if (c == 'n') {
            if (literal(s, "null") != 0) return -1;
        } else
            return expected(s, "a value");
        for (;;) {
            if (depth == 0) return 0;
            skip_ws(s);
            uint8_t closer = stack[depth - 1];
            int d = peek(s);
            if (d == ',') {
                s->p++;
                skip_ws(s);
                if (closer == '}' && key_colon(s) != 0) return -1;
                break;
            }
            if (d == closer) {
                s->p++;
                depth--;
                continue;
            }
            return expected(s, closer == '}' ? "',' or '}'" : "',' or ']'");
        }
    }
}

/* ---------------------------------------------------------------- weight_map */

static void entry_name_of(const void *ctx, uint32_t i, const uint8_t **name, size_t *len) {
    st_index_name(ctx, i, name, len);
}

static void shard_name_of(const void *ctx, uint32_t i, const uint8_t **name, size_t *len) {
    const st_index *x = ctx;
    *name = x->shard_bytes + x->shard_start[i];
    *len = x->shard_start[i + 1] - x->shard_start[i];
}

static int oom(ix_scanner *s) { return fail(s, ST_OUT_OF_MEMORY, s->p, "out of memory while parsing the index"); }

static int scan_weight_map(ix_scanner *s, st_index *x, st_hash *names, st_hash *shards) {
    int v = peek(s);
    if (v != '{') {
        if (is_value_start(v)) return fail(s, ST_INVALID_INDEX, s->p, "weight_map must be an object of tensor name -> shard file");
        return expected(s, "a value");
    }
    s->p++;
    skip_ws(s);
    if (peek(s) == '}') {
        s->p++;
        return 0;
    }
    for (;;) {
        if (peek(s) != '"') return expected(s, "a string key");
        size_t name_at = s->p;
        if (x->count + 2 > x->cap) {
            uint32_t c = x->cap ? x->cap * 2 : 1024;
            uint64_t *no = realloc(x->name_off, c * sizeof(uint64_t));
            if (no) x->name_off = no;
            uint32_t *nl = realloc(x->name_len, c * sizeof(uint32_t));
            if (nl) x->name_len = nl;
            uint32_t *so = realloc(x->shard_of, c * sizeof(uint32_t));
            if (so) x->shard_of = so;
            uint64_t *hs = realloc(x->hashes, c * sizeof(uint64_t));
            if (hs) x->hashes = hs;
            uint64_t *kp = realloc(x->key_pos, c * sizeof(uint64_t));
            if (kp) x->key_pos = kp;
            if (!no || !nl || !so || !hs || !kp) return oom(s);
            x->cap = c;
        }
        uint32_t k = x->count;
        /* Plain names stay in the JSON text; only escaped ones are decoded aside. */
        size_t end = st_plain_string_end(s->b, s->p + 1, s->n);
        if (end < s->n && s->b[end] == '"') {
            x->name_off[k] = s->p + 1;
            x->name_len[k] = (uint32_t)(end - s->p - 1);
            s->p = end + 1;
        } else {
            size_t before = x->name_length;
            if (string_into(s, &x->name_bytes, &x->name_cap, &x->name_length) != 0) return -1;
            x->name_off[k] = before;
            x->name_len[k] = (uint32_t)(x->name_length - before) | ST_NAME_ESCAPED;
        }
        const uint8_t *name;
        size_t nlen;
        st_index_name(x, k, &name, &nlen);
        x->key_pos[k] = name_at;
        skip_ws(s);
        if (peek(s) != ':') return expected(s, "':'");
        s->p++;
        skip_ws(s);
        int w = peek(s);
        if (w != '"') {
            if (is_value_start(w)) {
                fail(s, ST_INVALID_INDEX, s->p, "weight_map values must be shard file names (strings)");
                st_error_set_tensor(s->e, name, nlen);
                return -1;
            }
            return expected(s, "a value");
        }
        /* Decode the shard name as a tentative new shard, keep it only if it is new. */
        if (x->n_shards + 2 > x->shard_cap) {
            uint32_t c = x->shard_cap ? x->shard_cap * 2 : 64;
            uint32_t *ss = realloc(x->shard_start, (c + 1) * sizeof(uint32_t));
            if (!ss) return oom(s);
            x->shard_start = ss;
            x->shard_cap = c;
        }
        size_t before = x->shard_length;
        if (string_into(s, &x->shard_bytes, &x->shard_bytes_cap, &x->shard_length) != 0) return -1;
        x->shard_start[x->n_shards + 1] = (uint32_t)x->shard_length;
        const uint8_t *sh = x->shard_bytes + before;
        size_t slen = x->shard_length - before;
        /* Neighbouring entries usually name the same shard: try the previous one first. */
        uint32_t id = UINT32_MAX;
        uint64_t h = 0;
        if (k > 0) {
            uint32_t last = x->shard_of[k - 1];
            uint32_t a = x->shard_start[last], z = x->shard_start[last + 1];
            if (z - a == slen && memcmp(x->shard_bytes + a, sh, slen) == 0) id = last;
        }
        if (id == UINT32_MAX) {
            h = st_hash_bytes(sh, slen);
            id = st_hash_find(shards, sh, slen, h);
        }
        if (id == UINT32_MAX) {
            if (x->n_shards >= ST_MAX_SHARDS) {
                fail(s, ST_INVALID_INDEX, name_at, "more than %d shard files", ST_MAX_SHARDS);
                st_error_set_tensor(s->e, name, nlen);
                return -1;
            }
            id = x->n_shards;
            if (st_hash_insert(shards, sh, slen, h, id) == UINT32_MAX - 1) return oom(s);
            x->n_shards++;
        } else
            x->shard_length = before;
        x->shard_of[k] = id;
        x->count = k + 1;
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

/* ---------------------------------------------------------------- duplicates */

/* After the whole index parsed: the first name listed twice (batched, with prefetching, since
   each insert is one random cache miss into a table of ~1M slots). */
static int names_strictly_increasing(const st_index *x) {
    const uint8_t *prev = NULL;
    size_t prev_len = 0;
    for (uint32_t k = 0; k < x->count; k++) {
        const uint8_t *name;
        size_t len;
        st_index_name(x, k, &name, &len);
        if (k > 0) {
            size_t common = len < prev_len ? len : prev_len;
            int c = memcmp(prev, name, common);
            if (c > 0 || (c == 0 && prev_len >= len)) return 0;
        }
        prev = name;
        prev_len = len;
    }
    return 1;
}

static int check_duplicate_names(st_index *x, st_hash *names, st_error *e) {
    enum { AHEAD = 16 };
    /* Writers sort weight_map (json.dumps sort_keys): names in strictly increasing byte order
       cannot repeat, and one sequential pass replaces ~500k random hash inserts. Any other order
       takes the hash path below, which finds the first repeat. */
    if (names_strictly_increasing(x)) return 0;
    /* Hashes are only needed on this path (and by a cross-check miss, which hashes on its own). */
    for (uint32_t k = 0; k < x->count; k++) {
        const uint8_t *name;
        size_t len;
        st_index_name(x, k, &name, &len);
        x->hashes[k] = st_hash_bytes(name, len);
    }
    for (uint32_t k = 0; k < x->count; k++) {
        if (k + AHEAD < x->count) st_hash_prefetch(names, x->hashes[k + AHEAD]);
        const uint8_t *name;
        size_t len;
        st_index_name(x, k, &name, &len);
        uint32_t prev = st_hash_insert(names, name, len, x->hashes[k], k);
        if (prev == UINT32_MAX) continue;
        if (prev == UINT32_MAX - 1) return st_fail(e, ST_OUT_OF_MEMORY, -1, "out of memory while parsing the index"), -1;
        st_fail(e, ST_DUPLICATE_KEY, (int64_t)x->key_pos[k], "tensor listed twice in weight_map");
        st_error_set_tensor(e, name, len);
        return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------- entry point */

void st_index_free(st_index *x) {
    free(x->name_off);
    free(x->name_len);
    free(x->name_bytes);
    free(x->owned_json);
    free(x->shard_of);
    free(x->hashes);
    free(x->key_pos);
    free(x->shard_start);
    free(x->shard_bytes);
    memset(x, 0, sizeof *x);
}

static int scan_index(ix_scanner *s, st_index *x, st_hash *names, st_hash *shards) {
    int have_map = 0, have_meta = 0;
    skip_ws(s);
    int c = peek(s);
    if (c != '{') {
        if (c == 0xef) return fail(s, ST_INVALID_JSON, s->p, "a UTF-8 byte order mark precedes the index JSON");
        if (is_value_start(c)) return fail(s, ST_INVALID_INDEX, s->p, "the index must be a JSON object");
        return expected(s, "'{'");
    }
    s->p++;
    skip_ws(s);
    if (peek(s) == '}')
        s->p++;
    else
        for (;;) {
            if (peek(s) != '"') return expected(s, "a string key");
            size_t key_at = s->p;
            if (skip_string(s) != 0) return -1;
            int is_map = s->scratch_len == 10 && memcmp(s->scratch, "weight_map", 10) == 0;
            int is_meta = s->scratch_len == 8 && memcmp(s->scratch, "metadata", 8) == 0;
            skip_ws(s);
            if (peek(s) != ':') return expected(s, "':'");
            s->p++;
            skip_ws(s);
            if (is_map) {
                if (have_map) return fail(s, ST_DUPLICATE_KEY, key_at, "duplicate weight_map");
                have_map = 1;
                if (scan_weight_map(s, x, names, shards) != 0) return -1;
            } else if (is_meta) {
                if (have_meta) return fail(s, ST_DUPLICATE_KEY, key_at, "duplicate metadata");
                have_meta = 1;
                int v = peek(s);
                if (v != '{' && v != 'n') {
                    if (is_value_start(v)) return fail(s, ST_INVALID_INDEX, s->p, "metadata must be an object");
                    return expected(s, "a value");
                }
                x->metadata_begin = (int64_t)s->p;
                if (skip_value(s) != 0) return -1;
                x->metadata_end = (int64_t)s->p;
            } else if (skip_value(s) != 0)
                return -1;
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
    skip_ws(s);
    if (s->p != s->n) {
        char d[32];
        describe_byte(s->b[s->p], d, sizeof d);
        return fail(s, ST_INVALID_JSON, s->p, "trailing %s after the index object", d);
    }
    if (!have_map) return fail(s, ST_INVALID_INDEX, 0, "missing weight_map");
    return 0;
}

int st_parse_index(const uint8_t *json, size_t n, st_index *x, st_error *e) {
    memset(x, 0, sizeof *x);
    x->metadata_begin = x->metadata_end = -1;
    if (n > ST_MAX_INDEX_BYTES)
        return st_fail(e, ST_INVALID_INDEX, -1, "the index is larger than %llu bytes", (unsigned long long)ST_MAX_INDEX_BYTES), -1;
    int64_t bad = st_utf8_first_invalid(json, n);
    if (bad >= 0) return st_fail(e, ST_INVALID_UTF8, bad, "the index is not valid UTF-8"), -1;
    x->json = json;
    /* Size the columns once from N (~120 index bytes per entry) to avoid regrowth copies. */
    x->cap = (uint32_t)(n / 100 + 16);
    x->name_off = st_alloc_big(x->cap * sizeof(uint64_t), 0);
    x->name_len = st_alloc_big(x->cap * sizeof(uint32_t), 0);
    x->shard_of = st_alloc_big(x->cap * sizeof(uint32_t), 0);
    x->hashes = st_alloc_big(x->cap * sizeof(uint64_t), 0);
    x->key_pos = st_alloc_big(x->cap * sizeof(uint64_t), 0);
    x->shard_start = malloc(sizeof(uint32_t));
    if (!x->name_off || !x->name_len || !x->shard_of || !x->hashes || !x->key_pos || !x->shard_start)
        return st_fail(e, ST_OUT_OF_MEMORY, -1, "out of memory while parsing the index"), -1;
    x->shard_start[0] = 0;
    st_hash *names = st_hash_new((uint32_t)(n / 200 + 16), entry_name_of, x);
    st_hash *shards = st_hash_new(64, shard_name_of, x);
    ix_scanner s = {json, n, 0, e, NULL, 0, 0};
    int rc;
    if (!names || !shards)
        rc = (st_fail(e, ST_OUT_OF_MEMORY, -1, "out of memory while parsing the index"), -1);
    else {
        rc = scan_index(&s, x, names, shards);
        if (rc == 0) rc = check_duplicate_names(x, names, e);
    }
    st_hash_free(names);
    st_hash_free(shards);
    free(s.scratch);
    return rc;
}

int st_parse_index_file(const char *path, st_index *x, st_error *e) {
    memset(x, 0, sizeof *x);
    x->metadata_begin = x->metadata_end = -1;
    FILE *f = fopen(path, "rb");
    if (!f) return st_fail(e, ST_IO_ERROR, -1, "opening the index: %s", strerror(errno)), -1;
    struct stat st;
    if (fstat(fileno(f), &st) != 0) {
        fclose(f);
        return st_fail(e, ST_IO_ERROR, -1, "stat: %s", strerror(errno)), -1;
    }
    size_t n = (size_t)st.st_size;
    if (n > ST_MAX_INDEX_BYTES) {
        fclose(f);
        return st_fail(e, ST_INVALID_INDEX, -1, "the index is larger than %llu bytes", (unsigned long long)ST_MAX_INDEX_BYTES), -1;
    }
    uint8_t *buf = st_alloc_big(n ? n : 1, 0);
    if (!buf) {
        fclose(f);
        return st_fail(e, ST_OUT_OF_MEMORY, -1, "out of memory for the index"), -1;
    }
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fileno(f), buf + got, n - got, (off_t)got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += (size_t)r;
    }
    fclose(f);
    if (got != n) {
        free(buf);
        return st_fail(e, ST_IO_ERROR, -1, "reading the index: short read"), -1;
    }
    int rc = st_parse_index(buf, n, x, e);
    x->owned_json = buf;
    return rc;
}
