/*
 * rank_file.c: the rank-file parser of src/ranks.ts in C (one pass, table-driven base64), so a
 * 2.8 MB Kimi file loads in milliseconds. On any malformed line it returns that line number and
 * the TypeScript parser, run on the same bytes, produces the detailed error message.
 */
#include "rank_file.h"

static signed char B64[256];
static int b64_ready;

static void b64_init(void) {
    const char *abc = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (int i = 0; i < 256; i++) B64[i] = -1;
    for (int i = 0; i < 64; i++) B64[(unsigned char)abc[i]] = (signed char)i;
    b64_ready = 1;
}

long k3_parse_rank_file(const uint8_t *data, size_t len, uint8_t *pool, size_t pool_cap, uint32_t *offsets,
                        uint32_t *ranks, size_t cap, size_t *pool_used) {
    if (!b64_ready) b64_init();
    size_t i = 0, w = 0, n = 0;
    long line = 0;
    while (i < len) {
        line++;
        size_t e = i;
        while (e < len && data[e] != '\n' && data[e] != '\r') e++;
        size_t s = i, end = e;
        i = (e < len && data[e] == '\r' && e + 1 < len && data[e + 1] == '\n') ? e + 2 : e + 1;
        if (s == end) continue;
        if (n + 1 >= cap) return -2147483647L;
        offsets[n] = (uint32_t)w;
        uint32_t acc = 0;
        int bits = 0, pad = 0;
        size_t field = s;
        while (s < end && data[s] != ' ' && data[s] != '\t') {
            uint8_t c = data[s++];
            if (c == '=') {
                pad++;
                continue;
            }
            int v = B64[c];
            if (v < 0 || pad) return -line;
            acc = (acc << 6) | (uint32_t)v;
            bits += 6;
            if (bits >= 8) {
                bits -= 8;
                if (w >= pool_cap) return -2147483647L;
                pool[w++] = (uint8_t)(acc >> bits);
            }
        }
        size_t flen = s - field;
        if (flen == 0 || flen % 4 || pad > 2 || w == offsets[n]) return -line;
        while (s < end && (data[s] == ' ' || data[s] == '\t')) s++;
        size_t digits = s;
        uint64_t rank = 0;
        while (s < end && data[s] >= '0' && data[s] <= '9') {
            rank = rank * 10 + (uint64_t)(data[s++] - '0');
            if (rank > 0x7FFFFFFEu) return -line;
        }
        while (s < end && (data[s] == ' ' || data[s] == '\t')) s++;
        if (s == digits || s != end) return -line;
        ranks[n++] = (uint32_t)rank;
    }
    offsets[n] = (uint32_t)w;
    *pool_used = w;
    return (long)n;
}
