/*
 * ops_topk.c: the k largest values, descending. A min-heap of size k keyed by the ranking below
 * keeps it O(n log k) for a 163,840-entry vocabulary.
 *
 * Ranking: a before b iff a > b, or a == b and index(a) < index(b). NaN ranks below every number
 * (including -inf); among NaNs the lower index comes first. -0 and +0 are equal (index decides).
 */
#include <math.h>
#include "ops.h"

/* 1 if (va, ia) ranks strictly before (vb, ib). */
static int ranks_before(float va, int32_t ia, float vb, int32_t ib) {
    int na = isnan(va), nb = isnan(vb);
    if (na != nb) return nb;               /* the number beats the NaN */
    if (!na && va != vb) return va > vb;
    return ia < ib;
}

/* Heap root = the WORST of the kept entries. */
static void sift_down(int32_t *idx, float *val, size_t n, size_t i) {
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, worst = i;
        if (l < n && ranks_before(val[worst], idx[worst], val[l], idx[l])) worst = l;
        if (r < n && ranks_before(val[worst], idx[worst], val[r], idx[r])) worst = r;
        if (worst == i) return;
        int32_t ti = idx[i]; idx[i] = idx[worst]; idx[worst] = ti;
        float tv = val[i]; val[i] = val[worst]; val[worst] = tv;
        i = worst;
    }
}

void k3_top_k(const float *values, size_t n, size_t k, int32_t *out_index, float *out_value) {
    if (k == 0) return;
    for (size_t i = 0; i < k; i++) { out_index[i] = (int32_t)i; out_value[i] = values[i]; }
    for (size_t i = k / 2; i-- > 0;) sift_down(out_index, out_value, k, i);
    for (size_t i = k; i < n; i++) {
        if (ranks_before(values[i], (int32_t)i, out_value[0], out_index[0])) {
            out_index[0] = (int32_t)i;
            out_value[0] = values[i];
            sift_down(out_index, out_value, k, 0);
        }
    }
    /* Heap sort: repeatedly move the worst to the end -> best first. */
    for (size_t end = k; end > 1; end--) {
        int32_t ti = out_index[0]; out_index[0] = out_index[end - 1]; out_index[end - 1] = ti;
        float tv = out_value[0]; out_value[0] = out_value[end - 1]; out_value[end - 1] = tv;
        sift_down(out_index, out_value, end - 1, 0);
    }
}
