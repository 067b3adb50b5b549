/*
 * bpe.c: merge the adjacent pair whose concatenated bytes have the lowest rank (ties: leftmost)
 * until no concatenation is a token.
 * - linear: tiktoken's `_byte_pair_merge` (parts of (start, rank), one scan per merge), O(n^2)
 *   but fastest for the short pieces that make up almost all text;
 * - heap: a linked list of parts and a min-heap of (rank << 32 | start) with lazy invalidation:
 *   an entry is stale when its part is gone or its pair now has another rank (a (start, rank)
 *   pair names one byte span, since ranks are unique). Same merges, same order, O(n log n).
 */
#include "bpe.h"
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ char start */

/* Rank of the 3-byte char at s[i] when char_start.c cleared it, for its actual neighbours (none,
 * ASCII or multi-byte on each side), to start the merge whole; else K3_NO_RANK. Needs a piece
 * already checked as well-formed UTF-8 (char_start_ok). */
static inline uint32_t whole3(const k3_rank_table *t, const uint8_t *s, size_t n, size_t i) {
    if ((s[i] & 0xF0) != 0xE0) return K3_NO_RANK;
    uint32_t c = ((uint32_t)(s[i] & 0x0F) << 12) | ((uint32_t)(s[i + 1] & 0x3F) << 6) | (s[i + 2] & 0x3F);
    int left = i == 0 ? 0 : s[i - 1] < 0x80 ? 1 : 2, right = i + 3 == n ? 0 : s[i + 3] < 0x80 ? 1 : 2;
    return t->char3_ok[c] >> (left * 3 + right) & 1 ? t->char3[c] : K3_NO_RANK;
}

/* 1 when the merge of piece s[0, n) may start with some 3-byte characters whole (the others as
 * bytes): the piece is well-formed UTF-8 (char_start.c reasons only about tokens that can occur
 * in such text) and at least one character is cleared (else nothing to gain). */
static int char_start_ok(const k3_rank_table *t, const uint8_t *s, size_t n) {
    if (!t->char3) return 0;
    int any = 0;
    for (size_t i = 0; i < n;) {
        size_t k = s[i] < 0x80 ? 1 : s[i] >= 0xC2 && s[i] < 0xE0 ? 2 : s[i] >= 0xE0 && s[i] < 0xF0 ? 3
                 : s[i] >= 0xF0 && s[i] < 0xF5 ? 4 : 0;
        if (k == 0 || i + k > n) return 0;
        for (size_t j = 1; j < k; j++)
            if ((s[i + j] & 0xC0) != 0x80) return 0;
        if (k == 3 && !any && whole3(t, s, n, i) != K3_NO_RANK) any = 1;
        i += k;
    }
    return any;
}

/* Rank and length of the first part at s[i] (after char_start_ok): a cleared char, or one byte. */
static inline uint32_t char_rank(const k3_rank_table *t, const uint8_t *s, size_t n, size_t i, size_t *len) {
    uint32_t r = whole3(t, s, n, i);
    if (r != K3_NO_RANK) {
        *len = 3;
        return r;
    }
    *len = 1;
    return t->single[s[i]];
}

/* ------------------------------------------------------------------ linear */

