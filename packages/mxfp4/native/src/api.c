/* api.c: the table other addons call through (see k3_mxfp4.h). */
#include "mxfp4.h"
#include "matmul_int8.h"

static const k3_mxfp4_api api = {
    .abi_version = K3_MXFP4_ABI_VERSION,
    .struct_size = sizeof(k3_mxfp4_api),
    .find_bad_scale = k3_mxfp4_find_bad_scale,
    .split_activations = k3_mxfp4_split_activations,
    .matmul_split = k3_mxfp4_matmul_split,
    .matmul = k3_mxfp4_matmul,
    .matmul_int8 = k3_mxfp4_matmul_int8,
    .rows_split = k3_mxfp4_rows_split,
};

const k3_mxfp4_api *k3_mxfp4_get_api(void) { return &api; }
