// compute_addon.cc: N-API glue for the MoE compute kernels (moe_compute.h). Checks every argument
// (types, byte lengths, row indices) before a kernel touches memory; runs on @k3/dense's table.
#include <napi.h>
#include <string>
#include <vector>
#include "k3_napi.h"
#include "k3_dense_napi.h"
extern "C" {
#include "moe_compute.h"
#include "moe_mxfp4.h"
}

static const k3_dense_api *dense_api = nullptr;
static const k3_mxfp4_api *mxfp4_api = nullptr;

static bool ready(Napi::Env env, const char *fn) {
    if (dense_api) return true;
    return k3::fail(env, fn, "the addon was not initialised with @k3/dense's nativeApi()");
}

static Napi::Value InitCompute(const Napi::CallbackInfo &info) {
    const k3_dense_api *api = k3::get_dense_api(info, 0, "@k3/moe-stream initCompute");
    if (api) dense_api = api;
    return info.Env().Undefined();
}

// initMxfp4(api): @k3/mxfp4's nativeApi() table (its kernels for the MXFP4 experts), version and size checked.
static Napi::Value InitMxfp4(const Napi::CallbackInfo &info) {
    Napi::Env env = info.Env();
    const char *fn = "@k3/moe-stream initMxfp4";
    if (info.Length() < 1 || !info[0].IsExternal())
        return k3::fail(env, fn, "argument 'api' must be the external returned by @k3/mxfp4 nativeApi()"), env.Undefined();
    const k3_mxfp4_api *api = info[0].As<Napi::External<k3_mxfp4_api>>().Data();
    if (api == nullptr || api->abi_version != K3_MXFP4_ABI_VERSION || api->struct_size < sizeof(k3_mxfp4_api))
        return k3::fail(env, fn,
                        "@k3/mxfp4 ABI version " + std::to_string(api ? api->abi_version : 0) + " (table of " +
                            std::to_string(api ? api->struct_size : 0) + " bytes), expected " +
                            std::to_string(K3_MXFP4_ABI_VERSION) + " with at least " + std::to_string(sizeof(k3_mxfp4_api)) +
                            " bytes: install matching @k3 package versions",
                        true),
               env.Undefined();
    mxfp4_api = api;
    return env.Undefined();
}

// An Int32Array of exactly `count` values, each in [0, limit).
static bool rows_arg(const Napi::CallbackInfo &info, size_t index, const char *fn, const char *name, size_t count,
                     size_t limit, const int32_t **out) {
    Napi::Env env = info.Env();
    if (info.Length() <= index || !info[index].IsTypedArray() ||
        info[index].As<Napi::TypedArray>().TypedArrayType() != napi_int32_array)
        return k3::fail(env, fn, std::string("argument '") + name + "' must be an Int32Array");
    Napi::Int32Array a = info[index].As<Napi::Int32Array>();
    if (a.ElementLength() < count)
        return k3::fail(env, fn, std::string("argument '") + name + "' has " + std::to_string(a.ElementLength()) +
                                     " values, needs " + std::to_string(count), true);
    for (size_t i = 0; i < count; i++)
        if (a[i] < 0 || (size_t)a[i] >= limit)
            return k3::fail(env, fn, std::string("argument '") + name + "'[" + std::to_string(i) + "] = " +
                                         std::to_string(a[i]) + " is outside [0, " + std::to_string(limit) + ")", true);
    *out = a.Data();
    return true;
}

