/*
 * st_error.c: the error record every parser fills. Only the first failure is kept, so a caller
 * can stop at the first check that fails and report exactly what the TS backend reports.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "k3_safetensors.h"

const char *const st_code_names[ST_N_CODES] = {
    "Ok",
    "HeaderTooSmall",
    "HeaderTooLarge",
    "InvalidHeaderLength",
    "InvalidUtf8",
    "InvalidJson",
    "InvalidHeader",
    "InvalidTensorEntry",
    "InvalidMetadata",
    "DuplicateKey",
    "UnknownDtype",
    "InvalidOffset",
    "TensorInvalidInfo",
    "MisalignedSlice",
    "ValidationOverflow",
    "MetadataIncompleteBuffer",
    "InvalidIndex",
    "TensorNotInShard",
    "TensorNotInIndex",
    "DuplicateTensor",
    "IoError",
    "OutOfMemory",
};

void st_error_clear(st_error *e) {
    free(e->tensor);
    memset(e, 0, sizeof *e);
    e->position = -1;
    e->shard = -1;
}

int st_fail(st_error *e, st_code code, int64_t position, const char *fmt, ...) {
    if (e->code != ST_OK) return 0;
    e->code = code;
    e->position = position;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->detail, sizeof e->detail, fmt, ap);
    va_end(ap);
    return 0;
}

void st_error_set_tensor(st_error *e, const uint8_t *name, size_t len) {
    free(e->tensor);
    e->tensor = malloc(len + 1);
    if (!e->tensor) {
        e->tensor_len = 0;
        return;
    }
    memcpy(e->tensor, name, len);
    e->tensor[len] = 0;
    e->tensor_len = len;
}
