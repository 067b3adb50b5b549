/*
 * st_index_json.c: model.safetensors.index.json, mirroring src/index-json.ts: "weight_map" is
 * an object of tensor name -> shard file (names unique), "metadata" is kept as its raw JSON span
 * (object or null), other keys are skipped with full syntax checks and bounded nesting.
 */
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "k3_safetensors.h"
#include "st_json.h"
#include "st_bytescan.h"

typedef struct {
    st_json j;        /* the shared lexer (st_json.c): position, strings, messages */
    st_bytes scratch; /* decoded keys and skipped strings */
} ix_scanner;

static int skip_string(ix_scanner *s) {
    s->scratch.len = 0;
    return st_json_string(&s->j, &s->scratch);
}

static int digit_at(const ix_scanner *s, size_t p) { return p < s->j.n && s->j.b[p] >= '0' && s->j.b[p] <= '9'; }

static int number(ix_scanner *s) {
    size_t p = s->j.p;
    if (s->j.b[p] == '-') p++;
    if (p < s->j.n && s->j.b[p] == '0')
        p++;
    else if (p < s->j.n && s->j.b[p] >= '1' && s->j.b[p] <= '9')
        while (digit_at(s, p)) p++;
    else {
        s->j.p = p;
        return st_json_expected(&s->j, "a digit");
    }
    if (p < s->j.n && s->j.b[p] == '.') {
        p++;
        if (!digit_at(s, p)) {
            s->j.p = p;
            return st_json_expected(&s->j, "a digit");
        }
        while (digit_at(s, p)) p++;
    }
    if (p < s->j.n && (s->j.b[p] == 'e' || s->j.b[p] == 'E')) {
        p++;
        if (p < s->j.n && (s->j.b[p] == '+' || s->j.b[p] == '-')) p++;
        if (!digit_at(s, p)) {
            s->j.p = p;
            return st_json_expected(&s->j, "a digit");
        }
        while (digit_at(s, p)) p++;
    }
    s->j.p = p;
    return 0;
}

static int literal(ix_scanner *s, const char *word) {
    size_t len = strlen(word);
    for (size_t k = 0; k < len; k++) {
        if (s->j.p + k >= s->j.n || s->j.b[s->j.p + k] != (uint8_t)word[k]) {
            s->j.p += k;
            char what[16];
            snprintf(what, sizeof what, "'%s'", word);
            return st_json_expected(&s->j, what);
        }
    }
    s->j.p += len;
    return 0;
}

static int key_colon(ix_scanner *s) { return st_json_key(&s->j, &s->scratch); }

