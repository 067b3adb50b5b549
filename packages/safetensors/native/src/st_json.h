/*
 * st_json.h: the JSON scanning both strict parsers share (st_scan.c's header scanner and
 * st_index_json.c's index scanner), as src/scan.ts' JsonScanner: position, white space,
 * strings with escapes, and the "expected X, found Y" messages, which name the document
 * ("header" or "index") exactly as the TS scanners do.
 */
#ifndef ST_JSON_H
#define ST_JSON_H

#include <stddef.h>
#include <stdint.h>
#include "k3_safetensors.h"

typedef struct {
    const uint8_t *b;
    size_t n, p;
    st_error *e;
    const char *doc; /* "header" or "index": named in end-of-input messages */
} st_json;

/* A growable byte buffer (decoded strings). */
typedef struct {
    uint8_t *buf;
    size_t cap, len;
} st_bytes;

/* Sets the error (the first one only) and returns -1. */
int st_json_fail(st_json *s, st_code code, size_t pos, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* ST_OUT_OF_MEMORY "out of memory while parsing the <doc>" at the current position; -1. */
int st_json_oom(st_json *s);
/* How a byte is named in "expected X, found Y" messages. */
void st_json_describe_byte(int c, char *out, size_t cap);
/* InvalidJson "expected <what>, found <byte>" (or "unexpected end of the <doc> JSON"); -1. */
int st_json_expected(st_json *s, const char *what);
/* True when c can start a JSON value (for "X must be Y" rather than "expected a value"). */
int st_json_is_value_start(int c);
/* Makes room for `need` bytes in total; 0 or -1. */
int st_bytes_reserve(st_bytes *x, size_t need);

/* The JSON string at p (p at the quote), decoded and appended to x (which grows). 0 or -1. */
int st_json_string(st_json *s, st_bytes *x);
/* The same onto a column kept as separate (buf, cap, len) fields. */
int st_json_string_onto(st_json *s, uint8_t **buf, size_t *cap, size_t *len);
/* A string key and the ':' after it, decoded into x (emptied first); leaves p on the value. */
int st_json_key(st_json *s, st_bytes *x);
static inline int st_json_peek(const st_json *s) { return s->p < s->n ? s->b[s->p] : -1; }

static inline void st_json_skip_ws(st_json *s) {
    const uint8_t *b = s->b;
    size_t p = s->p, n = s->n;
    while (p < n) {
        uint8_t c = b[p];
        if (c != ' ' && c != '\n' && c != '\r' && c != '\t') break;
        p++;
    }
    s->p = p;
}

/*
 * After an element or member: skips white space; on ',' consumes it and the white space after
 * and returns 1 (another follows); on `closer` ('}' or ']') consumes it and returns 0; else
 * fails "expected ',' or '}'" (or ']') and returns -1. Inline: it runs after every value.
 */
static inline int st_json_next_or_close(st_json *s, uint8_t closer) {
    st_json_skip_ws(s);
    int e = st_json_peek(s);
    if (e == ',') {
        s->p++;
        st_json_skip_ws(s);
        return 1;
    }
    if (e == closer) {
        s->p++;
        return 0;
    }
    st_json_expected(s, closer == '}' ? "',' or '}'" : "',' or ']'");
    return -1;
}

#endif