// moeExperts(mats, rows, inDim, inter, outDim, bf16, act, beta1, beta2, x, xRow, y, yRow, work)
//   mats: [w1, w3, w2] per expert (views of bf16 bits or f32 values); rows: Int32Array, per expert.
static Napi::Value MoeExperts(const Napi::CallbackInfo &info) {
    Napi::Env env = info.Env();
    const char *fn = "moeExperts";
    if (!ready(env, fn)) return env.Undefined();
    size_t in_dim, inter, out_dim, act;
    if (!k3::get_size(info, 2, fn, "inDim", &in_dim) || !k3::get_size(info, 3, fn, "inter", &inter) ||
        !k3::get_size(info, 4, fn, "outDim", &out_dim) || !k3::get_size(info, 6, fn, "act", &act))
        return env.Undefined();
    if (in_dim == 0 || inter == 0 || out_dim == 0) return k3::fail(env, fn, "inDim, inter and outDim must be > 0", true), env.Undefined();
    if (act > 1) return k3::fail(env, fn, "act must be 0 (SiLU) or 1 (SiTU)", true), env.Undefined();
    if (!info[0].IsArray() || !info[1].IsTypedArray() || info[1].As<Napi::TypedArray>().TypedArrayType() != napi_int32_array)
        return k3::fail(env, fn, "mats must be an array and rows an Int32Array"), env.Undefined();
    if (!info[5].IsBoolean() || !info[7].IsNumber() || !info[8].IsNumber())
        return k3::fail(env, fn, "bf16 must be a boolean, beta1 and beta2 numbers"), env.Undefined();
    Napi::Array mats = info[0].As<Napi::Array>();
    Napi::Int32Array rows = info[1].As<Napi::Int32Array>();
    size_t n = rows.ElementLength();
    if (mats.Length() != 3 * n) return k3::fail(env, fn, "mats must hold 3 views per expert (w1, w3, w2)", true), env.Undefined();
    k3_moe_batch b = {};
    b.bf16 = info[5].As<Napi::Boolean>().Value() ? 1 : 0;
    b.act = act ? K3_MOE_SITU : K3_MOE_SILU;
    b.beta1 = info[7].As<Napi::Number>().FloatValue();
    b.beta2 = info[8].As<Napi::Number>().FloatValue();
    b.in_dim = in_dim;
    b.inter = inter;
    b.out_dim = out_dim;
    // Reused (no allocation per call once grown) but one per thread: every worker_thread running a
    // model calls in here, and a shared vector let two concurrent layers overwrite each other's experts.
    thread_local std::vector<k3_moe_expert> experts;
    experts.resize(n);
    const size_t wsize = b.bf16 ? 2 : 4;
    const size_t want[3] = {inter * in_dim * wsize, inter * in_dim * wsize, out_dim * inter * wsize};
    size_t total = 0;
    for (size_t e = 0; e < n; e++) {
        if (rows[e] <= 0) return k3::fail(env, fn, "every expert must serve at least one row", true), env.Undefined();
        const void *w[3];
        for (int m = 0; m < 3; m++) {
            Napi::Value v = mats[(uint32_t)(3 * e + m)];
            if (!v.IsTypedArray()) return k3::fail(env, fn, "mats[" + std::to_string(3 * e + m) + "] must be a TypedArray"), env.Undefined();
            Napi::TypedArray a = v.As<Napi::TypedArray>();
            if (a.ByteLength() != want[m])
                return k3::fail(env, fn, "mats[" + std::to_string(3 * e + m) + "] has " + std::to_string(a.ByteLength()) +
                                             " bytes, expected " + std::to_string(want[m]), true), env.Undefined();
            uint8_t *p = static_cast<uint8_t *>(a.ArrayBuffer().Data()) + a.ByteOffset();
            if ((uintptr_t)p % wsize != 0) return k3::fail(env, fn, "weights must be aligned to their element size", true), env.Undefined();
            w[m] = p;
        }
        experts[e] = {w[0], w[1], w[2], (size_t)rows[e], total};
        total += (size_t)rows[e];
    }
    float *x, *y, *work;
    size_t nx, ny;
    if (!k3::get_f32(info, 9, fn, "x", 0, &x, &nx) || !k3::get_f32(info, 11, fn, "y", 0, &y, &ny)) return env.Undefined();
    const int32_t *x_row, *y_row;
    if (!rows_arg(info, 10, fn, "xRow", total, nx / in_dim, &x_row) || !rows_arg(info, 12, fn, "yRow", total, ny / out_dim, &y_row))
        return env.Undefined();
    if (!k3::get_f32(info, 13, fn, "work", k3_moe_work_floats(total, in_dim, inter, out_dim), &work, nullptr)) return env.Undefined();
    b.n_experts = n;
    b.experts = experts.data();
    b.x = x;
    b.x_row = x_row;
    b.y = y;
    b.y_row = y_row;
    b.work = work;
    k3_moe_experts(dense_api, &b);
    return env.Undefined();
}