static size_t linear_merge(const k3_rank_table *t, const uint8_t *s, size_t n, uint32_t *out) {
    /* pos: part starts (+ the end); rank: rank of part i joined with part i+1; tok: rank of part i
     * itself (a merged part's rank is the pair rank that merged it, so no lookup at the end). */
    uint32_t pos[K3_HEAP_THRESHOLD + 1], rank[K3_HEAP_THRESHOLD + 1], tok[K3_HEAP_THRESHOLD + 1];
    size_t count; /* boundaries */
    if (char_start_ok(t, s, n)) {
        size_t m = 0;
        for (size_t i = 0, len; i < n; i += len) {
            pos[m] = (uint32_t)i;
            tok[m++] = char_rank(t, s, n, i, &len);
        }
        pos[m] = (uint32_t)n;
        for (size_t i = 0; i + 1 < m; i++) rank[i] = k3_rank_lookup(t, s + pos[i], pos[i + 2] - pos[i]);
        rank[m - 1] = K3_NO_RANK;
        rank[m] = K3_NO_RANK;
        count = m + 1;
    } else {
        for (size_t i = 0; i <= n; i++) pos[i] = (uint32_t)i;
        for (size_t i = 0; i < n; i++) tok[i] = t->single[s[i]];
        for (size_t i = 0; i + 1 < n; i++) rank[i] = t->pair[(size_t)s[i] << 8 | s[i + 1]];
        rank[n - 1] = K3_NO_RANK;
        rank[n] = K3_NO_RANK;
        count = n + 1;
    }
    for (;;) {
        uint32_t best = K3_NO_RANK;
        size_t at = 0;
        for (size_t i = 0; i + 1 < count; i++)
            if (rank[i] < best) {
                best = rank[i];
                at = i;
            }
        if (best == K3_NO_RANK) break;
        memmove(pos + at + 1, pos + at + 2, (count - at - 2) * sizeof *pos);
        memmove(rank + at + 1, rank + at + 2, (count - at - 2) * sizeof *rank);
        tok[at] = best;
        if (count - at > 3) memmove(tok + at + 1, tok + at + 2, (count - at - 3) * sizeof *tok);
        count--;
        if (at > 0 && at + 2 < count)
            k3_rank_lookup2(t, s + pos[at], pos[at + 2] - pos[at], s + pos[at - 1], pos[at + 1] - pos[at - 1], &rank[at],
                            &rank[at - 1]);
        else if (at + 2 < count)
            rank[at] = k3_rank_lookup(t, s + pos[at], pos[at + 2] - pos[at]);
        else {
            rank[at] = K3_NO_RANK;
            if (at > 0) rank[at - 1] = k3_rank_lookup(t, s + pos[at - 1], pos[at + 1] - pos[at - 1]);
        }
    }
    if (out) memcpy(out, tok, (count - 1) * sizeof *tok);
    return count - 1;
}

/* ------------------------------------------------------------------ heap */

static void heap_push(uint64_t *h, size_t *n, uint64_t v) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (h[p] <= v) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = v;
}

/* Moves h[i] down to its place in the heap h[0, m). */
static void sift_down(uint64_t *h, size_t m, size_t i) {
    uint64_t v = h[i];
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= m) break;
        if (c + 1 < m && h[c + 1] < h[c]) c++;
        if (h[c] >= v) break;
        h[i] = h[c];
        i = c;
    }
    h[i] = v;
}

static uint64_t heap_pop(uint64_t *h, size_t *n) {
    uint64_t top = h[0];
    h[0] = h[--*n];
    if (*n) sift_down(h, *n, 0);
    return top;
}

static int reserve(k3_bpe_scratch *sc, size_t n) {
    if (sc->cap < n) {
        uint32_t *a = realloc(sc->next, n * sizeof *a), *b = a ? realloc(sc->prev, n * sizeof *b) : NULL;
        if (a) sc->next = a;
        if (b) sc->prev = b;
        uint32_t *c = b ? realloc(sc->pair_rank, n * sizeof *c) : NULL;
        if (c) sc->pair_rank = c;
        uint32_t *d = c ? realloc(sc->tok, n * sizeof *d) : NULL;
        if (d) sc->tok = d;
        if (!a || !b || !c || !d) return -1;
        sc->cap = n;
    }
    /* Each merge pushes at most two entries: n initial + 2n. */
    if (sc->heap_cap < 3 * n) {
        uint64_t *h = realloc(sc->heap, 3 * n * sizeof *h);
        if (!h) return -1;
        sc->heap = h;
        sc->heap_cap = 3 * n;
    }
    return 0;
}

#define NIL 0xFFFFFFFFu

