// addon.cc: N-API glue for @k3/dense. Checks arguments, then calls the C kernels.
#include <napi.h>
#include <cstdlib>
#include "k3_napi.h"
extern "C" {
#include "k3_dense.h"
#include "cpu.h"
#include "pool.h"
#include "gemv_bf16.h"
}

// ---------------------------------------------------------------- SIMD level and threads

static Napi::Value SimdLevel(const Napi::CallbackInfo &info) {
    return Napi::String::New(info.Env(), k3_cpu_level_name(k3_cpu_level()));
}

static Napi::Value BestSimdLevel(const Napi::CallbackInfo &info) {
    return Napi::String::New(info.Env(), k3_cpu_level_name(k3_cpu_best_level()));
}

static Napi::Value SetSimdLevel(const Napi::CallbackInfo &info) {
    Napi::Env env = info.Env();
    if (info.Length() < 1 || !info[0].IsString()) {
        k3::fail(env, "setSimdLevel", "level must be 'scalar', 'avx2' or 'avx512'");
        return env.Undefined();
    }
    std::string name = info[0].As<Napi::String>();
    k3_simd_level level;
    if (k3_cpu_parse_level(name.c_str(), &level) != 0) {
        k3::fail(env, "setSimdLevel", "unknown level '" + name + "' (expected scalar, avx2 or avx512)", true);
        return env.Undefined();
    }
    if (k3_cpu_set_level(level) != 0) {
        k3::fail(env, "setSimdLevel",
                 "this CPU cannot run '" + name + "' (best available: " + k3_cpu_level_name(k3_cpu_best_level()) + ")",
                 true);
    }
    return env.Undefined();
}

static Napi::Value ThreadCount(const Napi::CallbackInfo &info) {
    return Napi::Number::New(info.Env(), k3_pool_thread_count());
}

static Napi::Value SetThreadCount(const Napi::CallbackInfo &info) {
    size_t n;
    if (!k3::get_size(info, 0, "setThreadCount", "threads", &n)) return info.Env().Undefined();
    if (n < 1 || k3_pool_set_threads((int)n) != 0)
        k3::fail(info.Env(), "setThreadCount", "threads must be between 1 and 256", true);
    return info.Env().Undefined();
}

// ---------------------------------------------------------------- kernels

// gemvBf16(w, x, y, rows, cols, ld)
static Napi::Value GemvBf16(const Napi::CallbackInfo &info) {
    Napi::Env env = info.Env();
    const char *fn = "gemvBf16";
    k3::Bytes w;
    float *x, *y;
    size_t rows, cols, ld, nx, ny, need;
    if (!k3::get_bytes(info, 0, fn, "w", &w) || !k3::get_f32(info, 1, fn, "x", 0, &x, &nx) ||
        !k3::get_f32(info, 2, fn, "y", 0, &y, &ny) || !k3::get_size(info, 3, fn, "rows", &rows) ||
        !k3::get_size(info, 4, fn, "cols", &cols) || !k3::get_size(info, 5, fn, "ld", &ld))
        return env.Undefined();
    if (ld < cols) return k3::fail(env, fn, "ld must be >= cols", true), env.Undefined();
    if (nx < cols) return k3::fail(env, fn, "x is shorter than cols", true), env.Undefined();
    if (ny < rows) return k3::fail(env, fn, "y is shorter than rows", true), env.Undefined();
    // The last row only needs `cols` elements, not a whole stride.
    if (rows > 0 && (!k3::mul_size(rows - 1, ld, &need) || need > SIZE_MAX - cols || (need += cols) > SIZE_MAX / 2 ||
                     w.length < need * 2))
        return k3::fail(env, fn, "w holds fewer than rows x cols bf16 values", true), env.Undefined();
    if (reinterpret_cast<uintptr_t>(w.data) % 2 != 0)
        return k3::fail(env, fn, "w must start at an even byte offset (bf16)", true), env.Undefined();
    k3_gemv_bf16(reinterpret_cast<const uint16_t *>(w.data), ld, x, y, rows, cols);
    return env.Undefined();
}

// ---------------------------------------------------------------- the shared table

static Napi::Value Api(const Napi::CallbackInfo &info) {
    // Consumers only read the table; N-API externals are untyped void*.
    return Napi::External<k3_dense_api>::New(info.Env(), const_cast<k3_dense_api *>(k3_dense_get_api()));
}

// ---------------------------------------------------------------- module

static Napi::Object Init(Napi::Env env, Napi::Object exports) {
    const char *forced = std::getenv("K3_SIMD");
    if (forced && *forced) {
        k3_simd_level level;
        if (k3_cpu_parse_level(forced, &level) != 0) {
            k3::fail(env, "@k3/dense", std::string("K3_SIMD='") + forced + "' is not one of scalar, avx2, avx512", true);
            return exports;
        }
        if (k3_cpu_set_level(level) != 0) {
            k3::fail(env, "@k3/dense",
                     std::string("K3_SIMD='") + forced + "' but this CPU supports at most " +
                         k3_cpu_level_name(k3_cpu_best_level()),
                     true);
            return exports;
        }
    }
    exports["simdLevel"] = Napi::Function::New(env, SimdLevel);
    exports["bestSimdLevel"] = Napi::Function::New(env, BestSimdLevel);
    exports["setSimdLevel"] = Napi::Function::New(env, SetSimdLevel);
    exports["threadCount"] = Napi::Function::New(env, ThreadCount);
    exports["setThreadCount"] = Napi::Function::New(env, SetThreadCount);
    exports["gemvBf16"] = Napi::Function::New(env, GemvBf16);
    exports["api"] = Napi::Function::New(env, Api);
    return exports;
}

NODE_API_MODULE(k3_dense, Init)
