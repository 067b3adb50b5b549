/*
 * st_dtype.c: the 22 dtypes of safetensors 0.8 and their bit sizes. Codes follow
 * src/dtypes.ts (the official enum order); names are case-sensitive.
 */
#include <string.h>
#include "k3_safetensors.h"

const char *const st_dtype_names[ST_N_DTYPES] = {
    "BOOL", "F4",  "F6_E2M3", "F6_E3M2", "U8",   "I8",  "F8_E5M2", "F8_E4M3", "F8_E8M0", "F8_E4M3FNUZ", "F8_E5M2FNUZ",
    "I16",  "U16", "F16",     "BF16",    "I32",  "U32", "F32",     "C64",     "F64",     "I64",         "U64",
};

const uint8_t st_dtype_bits[ST_N_DTYPES] = {8, 4, 6, 6, 8, 8, 8, 8, 8, 8, 8, 16, 16, 16, 16, 32, 32, 32, 64, 64, 64, 64};

/* strlen of each name (the lookup runs once per tensor: 497k times for K3). */
static const uint8_t name_length[ST_N_DTYPES] = {4, 2, 7, 7, 2, 2, 7, 7, 7, 11, 11, 3, 3, 3, 4, 3, 3, 3, 3, 3, 3, 3};

int st_dtype_code(const uint8_t *s, size_t len) {
    if (len == 0) return -1;
    for (int i = 0; i < ST_N_DTYPES; i++)
        if (name_length[i] == len && st_dtype_names[i][0] == s[0] && st_dtype_names[i][len - 1] == s[len - 1] &&
            memcmp(s, st_dtype_names[i], len) == 0)
            return i;
    return -1;
}