static size_t heap_merge(const k3_rank_table *t, const uint8_t *s, size_t n, uint32_t *out, k3_bpe_scratch *sc) {
    if (reserve(sc, n)) return (size_t)-1;
    uint32_t *next = sc->next, *prev = sc->prev, *pr = sc->pair_rank, *tok = sc->tok;
    uint64_t *heap = sc->heap;
    size_t hn = 0;
    if (char_start_ok(t, s, n)) {
        /* Parts are whole characters; arrays stay indexed by byte offset of the part start. */
        uint32_t last = NIL;
        for (size_t i = 0, len; i < n; i += len) {
            tok[i] = char_rank(t, s, n, i, &len);
            prev[i] = last;
            next[i] = i + len < n ? (uint32_t)(i + len) : NIL;
            last = (uint32_t)i;
        }
        for (uint32_t i = 0; i != NIL; i = next[i]) {
            uint32_t j = next[i];
            pr[i] = K3_NO_RANK;
            if (j == NIL) break;
            uint32_t e = next[j] == NIL ? (uint32_t)n : next[j];
            pr[i] = k3_rank_lookup(t, s + i, e - i);
            if (pr[i] != K3_NO_RANK) heap[hn++] = (uint64_t)pr[i] << 32 | i;
        }
    } else {
        for (size_t i = 0; i < n; i++) {
            next[i] = i + 1 < n ? (uint32_t)(i + 1) : NIL;
            prev[i] = i ? (uint32_t)(i - 1) : NIL;
            tok[i] = t->single[s[i]];
        }
        for (size_t i = 0; i + 1 < n; i++) {
            pr[i] = t->pair[(size_t)s[i] << 8 | s[i + 1]];
            if (pr[i] != K3_NO_RANK) heap[hn++] = (uint64_t)pr[i] << 32 | i;
        }
        pr[n - 1] = K3_NO_RANK;
    }
    for (size_t i = hn / 2; i-- > 0;) sift_down(heap, hn, i); /* Floyd: O(n) heap build */
    while (hn) {
        uint64_t k = heap_pop(heap, &hn);
        uint32_t i = (uint32_t)k, r = (uint32_t)(k >> 32);
        /* A removed part has pair_rank NIL-ed below, so one test covers both staleness cases. */
        if (pr[i] != r) continue;
        uint32_t j = next[i];
        tok[i] = r;
        next[i] = next[j];
        if (next[j] != NIL) prev[next[j]] = i;
        pr[j] = K3_NO_RANK;
        /* Refresh the pairs (i, next) and (prev, i), looked up together. */
        uint32_t p = prev[i], nr = K3_NO_RANK, prr = K3_NO_RANK;
        uint32_t end_i = next[i] == NIL ? (uint32_t)n : next[i];
        if (next[i] != NIL) {
            uint32_t e = next[next[i]] == NIL ? (uint32_t)n : next[next[i]];
            if (p != NIL)
                k3_rank_lookup2(t, s + i, e - i, s + p, end_i - p, &nr, &prr);
            else
                nr = k3_rank_lookup(t, s + i, e - i);
        } else if (p != NIL)
            prr = k3_rank_lookup(t, s + p, end_i - p);
        pr[i] = nr;
        if (nr != K3_NO_RANK) heap_push(heap, &hn, (uint64_t)nr << 32 | i);
        if (p != NIL) {
            pr[p] = prr;
            if (prr != K3_NO_RANK) heap_push(heap, &hn, (uint64_t)prr << 32 | p);
        }
    }
    size_t count = 0;
    for (uint32_t i = 0; i != NIL; i = next[i]) {
        if (out) out[count] = tok[i];
        count++;
    }
    return count;
}

/* ------------------------------------------------------------------ entry */

size_t k3_bpe_encode(const k3_rank_table *t, const uint8_t *piece, size_t len, uint32_t *out, k3_bpe_scratch *scratch,
                     int strategy) {
    if (len == 0) return 0;
    uint32_t whole = strategy == 0 ? k3_rank_lookup(t, piece, len) : K3_NO_RANK;
    if (whole != K3_NO_RANK) {
        if (out) out[0] = whole;
        return 1;
    }
    int heap = strategy == 2 || (strategy == 0 && len >= K3_HEAP_THRESHOLD);
    if (!heap && len > K3_HEAP_THRESHOLD) heap = 1; /* the linear path's stack arrays hold 100 */
    return heap ? heap_merge(t, piece, len, out, scratch) : linear_merge(t, piece, len, out);
}

void k3_bpe_scratch_free(k3_bpe_scratch *s) {
    free(s->next);
    free(s->prev);
    free(s->pair_rank);
    free(s->tok);
    free(s->heap);
    memset(s, 0, sizeof *s);
}
