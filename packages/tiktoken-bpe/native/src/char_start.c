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
 * Characters that fail the test (or have no token) start as bytes; the argument is unchanged, since
 * it only concerns the candidates involving a char that starts whole.
 *
 * Input pieces are valid UTF-8 when this is used (checked per piece), so only tokens of the form
 * [suffix of a char][whole chars][prefix of a char] can ever be candidates; others are ignored.
 */
#include "char_start.h"
#include <stdlib.h>
#include <string.h>

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

/* Lowest rank of a token joining each edge of a 3-byte char with outside bytes. An edge's outside
 * neighbour inside a piece is ASCII (index 0) or a 3-byte char (index 1); the two are told apart
 * by the token byte next to the edge, so a Han run is not refused for a token " \xe4" it can never
 * meet. `whole`: tokens holding the whole char plus more, by code point. */
typedef struct {
    uint32_t suffix1[2][256], suffix2[2][65536]; /* by the char's last 1 or 2 bytes */
    uint32_t prefix1[2][256], prefix2[2][65536]; /* by its first 1 or 2 bytes */
    uint32_t whole[65536];
} edge_ranks;

static void scan_token(const uint8_t *s, size_t len, uint32_t r, edge_ranks *e) {
    size_t head = 0;
    while (head < len && head < 3 && cont(s[head])) head++;
    /* head == 3: a 4-byte char's suffix; no 3-byte edge there, but whole chars may follow */
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
    if (head == 1 || head == 2) {
        int kind = s[head] >= 0x80; /* byte after the suffix: ASCII or the lead of a char */
        if (head == 1) lower(&e->suffix1[kind][s[0]], r);
        else lower(&e->suffix2[kind][(uint32_t)s[0] << 8 | s[1]], r);
    }
    if (tail < len) {
        int kind = s[tail - 1] >= 0x80; /* byte before the prefix: ASCII or the end of a char */
        if (len - tail == 1) lower(&e->prefix1[kind][s[tail]], r);
        if (len - tail == 2) lower(&e->prefix2[kind][(uint32_t)s[tail] << 8 | s[tail + 1]], r);
    }
    for (size_t j = head; j < tail;) {
        size_t k = seq_len(s[j]);
        if (k == 3) lower(&e->whole[cp3(s + j)], r);
        j += k;
    }
}

/* Bit L * 3 + R set when the char s[0, 3) = b0 b1 b2 may start whole with a left neighbour L and
 * a right neighbour R (0 none, 1 ASCII, 2 a 3-byte char). Its bytes must merge on their own into
 * its token: first b0b1 (rank r01) or b1b2 (r12), whichever is lower, then the whole char (full).
 * Each partial state exposes edges to the neighbours, and every token joining an edge with outside
 * bytes must outrank the internal merge pending in that state:
 *   b0b1 first: [b0|b1|b2] pending r01, then [b0b1|b2] pending full;
 *   b1b2 first: [b0|b1|b2] pending r12, then [b0|b1b2] pending full.
 * An edge present in both states must outrank both (m = the larger). Tokens holding the whole
 * char plus more must outrank m too (they are candidates only for a merge started from chars). */
static uint16_t start_mask(const k3_rank_table *t, const uint8_t *s, const edge_ranks *e) {
    uint32_t full = k3_rank_lookup(t, s, 3);
    uint32_t r01 = t->pair[(uint32_t)s[0] << 8 | s[1]], r12 = t->pair[(uint32_t)s[1] << 8 | s[2]];
    uint32_t first = r01 < r12 ? r01 : r12;
    if (full == K3_NO_RANK || first == K3_NO_RANK) return 0;
    uint32_t m = first > full ? first : full;
    if (e->whole[cp3(s)] <= m) return 0;
    uint16_t mask = 0;
    for (int left = 0; left < 3; left++)
        for (int right = 0; right < 3; right++) {
            uint32_t p1 = left ? e->prefix1[left - 1][s[0]] : K3_NO_RANK;
            uint32_t p2 = left ? e->prefix2[left - 1][(uint32_t)s[0] << 8 | s[1]] : K3_NO_RANK;
            uint32_t s1 = right ? e->suffix1[right - 1][s[2]] : K3_NO_RANK;
            uint32_t s2 = right ? e->suffix2[right - 1][(uint32_t)s[1] << 8 | s[2]] : K3_NO_RANK;
            int ok = r01 < r12 ? p1 > r01 && p2 > full && s1 > m : s1 > r12 && s2 > full && p1 > m;
            /* K3_NO_RANK (no such token) passes every test but "> K3_NO_RANK" never arises: m < it */
            if (ok) mask |= (uint16_t)(1u << (left * 3 + right));
        }
    return mask;
}

int k3_char_start_init(k3_rank_table *t) {
    edge_ranks *e = malloc(sizeof *e);
    t->char3 = malloc(65536 * sizeof *t->char3);
    t->char3_ok = malloc(65536 * sizeof *t->char3_ok);
    if (!e || !t->char3 || !t->char3_ok) {
        free(e);
        free(t->char3);
        free(t->char3_ok);
        t->char3 = NULL;
        t->char3_ok = NULL;
        return -1;
    }
    memset(e, 0xFF, sizeof *e); /* K3_NO_RANK everywhere */
    for (size_t k = 0; k < t->n; k++)
        scan_token(t->pool + t->offsets[k], t->offsets[k + 1] - t->offsets[k], t->ranks[k], e);
    for (uint32_t c = 0; c < 65536; c++) {
        t->char3[c] = K3_NO_RANK;
        t->char3_ok[c] = 0;
        if (c < 0x800 || (c >= 0xD800 && c < 0xE000)) continue;
        uint8_t s[3] = {(uint8_t)(0xE0 | c >> 12), (uint8_t)(0x80 | (c >> 6 & 0x3F)), (uint8_t)(0x80 | (c & 0x3F))};
        t->char3_ok[c] = start_mask(t, s, e);
        if (t->char3_ok[c]) t->char3[c] = k3_rank_lookup(t, s, 3);
    }
    free(e);
    return 0;
}
