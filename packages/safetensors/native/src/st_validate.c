/*
 * st_validate.c: the official layout rules, as src/scan.ts validateLayout: sorted by
 * (begin, end, header order), tensors must tile the data from 0 with no gap or overlap, each
 * exactly shape x dtype bytes (overflow-checked at 2^53-1), and cover the file to its end.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "k3_safetensors.h"

static int by_offsets(const void *a, const void *b, void *ctx) {
    uint32_t i = *(const uint32_t *)a, j = *(const uint32_t *)b;
    const st_table *t = ctx;
    if (t->begin[i] != t->begin[j]) return t->begin[i] < t->begin[j] ? -1 : 1;
    if (t->end[i] != t->end[j]) return t->end[i] < t->end[j] ? -1 : 1;
    return i < j ? -1 : i > j ? 1 : 0;
}

static void format_shape(const st_table *t, uint32_t i, char *out, size_t cap) {
    uint32_t a = t->shape_start[i], b = t->shape_start[i + 1];
    size_t len = 0;
    len += (size_t)snprintf(out + len, cap - len, "[");
    for (uint32_t k = a; k < b && k - a < 16 && len < cap; k++)
        len += (size_t)snprintf(out + len, cap - len, "%s%llu", k > a ? ", " : "", (unsigned long long)t->dims[k]);
    if (len < cap && b - a > 16) len += (size_t)snprintf(out + len, cap - len, ", ...");
    if (len < cap) snprintf(out + len, cap - len, "]");
}

/* Element count, or -1 past 2^53-1 (left to right, like the official checked_mul). */
static int64_t shape_elements(const st_table *t, uint32_t i) {
    uint64_t n = 1;
    for (uint32_t k = t->shape_start[i]; k < t->shape_start[i + 1]; k++) {
        uint64_t d = (uint64_t)t->dims[k];
        if (d == 0) {
            n = 0;
            continue;
        }
        if (n > ST_MAX_SAFE / d) return -1;
        n *= d;
    }
    return (int64_t)n;
}

static int tensor_fail(st_table *t, uint32_t i, st_error *e) {
    st_error_set_tensor(e, t->name_bytes + t->name_start[i], t->name_start[i + 1] - t->name_start[i]);
    return -1;
}

int st_validate_layout(st_table *t, st_error *e) {
    uint32_t count = t->count;
    uint32_t *order = malloc((count + 1) * sizeof(uint32_t));
    if (!order) return st_fail(e, ST_OUT_OF_MEMORY, -1, "out of memory while validating the header"), -1;
    int sorted = 1;
    for (uint32_t i = 0; i < count; i++) {
        order[i] = i;
        if (i > 0 && (t->begin[i] < t->begin[i - 1] || (t->begin[i] == t->begin[i - 1] && t->end[i] < t->end[i - 1])))
            sorted = 0;
    }
    if (!sorted) {
        qsort_r(order, count, sizeof(uint32_t), by_offsets, t);
    }
    uint64_t start = 0;
    char shape[400];
    for (uint32_t k = 0; k < count; k++) {
        uint32_t i = order[k];
        uint64_t begin = (uint64_t)t->begin[i], end = (uint64_t)t->end[i];
        if (begin != start || end < begin) {
            st_fail(e, ST_INVALID_OFFSET, -1, "data_offsets [%llu, %llu] do not continue the data at byte %llu",
                    (unsigned long long)begin, (unsigned long long)end, (unsigned long long)start);
            free(order);
            return tensor_fail(t, i, e);
        }
        const char *dt = st_dtype_names[t->dtype[i]];
        int64_t elements = shape_elements(t, i);
        if (elements < 0) {
            format_shape(t, i, shape, sizeof shape);
            st_fail(e, ST_VALIDATION_OVERFLOW, -1, "shape %s has more than 2^53-1 elements", shape);
            free(order);
            return tensor_fail(t, i, e);
        }
        unsigned bits = st_dtype_bits[t->dtype[i]];
        uint64_t bytes;
        if (bits >= 8) {
            uint64_t per = bits / 8;
            if ((uint64_t)elements > ST_MAX_SAFE / per) {
                format_shape(t, i, shape, sizeof shape);
                st_fail(e, ST_VALIDATION_OVERFLOW, -1, "shape %s of %s needs more than 2^53-1 bytes", shape, dt);
                free(order);
                return tensor_fail(t, i, e);
            }
            bytes = (uint64_t)elements * per;
        } else if ((bits == 4 && elements % 2 != 0) || (bits == 6 && elements % 4 != 0)) {
            format_shape(t, i, shape, sizeof shape);
            st_fail(e, ST_MISALIGNED_SLICE, -1, "shape %s of %s does not fill a whole number of bytes", shape, dt);
            free(order);
            return tensor_fail(t, i, e);
        } else
            bytes = bits == 4 ? (uint64_t)elements / 2 : (uint64_t)elements / 4 * 3;
        if (end - begin != bytes) {
            format_shape(t, i, shape, sizeof shape);
            st_fail(e, ST_TENSOR_INVALID_INFO, -1, "shape %s of %s needs %llu bytes but data_offsets [%llu, %llu] hold %llu",
                    shape, dt, (unsigned long long)bytes, (unsigned long long)begin, (unsigned long long)end,
                    (unsigned long long)(end - begin));
            free(order);
            return tensor_fail(t, i, e);
        }
        start = end;
    }
    free(order);
    uint64_t data_length = t->file_size - 8 - t->header_length;
    if (start != data_length) {
        st_fail(e, ST_METADATA_INCOMPLETE_BUFFER, -1, "the tensors cover %llu data bytes but the file holds %llu after the header",
                (unsigned long long)start, (unsigned long long)data_length);
        return -1;
    }
    return 0;
}