// moeExpertsMxfp4(mats, rows, inDim, inter, outDim, act, beta1, beta2, x, xRow, y, yRow, work, nan)
//   mats: [w1 packed, w1 scales, w3 packed, w3 scales, w2 packed, w2 scales] per expert (Uint8Arrays of
//   exactly the MXFP4 sizes); rows: Int32Array, per expert; nan: Uint8Array, one flag per expert (set
//   when its products hold a NaN: the caller rescans that expert's scales). Returns the flagged count.
static Napi::Value MoeExpertsMxfp4(const Napi::CallbackInfo &info) {
    Napi::Env env = info.Env();
    const char *fn = "moeExpertsMxfp4";
    if (!ready(env, fn)) return env.Undefined();
    if (!mxfp4_api) return k3::fail(env, fn, "the addon was not initialised with @k3/mxfp4's nativeApi()"), env.Undefined();
    size_t in_dim, inter, out_dim, act;
    if (!k3::get_size(info, 2, fn, "inDim", &in_dim) || !k3::get_size(info, 3, fn, "inter", &inter) ||
        !k3::get_size(info, 4, fn, "outDim", &out_dim) || !k3::get_size(info, 5, fn, "act", &act))
        return env.Undefined();
    if (in_dim == 0 || inter == 0 || out_dim == 0) return k3::fail(env, fn, "inDim, inter and outDim must be > 0", true), env.Undefined();
    if (in_dim % 32 != 0 || inter % 32 != 0)
        return k3::fail(env, fn, "inDim (" + std::to_string(in_dim) + ") and inter (" + std::to_string(inter) +
                                     ") must be multiples of 32 (the MXFP4 block size)", true),
               env.Undefined();
    if (act > 1) return k3::fail(env, fn, "act must be 0 (SiLU) or 1 (SiTU)", true), env.Undefined();
    if (!info[0].IsArray() || !info[1].IsTypedArray() || info[1].As<Napi::TypedArray>().TypedArrayType() != napi_int32_array)
        return k3::fail(env, fn, "mats must be an array and rows an Int32Array"), env.Undefined();
    if (!info[6].IsNumber() || !info[7].IsNumber()) return k3::fail(env, fn, "beta1 and beta2 must be numbers"), env.Undefined();
    Napi::Array mats = info[0].As<Napi::Array>();
    Napi::Int32Array rows = info[1].As<Napi::Int32Array>();
    size_t n = rows.ElementLength();
    if (mats.Length() != 6 * n)
        return k3::fail(env, fn, "mats must hold 6 views per expert (w1, w3, w2: packed then scales)", true), env.Undefined();
    k3_moe_mxfp4_batch b = {};
    b.act = act ? K3_MOE_SITU : K3_MOE_SILU;
    b.beta1 = info[6].As<Napi::Number>().FloatValue();
    b.beta2 = info[7].As<Napi::Number>().FloatValue();
    b.in_dim = in_dim;
    b.inter = inter;
    b.out_dim = out_dim;
    // Per thread, as moeExperts' table: concurrent worker threads must not share it.
    thread_local std::vector<k3_moe_mxfp4_expert> experts;
    experts.resize(n);
    const size_t shape[3][2] = {{inter, in_dim}, {inter, in_dim}, {out_dim, inter}};
    size_t total = 0;
    for (size_t e = 0; e < n; e++) {
        if (rows[e] <= 0) return k3::fail(env, fn, "every expert must serve at least one row", true), env.Undefined();
        k3_mxfp4_matrix w[3];
        for (int m = 0; m < 3; m++) {
            const size_t r = shape[m][0], c = shape[m][1];
            const size_t want[2] = {r * (c / 2), r * (c / 32)};
            const uint8_t *p[2];
            for (int part = 0; part < 2; part++) {
                const uint32_t at = (uint32_t)(6 * e + 2 * m + part);
                Napi::Value v = mats[at];
                if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != napi_uint8_array)
                    return k3::fail(env, fn, "mats[" + std::to_string(at) + "] must be a Uint8Array"), env.Undefined();
                Napi::Uint8Array a = v.As<Napi::Uint8Array>();
                if (a.ByteLength() != want[part])
                    return k3::fail(env, fn, "mats[" + std::to_string(at) + "] has " + std::to_string(a.ByteLength()) +
                                                 " bytes, expected " + std::to_string(want[part]), true),
                           env.Undefined();
                p[part] = a.Data();
            }
            w[m] = {p[0], p[1], r, c};
        }
        experts[e] = {w[0], w[1], w[2], (size_t)rows[e], total};
        total += (size_t)rows[e];
    }
    float *x, *y, *work;
    size_t nx, ny;
    if (!k3::get_f32(info, 8, fn, "x", 0, &x, &nx) || !k3::get_f32(info, 10, fn, "y", 0, &y, &ny)) return env.Undefined();
    const int32_t *x_row, *y_row;
    if (!rows_arg(info, 9, fn, "xRow", total, nx / in_dim, &x_row) || !rows_arg(info, 11, fn, "yRow", total, ny / out_dim, &y_row))
        return env.Undefined();
    if (!k3::get_f32(info, 12, fn, "work", k3_moe_work_floats(total, in_dim, inter, out_dim), &work, nullptr)) return env.Undefined();
    k3::Bytes nan;
    if (!k3::get_bytes(info, 13, fn, "nan", &nan)) return env.Undefined();
    if (nan.length < n) return k3::fail(env, fn, "nan has " + std::to_string(nan.length) + " bytes, needs one per expert (" + std::to_string(n) + ")", true), env.Undefined();
    b.n_experts = n;
    b.experts = experts.data();
    b.x = x;
    b.x_row = x_row;
    b.y = y;
    b.y_row = y_row;
    b.work = work;
    b.nan = nan.data;
    k3_moe_mxfp4_experts(dense_api, mxfp4_api, &b);
    size_t flagged = 0;
    for (size_t e = 0; e < n; e++) flagged += nan.data[e];
    return Napi::Number::New(env, (double)flagged);
}

