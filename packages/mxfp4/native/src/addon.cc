// addon.cc: N-API glue for @k3/mxfp4. Checks every length before a kernel touches memory.
#include <napi.h>
#include <string>
#include "k3_napi.h"
#include "k3_dense_napi.h"
extern "C" {
#include "mxfp4.h"
#include "matmul_int8.h"
}

// ---------------------------------------------------------------- init

// init(denseApi): keeps @k3/dense's table (pool + SIMD level) after checking its version and size.
static Napi::Value Init(const Napi::CallbackInfo &info) {
    const k3_dense_api *api = k3::get_dense_api(info, 0, "@k3/mxfp4 init");
    if (api) k3_mxfp4_set_dense_api(api);
    return info.Env().Undefined();
}

// ---------------------------------------------------------------- matrix checks

// Reads (packed, scales, rows, cols) at info[at..at+3] and checks cols % 32 and both lengths.
static bool get_matrix(const Napi::CallbackInfo &info, size_t at, const char *fn, k3_mxfp4_matrix *m) {
    Napi::Env env = info.Env();
    k3::Bytes packed, scales;
    size_t rows, cols, need;
    if (!k3::get_bytes(info, at, fn, "packed", &packed) || !k3::get_bytes(info, at + 1, fn, "scales", &scales) ||
        !k3::get_size(info, at + 2, fn, "rows", &rows) || !k3::get_size(info, at + 3, fn, "cols", &cols))
        return false;
    if (cols % 32 != 0)
        return k3::fail(env, fn, "cols (" + std::to_string(cols) + ") is not a multiple of 32 (the MXFP4 block size)", true);
    if (!k3::mul_size(rows, cols / 2, &need) || packed.length < need)
        return k3::fail(env, fn,
                        "packed has " + std::to_string(packed.length) + " bytes, needs rows x cols/2 = " +
                            std::to_string(rows) + " x " + std::to_string(cols / 2),
                        true);
    if (!k3::mul_size(rows, cols / 32, &need) || scales.length < need)
        return k3::fail(env, fn,
                        "scales has " + std::to_string(scales.length) + " bytes, needs rows x cols/32 = " +
                            std::to_string(rows) + " x " + std::to_string(cols / 32),
                        true);
    if (k3_mxfp4_dense_api() == nullptr) return k3::fail(env, fn, "the addon was not initialised with @k3/dense's table");
    *m = {packed.data, scales.data, rows, cols};
    return true;
}

// Checks that X holds batch x cols and Y batch x rows.
static bool get_batch(const Napi::CallbackInfo &info, size_t at, const char *fn, const k3_mxfp4_matrix &m, float **x,
                      float **y, size_t *batch) {
    Napi::Env env = info.Env();
    size_t nx, ny, need;
    if (!k3::get_f32(info, at, fn, "X", 0, x, &nx) || !k3::get_f32(info, at + 1, fn, "Y", 0, y, &ny) ||
        !k3::get_size(info, at + 2, fn, "batch", batch))
        return false;
    if (!k3::mul_size(*batch, m.cols, &need) || nx < need)
        return k3::fail(env, fn, "X has " + std::to_string(nx) + " values, needs batch x cols = " + std::to_string(*batch) + " x " +
                                     std::to_string(m.cols), true);
    if (!k3::mul_size(*batch, m.rows, &need) || ny < need)
        return k3::fail(env, fn, "Y has " + std::to_string(ny) + " values, needs batch x rows = " + std::to_string(*batch) + " x " +
                                     std::to_string(m.rows), true);
    return true;
}

// ---------------------------------------------------------------- kernels

// Whether y[0..n) holds a NaN. A 0xFF scale decodes to NaN in every kernel, so the TS side can trust
// its validated-range cache and still catch bytes rewritten after validation (it then rescans and throws).
static bool any_nan(const float *y, size_t n) {
    int found = 0;
    for (size_t i = 0; i < n; i++) found |= y[i] != y[i];
    return found != 0;
}

// matmul(packed, scales, rows, cols, X, Y, batch): the caller (TS) has validated the scales.
static Napi::Value Matmul(const Napi::CallbackInfo &info) {
    Napi::Env env = info.Env();
    const char *fn = "matmul";
    k3_mxfp4_matrix m;
    float *x, *y;
    size_t batch;
    if (!get_matrix(info, 0, fn, &m) || !get_batch(info, 4, fn, m, &x, &y, &batch)) return env.Undefined();
    if (k3_mxfp4_matmul(&m, x, y, batch) != 0) return k3::fail(env, fn, "out of memory for the activation scratch", true), env.Undefined();
    return Napi::Boolean::New(env, any_nan(y, batch * m.rows));
}

// matmulInt8(packed, scales, rows, cols, X, Y, batch): the opt-in int8-activation path.
static Napi::Value MatmulInt8(const Napi::CallbackInfo &info) {
    Napi::Env env = info.Env();
    const char *fn = "matmulInt8";
    k3_mxfp4_matrix m;
    float *x, *y;
    size_t batch;
    if (!get_matrix(info, 0, fn, &m) || !get_batch(info, 4, fn, m, &x, &y, &batch)) return env.Undefined();
    if (k3_mxfp4_matmul_int8(&m, x, y, batch) != 0) return k3::fail(env, fn, "out of memory for the activation scratch", true), env.Undefined();
    return Napi::Boolean::New(env, any_nan(y, batch * m.rows));
}

