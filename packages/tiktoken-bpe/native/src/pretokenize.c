/*
 * pretokenize.c: tiktoken's find_iter over the cl100k / o200k / Kimi patterns, written by hand.
 * Each alternative of the pattern is one step, tried in pattern order (leftmost-first); the
 * greedy quantifiers' backtracking is resolved analytically (see the comments). Mirrors
 * src/pretokenize.ts line for line; both are fuzzed against tiktoken.
 */
#include "pretokenize.h"
#include "unicode_class.h"
#include "utf8.h"

#define CR 0x0D
#define LF 0x0A

/* ------------------------------------------------------------------ small helpers */

static inline unsigned cls_at(const uint8_t *s, size_t i, size_t end, size_t *len) {
    return k3_ucls(k3_utf8_decode(s, i, end, len));
}

/* Advance over code points having a bit of `want` and none of `not`. */
static size_t scan(const uint8_t *s, size_t i, size_t end, unsigned want, unsigned not) {
    while (i < end) {
        size_t l;
        unsigned k = cls_at(s, i, end, &l);
        if (!(k & want) || (k & not)) break;
        i += l;
    }
    return i;
}

/* ASCII case folding for the contraction letters, plus U+017F (long s folds to s). */
static inline uint32_t fold(uint32_t cp) {
    if (cp >= 'A' && cp <= 'Z') return cp + 32;
    if (cp == 0x17F) return 's';
    return cp;
}

/* (?i:'s|'t|'re|'ve|'m|'ll|'d) at p (an apostrophe); returns the end or (size_t)-1. */
static size_t contraction(const uint8_t *s, size_t p, size_t end) {
    size_t la, lb;
    if (p + 1 >= end) return (size_t)-1;
    uint32_t a = fold(k3_utf8_decode(s, p + 1, end, &la));
    if (a == 's') return p + 1 + la;
    if (a == 't' || a == 'm' || a == 'd') return p + 2;
    if ((a == 'r' || a == 'v' || a == 'l') && p + 2 < end) {
        uint32_t b = fold(k3_utf8_decode(s, p + 2, end, &lb));
        if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return p + 3;
    }
    return (size_t)-1;
}

/* [U]*[W]+ at i. Greedy U* gives back code points until W+ can start: either right after the
 * U-run, or at the last U-run member that is also in W (Lm, Lo, M). */
static size_t upper_star_lower_plus(const uint8_t *s, size_t i, size_t end, unsigned not) {
    size_t u = i, last_lower = (size_t)-1, l;
    while (u < end) {
        unsigned k = cls_at(s, u, end, &l);
        if (!(k & K3_CLS_UPPERISH) || (k & not)) break;
        if (k & K3_CLS_LOWERISH) last_lower = u;
        u += l;
    }
    if (u < end) {
        unsigned k = cls_at(s, u, end, &l);
        if ((k & K3_CLS_LOWERISH) && !(k & not)) return scan(s, u + l, end, K3_CLS_LOWERISH, not);
    }
    if (last_lower != (size_t)-1) {
        k3_utf8_decode(s, last_lower, end, &l);
        return last_lower + l;
    }
    return (size_t)-1;
}

/* [U]+[W]* at i. */
static size_t upper_plus_lower_star(const uint8_t *s, size_t i, size_t end, unsigned not) {
    size_t u = scan(s, i, end, K3_CLS_UPPERISH, not);
    if (u == i) return (size_t)-1;
    return scan(s, u, end, K3_CLS_LOWERISH, not);
}

/* ------------------------------------------------------------------ the splitter */

size_t k3_piece_end(const uint8_t *s, size_t p, size_t end, k3_family family) {
    size_t lc;
    uint32_t c = k3_utf8_decode(s, p, end, &lc);
    unsigned cls = k3_ucls(c);
    size_t q = p + lc, r;
    unsigned han = family == K3_FAMILY_KIMI ? K3_CLS_HAN : 0;

    /* Kimi: [\p{Han}]+ */
    if (han && (cls & K3_CLS_HAN)) return scan(s, q, end, K3_CLS_HAN, 0);

    int prefix_ok = c != CR && c != LF && !(cls & (K3_CLS_LETTER | K3_CLS_NUMBER));
    if (family == K3_FAMILY_CL100K) {
        /* (?i:'s|'t|'re|'ve|'m|'ll|'d) */
        if (c == '\'' && (r = contraction(s, p, end)) != (size_t)-1) return r;
        /* [^\r\n\p{L}\p{N}]?\p{L}+ */
        if (prefix_ok && q < end) {
            size_t l;
            if (cls_at(s, q, end, &l) & K3_CLS_LETTER) return scan(s, q, end, K3_CLS_LETTER, 0);
        }
        if (cls & K3_CLS_LETTER) return scan(s, q, end, K3_CLS_LETTER, 0);
    } else {
        /* [^\r\n\p{L}\p{N}]?[U]*[W]+(?i:...)?  then  [^\r\n\p{L}\p{N}]?[U]+[W]*(?i:...)? */
        r = prefix_ok ? upper_star_lower_plus(s, q, end, han) : (size_t)-1;
        if (r == (size_t)-1) r = upper_star_lower_plus(s, p, end, han);
        if (r == (size_t)-1 && prefix_ok) r = upper_plus_lower_star(s, q, end, han);
        if (r == (size_t)-1) r = upper_plus_lower_star(s, p, end, han);
        if (r != (size_t)-1) {
            size_t k = r < end && s[r] == '\'' ? contraction(s, r, end) : (size_t)-1;
            return k != (size_t)-1 ? k : r;
        }
    }

    /* \p{N}{1,3} */
    if (cls & K3_CLS_NUMBER) {
        size_t e = q, l;
        for (int n = 1; n < 3 && e < end && (cls_at(s, e, end, &l) & K3_CLS_NUMBER); n++) e += l;
        return e;
    }

    /* ' ?[^\s\p{L}\p{N}]+[\r\n]*'  (o200k: [\r\n/]*) */
    const unsigned other = K3_CLS_SPACE | K3_CLS_LETTER | K3_CLS_NUMBER;
    size_t run = (size_t)-1, l;
    if (!(cls & other)) run = q;
    else if (c == ' ' && q < end && !(cls_at(s, q, end, &l) & other)) run = q + l;
    if (run != (size_t)-1) {
        size_t e = run;
        while (e < end && !(cls_at(s, e, end, &l) & other)) e += l;
        int slash = family == K3_FAMILY_O200K;
        while (e < end && (s[e] == CR || s[e] == LF || (slash && s[e] == '/'))) e++;
        return e;
    }

    /* Whitespace run [p, j): \s*[\r\n]+ | \s+(?!\S) | \s+ */
    size_t j = p, after_newline = (size_t)-1, last_start = p;
    while (j < end) {
        uint32_t cj = k3_utf8_decode(s, j, end, &l);
        if (!(k3_ucls(cj) & K3_CLS_SPACE)) break;
        last_start = j;
        j += l;
        if (cj == CR || cj == LF) after_newline = j;
    }
    if (after_newline != (size_t)-1) return after_newline; /* \s* backtracks to the last newline */
    if (j >= end) return j;                               /* (?!\S) holds at the end */
    if (last_start > p) return last_start;                /* leave one space for the next piece */
    return j > p ? j : q;                                 /* \s+ of one code point */
}
