/*
 * char_start.c: decides, from the rank file alone, which 3-byte characters (CJK, most of the BMP)
 * the byte-pair merge may start from as one part instead of three bytes. Same output, about
 * three times fewer parts and no byte-level merges for Chinese text.
 *
 * Why it is exact. Take a character c whose bytes merge on their own into the single token c, and
 * let M(c) be the highest rank among those internal merges. Until c is complete, one of its
 * internal pairs is always a candidate, pending, with rank <= M(c). Suppose every token that joins
 * an edge part of an incomplete c (a proper prefix or suffix) with outside bytes outranks the
 * merge pending while that edge exists, every token holding c whole plus more outranks M(c), and
 * ranks are unique (validateVocabulary). Then in tiktoken's merge:
 * - no merge ever joins a part of an incomplete c with its neighbour (an internal pair of c with
 *   a lower rank is always there);
 * - every other merge of whole characters picks the same pair as in a merge that starts with c
 *   already whole: the pairs involving c that only the latter sees have ranks > M(c), above the
 *   pending internal pair, hence above the global minimum that was picked.
 * So both merges perform the same merges of whole characters in the same order, and end together.
 * Characters that fail the test (or have no token) make their piece start from bytes.
 *
 * Input pieces are valid UTF-8 when this is used (checked per piece), so only tokens of the form
 * [suffix of a char][whole chars][prefix of a char] can ever be candidates; others are ignored.
 */
#include "char_start.h"
#include <stdlib.h>

static inline int cont(uint8_t b) { return (b & 0xC0) == 0x80; }

/* Length of the UTF-8 sequence a lead byte announces, 0 for a continuation or invalid byte. */
static inline size_t seq_len(uint8_t b) {
    if (b < 0x80) return 1;
    if (b >= 0xC2 && b < 0xE0) return 2;
    if (b >= 0xE0 && b < 0xF0) return 3;
    if (b >= 0xF0 && b < 0xF5) return 4;
    return 0;
}

static inline void lower(uint32_t *slot, uint32_t r) {
    if (r < *slot) *slot = r;
}

static inline uint32_t cp3(const uint8_t *s) {
    return ((uint32_t)(s[0] & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
}

/* Records, for the token s[0, len) of rank r, the lowest rank joining each partial or whole
 * 3-byte char with outside bytes. Tables: suffix1/prefix1 by byte, suffix2/prefix2 by byte pair,
 * whole by code point. */
static void scan_token(const uint8_t *s, size_t len, uint32_t r, uint32_t *suffix1, uint32_t *suffix2,
                       uint32_t *prefix1, uint32_t *prefix2, uint32_t *whole) {
    size_t head = 0;
    while (head < len && head < 3 && cont(s[head])) head++;
    if (head == 3 || (head < len && head > 0 && cont(s[head]))) return; /* never in valid text */
    size_t i = head, tail = len;
    /* whole characters, then an incomplete trailing one */
    while (i < len) {
        size_t k = seq_len(s[i]);
        if (k == 0) return;
        size_t have = 1;
        while (have < k && i + have < len && cont(s[i + have])) have++;
        if (have < k) {
            if (i + have != len) return; /* truncated in the middle: never in valid text */
            tail = i;
            break;
        }
        i += k;
    }
    if (len == 3 && head == 0 && tail == len && seq_len(s[0]) == 3) return; /* the char itself */
    if (head == len || (head == 0 && tail == 0)) return;                   /* inside one char */
    if (head == 1) lower(&suffix1[s[0]], r);
    if (head == 2) lower(&suffix2[(uint32_t)s[0] << 8 | s[1]], r);
    if (len - tail == 1) lower(&prefix1[s[tail]], r);
    if (len - tail == 2) lower(&prefix2[(uint32_t)s[tail] << 8 | s[tail + 1]], r);
    for (size_t j = head; j < tail;) {
        size_t k = seq_len(s[j]);
        if (k == 3) lower(&whole[cp3(s + j)], r);
        j += k;
    }
}

/* 1 when the char s[0, 3) = b0 b1 b2 may start whole. Its bytes must merge on their own into its
 * token: first b0b1 (rank r01) or b1b2 (r12), whichever is lower, then the whole char (full). Each
 * partial state exposes edges to the neighbours, and every token joining an edge with outside
 * bytes must outrank the internal merge pending in that state:
 *   b0b1 first: [b0|b1|b2] pending r01, then [b0b1|b2] pending full;
 *   b1b2 first: [b0|b1|b2] pending r12, then [b0|b1b2] pending full.
 * An edge present in both states must outrank both (m = the larger). Tokens holding the whole
 * char plus more must outrank m too (they are candidates only for a merge started from chars). */
static int may_start_whole(const k3_rank_table *t, const uint8_t *s, const uint32_t *suffix1,
                           const uint32_t *suffix2, const uint32_t *prefix1, const uint32_t *prefix2,
                           const uint32_t *whole) {
    uint32_t full = k3_rank_lookup(t, s, 3);
    uint32_t r01 = t->pair[(uint32_t)s[0] << 8 | s[1]], r12 = t->pair[(uint32_t)s[1] << 8 | s[2]];
    uint32_t first = r01 < r12 ? r01 : r12;
    if (full == K3_NO_RANK || first == K3_NO_RANK) return 0;
    uint32_t m = first > full ? first : full;
    uint32_t p1 = prefix1[s[0]], p2 = prefix2[(uint32_t)s[0] << 8 | s[1]];
    uint32_t s1 = suffix1[s[2]], s2 = suffix2[(uint32_t)s[1] << 8 | s[2]];
    uint32_t w = whole[cp3(s)];
    if (w <= m) return 0;
    if (r01 < r12) return p1 > r01 && p2 > full && s1 > m;
    return s1 > r12 && s2 > full && p1 > m;
}

int k3_char_start_init(k3_rank_table *t) {
    uint32_t *tab = malloc((256 + 65536) * 2 * sizeof *tab + 65536 * sizeof *tab);
    t->char3 = malloc(65536 * sizeof *t->char3);
    if (!tab || !t->char3) {
        free(tab);
        free(t->char3);
        t->char3 = NULL;
        return -1;
    }
    uint32_t *suffix1 = tab, *suffix2 = suffix1 + 256, *prefix1 = suffix2 + 65536, *prefix2 = prefix1 + 256,
             *whole = prefix2 + 65536;
    for (size_t i = 0; i < (256 + 65536) * 2 + 65536; i++) tab[i] = K3_NO_RANK;
    for (size_t k = 0; k < t->n; k++)
        scan_token(t->pool + t->offsets[k], t->offsets[k + 1] - t->offsets[k], t->ranks[k], suffix1, suffix2,
                   prefix1, prefix2, whole);
    for (uint32_t c = 0; c < 65536; c++) {
        t->char3[c] = K3_NO_RANK;
        if (c < 0x800 || (c >= 0xD800 && c < 0xE000)) continue;
        uint8_t s[3] = {(uint8_t)(0xE0 | c >> 12), (uint8_t)(0x80 | (c >> 6 & 0x3F)), (uint8_t)(0x80 | (c & 0x3F))};
        if (may_start_whole(t, s, suffix1, suffix2, prefix1, prefix2, whole)) t->char3[c] = k3_rank_lookup(t, s, 3);
    }
    free(tab);
    return 0;
}