// hasVnni(): whether the int8 path runs its AVX-512 VNNI kernel (at the avx512 level).
static Napi::Value HasVnni(const Napi::CallbackInfo &info) { return Napi::Boolean::New(info.Env(), k3_mxfp4_cpu_has_vnni() != 0); }

// matmulSplit(packed, scales, rows, cols, XS, Y, batch): XS from splitActivations.
static Napi::Value MatmulSplit(const Napi::CallbackInfo &info) {
    Napi::Env env = info.Env();
    const char *fn = "matmulSplit";
    k3_mxfp4_matrix m;
    float *x, *y;
    size_t batch;
    if (!get_matrix(info, 0, fn, &m) || !get_batch(info, 4, fn, m, &x, &y, &batch)) return env.Undefined();
    k3_mxfp4_matmul_split(&m, x, y, batch);
    return Napi::Boolean::New(env, any_nan(y, batch * m.rows));
}

// splitActivations(X, XS, cols, batch)
static Napi::Value SplitActivations(const Napi::CallbackInfo &info) {
    Napi::Env env = info.Env();
    const char *fn = "splitActivations";
    float *x, *xs;
    size_t nx, nxs, cols, batch, need;
    if (!k3::get_f32(info, 0, fn, "X", 0, &x, &nx) || !k3::get_f32(info, 1, fn, "out", 0, &xs, &nxs) ||
        !k3::get_size(info, 2, fn, "cols", &cols) || !k3::get_size(info, 3, fn, "batch", &batch))
        return env.Undefined();
    if (cols % 32 != 0)
        return k3::fail(env, fn, "cols (" + std::to_string(cols) + ") is not a multiple of 32 (the MXFP4 block size)", true),
               env.Undefined();
    if (!k3::mul_size(cols, batch, &need) || nx < need || nxs < need)
        return k3::fail(env, fn, "X and out need batch x cols values", true), env.Undefined();
    k3_mxfp4_split_activations(x, cols, batch, xs);
    return env.Undefined();
}

// dequantize(packed, scales, rows, cols, out)
static Napi::Value Dequantize(const Napi::CallbackInfo &info) {
    Napi::Env env = info.Env();
    const char *fn = "dequantize";
    k3_mxfp4_matrix m;
    float *out;
    size_t nout, need;
    if (!get_matrix(info, 0, fn, &m) || !k3::get_f32(info, 4, fn, "out", 0, &out, &nout)) return env.Undefined();
    if (!k3::mul_size(m.rows, m.cols, &need) || nout < need)
        return k3::fail(env, fn, "out needs rows x cols values", true), env.Undefined();
    k3_mxfp4_dequantize(&m, out);
    return env.Undefined();
}

// quantize(values, rows, cols, packed, scales): -1, or the index of the first non-finite value.
static Napi::Value Quantize(const Napi::CallbackInfo &info) {
    Napi::Env env = info.Env();
    const char *fn = "quantize";
    float *v;
    size_t nv, rows, cols, need;
    k3::Bytes packed, scales;
    if (!k3::get_f32(info, 0, fn, "values", 0, &v, &nv) || !k3::get_size(info, 1, fn, "rows", &rows) ||
        !k3::get_size(info, 2, fn, "cols", &cols) || !k3::get_bytes(info, 3, fn, "packed", &packed) ||
        !k3::get_bytes(info, 4, fn, "scales", &scales))
        return env.Undefined();
    if (cols % 32 != 0)
        return k3::fail(env, fn, "cols (" + std::to_string(cols) + ") is not a multiple of 32 (the MXFP4 block size)", true),
               env.Undefined();
    if (!k3::mul_size(rows, cols, &need) || nv != need)
        return k3::fail(env, fn, "values has " + std::to_string(nv) + " elements, expected rows x cols", true), env.Undefined();
    if (packed.length < need / 2 || scales.length < need / 32)
        return k3::fail(env, fn, "output buffers are too small", true), env.Undefined();
    if (k3_mxfp4_dense_api() == nullptr) return k3::fail(env, fn, "the addon was not initialised"), env.Undefined();
    return Napi::Number::New(env, (double)k3_mxfp4_quantize(v, rows, cols, packed.data, scales.data));
}

// ---------------------------------------------------------------- the shared table

static Napi::Value Api(const Napi::CallbackInfo &info) {
    return Napi::External<k3_mxfp4_api>::New(info.Env(), const_cast<k3_mxfp4_api *>(k3_mxfp4_get_api()));
}

// ---------------------------------------------------------------- module

static Napi::Object Module(Napi::Env env, Napi::Object exports) {
    k3_mxfp4_init_tables();
    exports["init"] = Napi::Function::New(env, Init);
    exports["matmul"] = Napi::Function::New(env, Matmul);
    exports["matmulSplit"] = Napi::Function::New(env, MatmulSplit);
    exports["matmulInt8"] = Napi::Function::New(env, MatmulInt8);
    exports["hasVnni"] = Napi::Function::New(env, HasVnni);
    exports["splitActivations"] = Napi::Function::New(env, SplitActivations);
    exports["dequantize"] = Napi::Function::New(env, Dequantize);
    exports["quantize"] = Napi::Function::New(env, Quantize);
    exports["api"] = Napi::Function::New(env, Api);
    return exports;
}

NODE_API_MODULE(k3_mxfp4, Module)