// moeMix(slots, weights, tokens, k, dim, out, add | null)
static Napi::Value MoeMix(const Napi::CallbackInfo &info) {
    Napi::Env env = info.Env();
    const char *fn = "moeMix";
    size_t tokens, k, dim, tk, tkd, td;
    if (!k3::get_size(info, 2, fn, "tokens", &tokens) || !k3::get_size(info, 3, fn, "k", &k) || !k3::get_size(info, 4, fn, "dim", &dim))
        return env.Undefined();
    if (!k3::mul_size(tokens, k, &tk) || !k3::mul_size(tk, dim, &tkd) || !k3::mul_size(tokens, dim, &td))
        return k3::fail(env, fn, "size overflows", true), env.Undefined();
    float *slots, *w, *out;
    if (!k3::get_f32(info, 0, fn, "slots", tkd, &slots, nullptr) || !k3::get_f32(info, 1, fn, "weights", tk, &w, nullptr) ||
        !k3::get_f32(info, 5, fn, "out", td, &out, nullptr))
        return env.Undefined();
    float *add = nullptr;
    if (info.Length() > 6 && !info[6].IsNull() && !info[6].IsUndefined() && !k3::get_f32(info, 6, fn, "add", td, &add, nullptr))
        return env.Undefined();
    k3_moe_mix(slots, w, tokens, k, dim, out, add);
    return env.Undefined();
}

// moeAdd(out, a, n)
static Napi::Value MoeAdd(const Napi::CallbackInfo &info) {
    Napi::Env env = info.Env();
    const char *fn = "moeAdd";
    size_t n;
    float *out, *a;
    if (!k3::get_size(info, 2, fn, "n", &n) || !k3::get_f32(info, 0, fn, "out", n, &out, nullptr) || !k3::get_f32(info, 1, fn, "a", n, &a, nullptr))
        return env.Undefined();
    k3_moe_add(out, a, n);
    return env.Undefined();
}

void RegisterCompute(Napi::Env env, Napi::Object exports) {
    exports["initCompute"] = Napi::Function::New(env, InitCompute);
    exports["moeExperts"] = Napi::Function::New(env, MoeExperts);
    exports["initMxfp4"] = Napi::Function::New(env, InitMxfp4);
    exports["moeExpertsMxfp4"] = Napi::Function::New(env, MoeExpertsMxfp4);
    exports["moeMix"] = Napi::Function::New(env, MoeMix);
    exports["moeAdd"] = Napi::Function::New(env, MoeAdd);
}
