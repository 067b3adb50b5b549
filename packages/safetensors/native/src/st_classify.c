/*
 * st_classify.c: the layer/expert grouping rule, step for step as src/classify.ts:
 *   [model. | language_model.model.] layers.{L}. ( (mlp|block_sparse_moe). ( experts.{E}.<x>
 *   | experts.<non-digit> | shared_expert(s).<x> ) )?   -- numbers have 1..9 digits.
 */
#include <string.h>
#include "k3_safetensors.h"

enum { KIND_GLOBAL = 0, KIND_TRUNK = 1, KIND_EXPERT = 2, KIND_SHARED = 3, KIND_FUSED = 4 };

static int starts_at(const uint8_t *s, size_t len, size_t at, const char *prefix) {
    size_t n = strlen(prefix);
    return at + n <= len && memcmp(s + at, prefix, n) == 0;
}

/* 1..9 digits at `at` followed by '.': value and the index after the dot, else 0. */
static int number_then_dot(const uint8_t *s, size_t len, size_t at, int32_t *value, size_t *next) {
    int32_t v = 0;
    size_t i = at;
    /* Up to 10 digits are counted (a 10th means "too long") but only 9 are accumulated:
       10 digits overflow int32_t. */
    while (i < len && i - at < 10 && s[i] >= '0' && s[i] <= '9') {
        if (i - at < 9) v = v * 10 + (s[i] - '0');
        i++;
    }
    size_t digits = i - at;
    if (digits < 1 || digits > 9 || i >= len || s[i] != '.') return 0;
    *value = v;
    *next = i + 1;
    return 1;
}

void st_classify(const uint8_t *s, size_t len, int32_t *layer, int32_t *expert, uint8_t *kind) {
    size_t p = 0, q;
    int32_t l, e;
    *layer = -1;
    *expert = -1;
    *kind = KIND_GLOBAL;
    if (starts_at(s, len, 0, "model.")) p = 6;
    else if (starts_at(s, len, 0, "language_model.model.")) p = 21;
    if (!starts_at(s, len, p, "layers.")) return;
    if (!number_then_dot(s, len, p + 7, &l, &q)) return;
    *layer = l;
    *kind = KIND_TRUNK;
    p = q;
    if (starts_at(s, len, p, "mlp.")) p += 4;
    else if (starts_at(s, len, p, "block_sparse_moe.")) p += 17;
    else return;
    if (starts_at(s, len, p, "experts.")) {
        if (number_then_dot(s, len, p + 8, &e, &q) && q < len) {
            *expert = e;
            *kind = KIND_EXPERT;
            return;
        }
        if (p + 8 < len && !(s[p + 8] >= '0' && s[p + 8] <= '9')) *kind = KIND_FUSED;
        return;
    }
    if (starts_at(s, len, p, "shared_experts.") || starts_at(s, len, p, "shared_expert.")) *kind = KIND_SHARED;
}