/* Skips any value with an explicit stack of closers (no recursion). */
static int skip_value(ix_scanner *s) {
    uint8_t stack[ST_MAX_JSON_DEPTH];
    int depth = 0;
    for (;;) {
        int c = st_json_peek(&s->j);
        if (c == '{' || c == '[') {
            if (depth >= ST_MAX_JSON_DEPTH) return st_json_fail(&s->j, ST_INVALID_INDEX, s->j.p, "JSON nesting deeper than %d", ST_MAX_JSON_DEPTH);
            s->j.p++;
            st_json_skip_ws(&s->j);
            uint8_t closer = c == '{' ? '}' : ']';
            if (st_json_peek(&s->j) == closer)
                s->j.p++;
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
            return st_json_expected(&s->j, "a value");
        for (;;) {
            if (depth == 0) return 0;
            uint8_t closer = stack[depth - 1];
            int more = st_json_next_or_close(&s->j, closer);
            if (more < 0) return -1;
            if (!more) {
                depth--;
                continue;
            }
            if (closer == '}' && key_colon(s) != 0) return -1;
            break;
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

static int oom(ix_scanner *s) { return st_json_oom(&s->j); }

static int same_plain_shard(ix_scanner *s, const st_index *x, uint32_t id);
static int new_shard_value(ix_scanner *s, st_index *x, st_hash *shards, uint32_t k, size_t name_at, uint32_t *plain_shard);

static int scan_weight_map(ix_scanner *s, st_index *x, st_hash *shards) {
    uint32_t plain_shard = UINT32_MAX; /* a shard whose name has no escapes (see same_plain_shard) */
    int v = st_json_peek(&s->j);
    if (v != '{') {
        if (st_json_is_value_start(v)) return st_json_fail(&s->j, ST_INVALID_INDEX, s->j.p, "weight_map must be an object of tensor name -> shard file");
        return st_json_expected(&s->j, "a value");
    }
    s->j.p++;
    st_json_skip_ws(&s->j);
    if (st_json_peek(&s->j) == '}') {
        s->j.p++;
        return 0;
    }
    for (;;) {
        if (st_json_peek(&s->j) != '"') return st_json_expected(&s->j, "a string key");
        size_t name_at = s->j.p;
        if (x->count + 2 > x->cap) {
            uint32_t c = x->cap ? x->cap * 2 : 1024;
            uint32_t *no = realloc(x->name_off, c * sizeof(uint32_t));
            if (no) x->name_off = no;
            uint32_t *nl = realloc(x->name_len, c * sizeof(uint32_t));
            if (nl) x->name_len = nl;
            uint32_t *so = realloc(x->shard_of, c * sizeof(uint32_t));
            if (so) x->shard_of = so;
            uint64_t *hs = realloc(x->hashes, c * sizeof(uint64_t));
            if (hs) x->hashes = hs;
            uint32_t *kp = realloc(x->key_pos, c * sizeof(uint32_t));
            if (kp) x->key_pos = kp;
            if (!no || !nl || !so || !hs || !kp) return oom(s);
            x->cap = c;
        }
        uint32_t k = x->count;
        /* Plain names stay in the JSON text; only escaped ones are decoded aside. */
        size_t end = st_string_end(s->j.b, s->j.p + 1, s->j.n);
        if (end < s->j.n && s->j.b[end] == '"') {
            x->name_off[k] = (uint32_t)(s->j.p + 1);
            x->name_len[k] = (uint32_t)(end - s->j.p - 1);
            s->j.p = end + 1;
        } else {
            size_t before = x->name_length;
            if (st_json_string_onto(&s->j, &x->name_bytes, &x->name_cap, &x->name_length) != 0) return -1;
            x->name_off[k] = (uint32_t)before;
            x->name_len[k] = (uint32_t)(x->name_length - before) | ST_NAME_ESCAPED;
        }
        const uint8_t *name;
        size_t nlen;
        st_index_name(x, k, &name, &nlen);
        x->key_pos[k] = (uint32_t)name_at;
        st_json_skip_ws(&s->j);
        if (st_json_peek(&s->j) != ':') return st_json_expected(&s->j, "':'");
        s->j.p++;
        st_json_skip_ws(&s->j);
        int w = st_json_peek(&s->j);
        if (w != '"') {
            if (st_json_is_value_start(w)) {
                st_json_fail(&s->j, ST_INVALID_INDEX, s->j.p, "weight_map values must be shard file names (strings)");
                st_error_set_tensor(s->j.e, name, nlen);
                return -1;
            }
            return st_json_expected(&s->j, "a value");
        }
        if (k > 0 && x->shard_of[k - 1] == plain_shard && same_plain_shard(s, x, plain_shard)) {
            x->shard_of[k] = plain_shard;
            x->count = k + 1;
        } else if (new_shard_value(s, x, shards, k, name_at, &plain_shard) != 0)
            return -1;
        int more = st_json_next_or_close(&s->j, '}');
        if (more < 0) return -1;
        if (!more) return 0;
    }
}

/* ---------------------------------------------------------------- shard values */

/*
 * Neighbouring entries usually name the same shard. When that shard's name was written without
 * escapes, the same raw bytes followed by '"' at p are that name again (text without escapes
 * decodes to itself), so one memcmp replaces decoding. Moves p past the string when it matches.
 */
static int same_plain_shard(ix_scanner *s, const st_index *x, uint32_t id) {
    uint32_t a = x->shard_start[id], len = x->shard_start[id + 1] - a;
    size_t q = s->j.p + 1;
    if (q + len >= s->j.n || s->j.b[q + len] != '"' || memcmp(s->j.b + q, x->shard_bytes + a, len) != 0) return 0;
    s->j.p = q + len + 1;
    return 1;
}

/* The shard string at p, decoded, looked up (or added) as entry k's shard. *plain_shard becomes
   its id when it was written without escapes, else UINT32_MAX. */
static int new_shard_value(ix_scanner *s, st_index *x, st_hash *shards, uint32_t k, size_t name_at, uint32_t *plain_shard) {
    const uint8_t *name;
    size_t nlen;
    st_index_name(x, k, &name, &nlen);
    size_t quote_at = s->j.p;
    /* Decode the shard name as a tentative new shard, keep it only if it is new. */
    if (x->n_shards + 2 > x->shard_cap) {
        uint32_t c = x->shard_cap ? x->shard_cap * 2 : 64;
        uint32_t *ss = realloc(x->shard_start, (c + 1) * sizeof(uint32_t));
        if (!ss) return oom(s);
        x->shard_start = ss;
        x->shard_cap = c;
    }
    size_t before = x->shard_length;
    if (st_json_string_onto(&s->j, &x->shard_bytes, &x->shard_bytes_cap, &x->shard_length) != 0) return -1;
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
            st_json_fail(&s->j, ST_INVALID_INDEX, name_at, "more than %d shard files", ST_MAX_SHARDS);
            st_error_set_tensor(s->j.e, name, nlen);
            return -1;
        }
        id = x->n_shards;
        if (st_hash_insert(shards, sh, slen, h, id) == UINT32_MAX - 1) return oom(s);
        x->n_shards++;
    } else
        x->shard_length = before;
    x->shard_of[k] = id;
    x->count = k + 1;
    *plain_shard = s->j.p - quote_at - 2 == slen ? id : UINT32_MAX;
    return 0;
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

static int check_duplicate_names(st_index *x, st_error *e) {
    enum { AHEAD = 16 };
    /* Writers sort weight_map (json.dumps sort_keys): names in strictly increasing byte order
       cannot repeat, and one sequential pass replaces ~500k random hash inserts. Any other order
       takes the hash path below, which finds the first repeat. */
    if (names_strictly_increasing(x)) return 0;
    /* Only this path needs the name hash (~1M zeroed slots for K3: not built when sorted). */
    st_hash *names = st_hash_new(x->count, entry_name_of, x);
    if (!names) return st_fail(e, ST_OUT_OF_MEMORY, -1, "out of memory while parsing the index"), -1;
    int rc = 0;
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
        if (prev == UINT32_MAX - 1)
            st_fail(e, ST_OUT_OF_MEMORY, -1, "out of memory while parsing the index");
        else {
            st_fail(e, ST_DUPLICATE_KEY, (int64_t)x->key_pos[k], "tensor listed twice in weight_map");
            st_error_set_tensor(e, name, len);
        }
        rc = -1;
        break;
    }
    st_hash_free(names);
    return rc;
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

static int scan_index(ix_scanner *s, st_index *x, st_hash *shards) {
    int have_map = 0, have_meta = 0;
    st_json_skip_ws(&s->j);
    int c = st_json_peek(&s->j);
    if (c != '{') {
        if (c == 0xef) return st_json_fail(&s->j, ST_INVALID_JSON, s->j.p, "a UTF-8 byte order mark precedes the index JSON");
        if (st_json_is_value_start(c)) return st_json_fail(&s->j, ST_INVALID_INDEX, s->j.p, "the index must be a JSON object");
        return st_json_expected(&s->j, "'{'");
    }
    s->j.p++;
    st_json_skip_ws(&s->j);
    if (st_json_peek(&s->j) == '}')
        s->j.p++;
    else
        for (;;) {
            if (st_json_peek(&s->j) != '"') return st_json_expected(&s->j, "a string key");
            size_t key_at = s->j.p;
            if (skip_string(s) != 0) return -1;
            int is_map = s->scratch.len == 10 && memcmp(s->scratch.buf, "weight_map", 10) == 0;
            int is_meta = s->scratch.len == 8 && memcmp(s->scratch.buf, "metadata", 8) == 0;
            st_json_skip_ws(&s->j);
            if (st_json_peek(&s->j) != ':') return st_json_expected(&s->j, "':'");
            s->j.p++;
            st_json_skip_ws(&s->j);
            if (is_map) {
                if (have_map) return st_json_fail(&s->j, ST_DUPLICATE_KEY, key_at, "duplicate weight_map");
                have_map = 1;
                if (scan_weight_map(s, x, shards) != 0) return -1;
            } else if (is_meta) {
                if (have_meta) return st_json_fail(&s->j, ST_DUPLICATE_KEY, key_at, "duplicate metadata");
                have_meta = 1;
                int v = st_json_peek(&s->j);
                if (v != '{' && v != 'n') {
                    if (st_json_is_value_start(v)) return st_json_fail(&s->j, ST_INVALID_INDEX, s->j.p, "metadata must be an object");
                    return st_json_expected(&s->j, "a value");
                }
                x->metadata_begin = (int64_t)s->j.p;
                if (skip_value(s) != 0) return -1;
                x->metadata_end = (int64_t)s->j.p;
            } else if (skip_value(s) != 0)
                return -1;
            int more = st_json_next_or_close(&s->j, '}');
            if (more < 0) return -1;
            if (!more) break;
        }
    st_json_skip_ws(&s->j);
    if (s->j.p != s->j.n) {
        char d[32];
        st_json_describe_byte(s->j.b[s->j.p], d, sizeof d);
        return st_json_fail(&s->j, ST_INVALID_JSON, s->j.p, "trailing %s after the index object", d);
    }
    if (!have_map) return st_json_fail(&s->j, ST_INVALID_INDEX, 0, "missing weight_map");
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
    x->name_off = st_alloc_big(x->cap * sizeof(uint32_t), 0);
    x->name_len = st_alloc_big(x->cap * sizeof(uint32_t), 0);
    x->shard_of = st_alloc_big(x->cap * sizeof(uint32_t), 0);
    x->hashes = st_alloc_big(x->cap * sizeof(uint64_t), 0);
    x->key_pos = st_alloc_big(x->cap * sizeof(uint32_t), 0);
    x->shard_start = malloc(sizeof(uint32_t));
    if (!x->name_off || !x->name_len || !x->shard_of || !x->hashes || !x->key_pos || !x->shard_start)
        return st_fail(e, ST_OUT_OF_MEMORY, -1, "out of memory while parsing the index"), -1;
    x->shard_start[0] = 0;
    st_hash *shards = st_hash_new(64, shard_name_of, x);
    ix_scanner s = {{json, n, 0, e, "index"}, {NULL, 0, 0}};
    int rc;
    if (!shards)
        rc = (st_fail(e, ST_OUT_OF_MEMORY, -1, "out of memory while parsing the index"), -1);
    else {
        rc = scan_index(&s, x, shards);
        if (rc == 0) rc = check_duplicate_names(x, e);
    }
    st_hash_free(shards);
    free(s.scratch.buf);
    return rc;
}

/* What a non-regular file is, for the refusal. */
static const char *file_kind(mode_t m) {
    if (S_ISFIFO(m)) return "a FIFO";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
    if (S_ISSOCK(m)) return "a socket";
    if (S_ISDIR(m)) return "a directory";
    return "not a regular file";
}

int st_parse_index_file(const char *path, st_index *x, st_error *e) {
    memset(x, 0, sizeof *x);
    x->metadata_begin = x->metadata_end = -1;
    /* Non-blocking open: a FIFO with no writer must not hang it (it is refused below). */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return st_fail(e, ST_IO_ERROR, -1, "opening the index: %s", strerror(errno)), -1;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return st_fail(e, ST_IO_ERROR, -1, "stat: %s", strerror(errno)), -1;
    }
    /* Size and kind before any byte is read: /dev/zero reads forever, a FIFO blocks. */
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return st_fail(e, ST_INVALID_INDEX, -1, "the index is %s, not a regular file", file_kind(st.st_mode)), -1;
    }
    size_t n = (size_t)st.st_size;
    if (n > ST_MAX_INDEX_BYTES) {
        close(fd);
        return st_fail(e, ST_INVALID_INDEX, -1, "the index is larger than %llu bytes", (unsigned long long)ST_MAX_INDEX_BYTES), -1;
    }
    uint8_t *buf = st_alloc_big(n ? n : 1, 0);
    if (!buf) {
        close(fd);
        return st_fail(e, ST_OUT_OF_MEMORY, -1, "out of memory for the index"), -1;
    }
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, buf + got, n - got, (off_t)got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += (size_t)r;
    }
    close(fd);
    if (got != n) {
        free(buf);
        return st_fail(e, ST_IO_ERROR, -1, "reading the index: short read"), -1;
    }
    int rc = st_parse_index(buf, n, x, e);
    x->owned_json = buf;
    return rc;
}
