/*
 * st_json.c: the JSON lexing shared by the header scanner (st_scan.c) and the index scanner
 * (st_index_json.c): strings with every escape rule of RFC 8259 plus Rust's (no lone
 * surrogates), white space, and the messages of src/scan.ts' JsonScanner.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "st_json.h"
#include "st_bytescan.h"

/* ---------------------------------------------------------------- messages */

int st_json_fail(st_json *s, st_code code, size_t pos, const char *fmt, ...) {
    if (s->e->code != ST_OK) return -1;
    s->e->code = code;
    s->e->position = (int64_t)pos;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->e->detail, sizeof s->e->detail, fmt, ap);
    va_end(ap);
    return -1;
}

int st_json_oom(st_json *s) { return st_json_fail(s, ST_OUT_OF_MEMORY, s->p, "out of memory while parsing the %s", s->doc); }

void st_json_describe_byte(int c, char *out, size_t cap) {
    if (c < 0) snprintf(out, cap, "the end of the header");
    else if (c >= 0x21 && c <= 0x7e) snprintf(out, cap, "'%c'", c);
    else snprintf(out, cap, "byte 0x%02x", c);
}

int st_json_expected(st_json *s, const char *what) {
    int c = st_json_peek(s);
    if (c < 0) return st_json_fail(s, ST_INVALID_JSON, s->p, "unexpected end of the %s JSON (expected %s)", s->doc, what);
    char found[32];
    st_json_describe_byte(c, found, sizeof found);
    return st_json_fail(s, ST_INVALID_JSON, s->p, "expected %s, found %s", what, found);
}

int st_json_is_value_start(int c) {
    return c == '{' || c == '[' || c == '"' || c == '-' || (c >= '0' && c <= '9') || c == 't' || c == 'f' || c == 'n';
}

/* ---------------------------------------------------------------- buffers */

int st_bytes_reserve(st_bytes *x, size_t need) {
    if (need <= x->cap) return 0;
    size_t c = x->cap ? x->cap : 256;
    while (c < need) c *= 2;
    uint8_t *nb = realloc(x->buf, c);
    if (!nb) return -1;
    x->buf = nb;
    x->cap = c;
    return 0;
}

/* ---------------------------------------------------------------- strings */

static int hex4(st_json *s, size_t at, size_t esc_at, uint32_t *out) {
    if (at + 4 > s->n) return st_json_fail(s, ST_INVALID_JSON, esc_at, "invalid \\u escape: needs 4 hex digits");
    uint32_t v = 0;
    for (int k = 0; k < 4; k++) {
        uint8_t c = s->b[at + k];
        uint32_t d;
        if (c >= '0' && c <= '9') d = c - '0';
        else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
        else return st_json_fail(s, ST_INVALID_JSON, esc_at, "invalid \\u escape: needs 4 hex digits");
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

/* One escape at p (p at the backslash), decoded onto x; *pp moves past it. 0 or -1. */
static int escape(st_json *s, size_t *pp, st_bytes *x) {
    const uint8_t *b = s->b;
    size_t n = s->n, p = *pp, esc_at = p;
    if (p + 1 >= n) {
        s->p = p + 1;
        return st_json_fail(s, ST_INVALID_JSON, p + 1, "unexpected end of the %s JSON inside a string", s->doc);
    }
    uint8_t e = b[p + 1];
    p += 2;
    uint8_t *o = x->buf;
    switch (e) {
    case '"': o[x->len++] = '"'; break;
    case '\\': o[x->len++] = '\\'; break;
    case '/': o[x->len++] = '/'; break;
    case 'b': o[x->len++] = '\b'; break;
    case 'f': o[x->len++] = '\f'; break;
    case 'n': o[x->len++] = '\n'; break;
    case 'r': o[x->len++] = '\r'; break;
    case 't': o[x->len++] = '\t'; break;
    case 'u': {
        uint32_t u, lo;
        if (hex4(s, p, esc_at, &u) != 0) return -1;
        p += 4;
        if (u >= 0xdc00 && u <= 0xdfff) return st_json_fail(s, ST_INVALID_JSON, esc_at, "lone low surrogate in a \\u escape");
        if (u >= 0xd800 && u <= 0xdbff) {
            if (!(p + 1 < n && b[p] == '\\' && b[p + 1] == 'u'))
                return st_json_fail(s, ST_INVALID_JSON, esc_at, "lone high surrogate in a \\u escape");
            if (hex4(s, p + 2, p, &lo) != 0) return -1;
            if (lo < 0xdc00 || lo > 0xdfff) return st_json_fail(s, ST_INVALID_JSON, esc_at, "lone high surrogate in a \\u escape");
            p += 6;
            put_utf8(o, &x->len, 0x10000 + ((u - 0xd800) << 10) + (lo - 0xdc00));
        } else
            put_utf8(o, &x->len, u);
        break;
    }
    default: {
        char d[32];
        st_json_describe_byte(e, d, sizeof d);
        return st_json_fail(s, ST_INVALID_JSON, esc_at, "invalid escape %s in a string", d);
    }
    }
    *pp = p;
    return 0;
}

/* len may be 0 with x->buf still NULL (an empty first string): memcpy(NULL, .., 0) is undefined. */
static void append(st_bytes *x, const uint8_t *from, size_t len) {
    if (len == 0) return;
    memcpy(x->buf + x->len, from, len);
    x->len += len;
}

int st_json_string(st_json *s, st_bytes *x) {
    const uint8_t *b = s->b;
    size_t n = s->n, p = s->p + 1, start = p;
    p = st_string_end(b, p, n);
    if (p < n && b[p] == '"') {
        /* + 1: the buffer exists even after an empty first string, so callers may point into it
           (NULL + 0 is undefined). */
        if (st_bytes_reserve(x, x->len + (p - start) + 1) != 0) return st_json_oom(s);
        append(x, b + start, p - start);
        s->p = p + 1;
        return 0;
    }
    /* Escapes: the decoded text is never longer than the rest of the JSON. */
    if (st_bytes_reserve(x, x->len + (n - start) + 4) != 0) return st_json_oom(s);
    append(x, b + start, p - start);
    size_t run = p;
    for (;;) {
        if (p >= n) {
            s->p = p;
            return st_json_fail(s, ST_INVALID_JSON, p, "unexpected end of the %s JSON inside a string", s->doc);
        }
        uint8_t c = b[p];
        if (c == '"') {
            append(x, b + run, p - run);
            s->p = p + 1;
            return 0;
        }
        if (c < 0x20) {
            char d[32];
            st_json_describe_byte(c, d, sizeof d);
            return st_json_fail(s, ST_INVALID_JSON, p, "control character %s inside a string", d);
        }
        if (c != '\\') {
            p++;
            continue;
        }
        append(x, b + run, p - run);
        if (escape(s, &p, x) != 0) return -1;
        run = p;
    }
}

/* ---------------------------------------------------------------- structure */

int st_json_key(st_json *s, st_bytes *x) {
    if (st_json_peek(s) != '"') return st_json_expected(s, "a string key");
    x->len = 0;
    if (st_json_string(s, x) != 0) return -1;
    st_json_skip_ws(s);
    if (st_json_peek(s) != ':') return st_json_expected(s, "':'");
    s->p++;
    st_json_skip_ws(s);
    return 0;
}

int st_json_string_onto(st_json *s, uint8_t **buf, size_t *cap, size_t *len) {
    st_bytes x = {*buf, *cap, *len};
    int rc = st_json_string(s, &x);
    *buf = x.buf;
    *cap = x.cap;
    *len = x.len;
    return rc;
}
