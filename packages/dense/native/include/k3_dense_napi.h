/*
 * k3_dense_napi.h: for addons that call through @k3/dense's table. Their JS side passes the
 * external from `nativeApi()` to the addon's init; this takes it from the arguments and checks
 * version and size before anyone calls through it.
 */
#ifndef K3_DENSE_NAPI_H
#define K3_DENSE_NAPI_H

#include <napi.h>
#include <string>
#include "k3_dense.h"
#include "k3_napi.h"

namespace k3 {

/* The table in info[index], or nullptr after throwing an error that names `where` and the mismatch. */
inline const k3_dense_api *get_dense_api(const Napi::CallbackInfo &info, size_t index, const char *where) {
    Napi::Env env = info.Env();
    if (info.Length() <= index || !info[index].IsExternal()) {
        fail(env, where, "argument 'api' must be the external returned by @k3/dense nativeApi()");
        return nullptr;
    }
    const k3_dense_api *api = info[index].As<Napi::External<k3_dense_api>>().Data();
    if (api == nullptr || api->abi_version != K3_DENSE_ABI_VERSION || api->struct_size < sizeof(k3_dense_api)) {
        fail(env, where,
             "@k3/dense ABI version " + std::to_string(api ? api->abi_version : 0) + " (table of " +
                 std::to_string(api ? api->struct_size : 0) + " bytes), expected " +
                 std::to_string(K3_DENSE_ABI_VERSION) + " with at least " + std::to_string(sizeof(k3_dense_api)) +
                 " bytes: install matching @k3 package versions",
             true);
        return nullptr;
    }
    return api;
}

}  // namespace k3

#endif
