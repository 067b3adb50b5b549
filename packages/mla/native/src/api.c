/* api.c: the @k3/dense table this addon runs on (one pool, one SIMD level per process). */
#include "k3_mla.h"

static const k3_dense_api *dense_api;

int k3_mla_init(const k3_dense_api *api) {
    if (!api || api->abi_version != K3_DENSE_ABI_VERSION || api->struct_size < sizeof(k3_dense_api)) return -1;
    dense_api = api;
    return 0;
}

const k3_dense_api *k3_mla_dense(void) { return dense_api; }
