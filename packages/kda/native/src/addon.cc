// addon.cc: N-API glue for @k3/kda. Checks every argument (type, length, overflow), then calls C.
#include <napi.h>
#include <string>
#include "k3_napi.h"
#include "k3_dense_napi.h"
extern "C" {
#include "k3_kda.h"
}

// ---------------------------------------------------------------- helpers

static bool ready(Napi::Env env, const char *fn) {
    if (k3_kda_dense()) return true;
    return k3::fail(env, fn, "the addon was not initialised with @k3/dense's nativeApi()");
}

// count = a * b * c without wrapping (and below 2^53 so JS lengths can hold it).
static bool product(Napi::Env env, const char *fn, const char *what, size_t a, size_t b, size_t c, size_t *out) {
    size_t ab;
    if (!k3::mul_size(a, b, &ab) || !k3::mul_size(ab, c, out) || *out > (size_t)9007199254740992ull)
        return k3::fail(env, fn, std::string(what) + " size overflows", true);
    return true;
}

static bool f32_at_least(const Napi::CallbackInfo &info, size_t index, const char *fn, const char *name, size_t need,
                         float **out) {
    return k3::get_f32(info, index, fn, name, need, out, nullptr);
}

// A KDA state: Float32Array (fp32) or Uint16Array (bf16 bits) of at least `need` values.
static bool state_arg(const Napi::CallbackInfo &info, size_t index, const char *fn, size_t need, void **out,
                      int *is_bf16) {
    Napi::Env env = info.Env();
    if (info.Length() <= index || !info[index].IsTypedArray())
        return k3::fail(env, fn, "argument 'S' must be a Float32Array (fp32 state) or Uint16Array (bf16 state)");
    Napi::TypedArray a = info[index].As<Napi::TypedArray>();
    if (a.TypedArrayType() != napi_float32_array && a.TypedArrayType() != napi_uint16_array)
        return k3::fail(env, fn, "argument 'S' must be a Float32Array (fp32 state) or Uint16Array (bf16 state)");
    if (a.ElementLength() < need)
        return k3::fail(env, fn,
                        "argument 'S' has " + std::to_string(a.ElementLength()) + " values, needs H*dk*dv = " +
                            std::to_string(need),
                        true);
    *is_bf16 = a.TypedArrayType() == napi_uint16_array;
    *out = static_cast<uint8_t *>(a.ArrayBuffer().Data()) + a.ByteOffset();
    return true;
}

// ---------------------------------------------------------------- init

static Napi::Value Init(const Napi::CallbackInfo &info) {
    const k3_dense_api *api = k3::get_dense_api(info, 0, "@k3/kda init");
    if (api && k3_kda_init(api) != 0) k3::fail(info.Env(), "@k3/kda init", "the @k3/dense table was refused", true);
    return info.Env().Undefined();
}

// ---------------------------------------------------------------- kernels

// shortConv(x, w, state, out, T, C, K)
static Napi::Value ShortConv(const Napi::CallbackInfo &info) {
    Napi::Env env = info.Env();
    const char *fn = "shortConv";
    size_t T, C, K, tc, ck, sc;
    float *x, *w, *state, *out;
    if (!k3::get_size(info, 4, fn, "T", &T) || !k3::get_size(info, 5, fn, "C", &C) || !k3::get_size(info, 6, fn, "K", &K))
        return env.Undefined();
    if (K < 1) return k3::fail(env, fn, "K (kernel size) must be >= 1", true), env.Undefined();
    if (!product(env, fn, "T*C", T, C, 1, &tc) || !product(env, fn, "C*K", C, K, 1, &ck) ||
        !product(env, fn, "(K-1)*C", K - 1, C, 1, &sc))
        return env.Undefined();
    if (!f32_at_least(info, 0, fn, "x", tc, &x) || !f32_at_least(info, 1, fn, "w", ck, &w) ||
        !f32_at_least(info, 2, fn, "state", sc, &state) || !f32_at_least(info, 3, fn, "out", tc, &out))
        return env.Undefined();
    if (k3_kda_short_conv(x, w, state, out, T, C, K) != 0) k3::fail(env, fn, "out of memory for the transposed taps", true);
    return env.Undefined();
}

// gate(zRaw, dtBias, aLog, g, T, H, dk, form, lowerBound)
static Napi::Value Gate(const Napi::CallbackInfo &info) {
    Napi::Env env = info.Env();
    const char *fn = "gate";
    size_t T, H, dk, form, P, TP;
    float *z, *dt, *alog, *g;
    if (!k3::get_size(info, 4, fn, "T", &T) || !k3::get_size(info, 5, fn, "H", &H) ||
        !k3::get_size(info, 6, fn, "dk", &dk) || !k3::get_size(info, 7, fn, "form", &form))
        return env.Undefined();
    if (form > 1) return k3::fail(env, fn, "form must be 0 (k3-lowerbound) or 1 (48b-softplus)", true), env.Undefined();
    if (info.Length() < 9 || !info[8].IsNumber())
        return k3::fail(env, fn, "argument 'lowerBound' must be a number"), env.Undefined();
    float lb = info[8].As<Napi::Number>().FloatValue();
    if (!product(env, fn, "H*dk", H, dk, 1, &P) || !product(env, fn, "T*H*dk", T, P, 1, &TP)) return env.Undefined();
    if (!f32_at_least(info, 0, fn, "zRaw", TP, &z) || !f32_at_least(info, 1, fn, "dtBias", P, &dt) ||
        !f32_at_least(info, 2, fn, "aLog", H, &alog) || !f32_at_least(info, 3, fn, "g", TP, &g))
        return env.Undefined();
    k3_kda_gate(z, dt, alog, g, T, H, dk, (int)form, lb);
    return env.Undefined();
}

struct CoreArgs {
    float *q, *k, *v, *g, *beta, *o;
    void *S;
    int bf16;
    size_t T, H, dk, dv;
};

// (q, k, v, g, beta, S, o, T, H, dk, dv) shared by recurrent and chunked.
static bool core_args(const Napi::CallbackInfo &info, const char *fn, CoreArgs *a) {
    Napi::Env env = info.Env();
    size_t tk, tv, th, hs;
    if (!ready(env, fn)) return false;
    if (!k3::get_size(info, 7, fn, "T", &a->T) || !k3::get_size(info, 8, fn, "H", &a->H) ||
        !k3::get_size(info, 9, fn, "dk", &a->dk) || !k3::get_size(info, 10, fn, "dv", &a->dv))
        return false;
    if (a->H < 1 || a->dk < 1 || a->dv < 1) return k3::fail(env, fn, "H, dk and dv must be >= 1", true);
    if (a->H > 65536) return k3::fail(env, fn, "H must be <= 65536", true);
    if (!product(env, fn, "T*H*dk", a->T, a->H, a->dk, &tk) || !product(env, fn, "T*H*dv", a->T, a->H, a->dv, &tv) ||
        !product(env, fn, "T*H", a->T, a->H, 1, &th) || !product(env, fn, "H*dk*dv", a->H, a->dk, a->dv, &hs))
        return false;
    return f32_at_least(info, 0, fn, "q", tk, &a->q) && f32_at_least(info, 1, fn, "k", tk, &a->k) &&
           f32_at_least(info, 2, fn, "v", tv, &a->v) && f32_at_least(info, 3, fn, "g", tk, &a->g) &&
           f32_at_least(info, 4, fn, "beta", th, &a->beta) && state_arg(info, 5, fn, hs, &a->S, &a->bf16) &&
           f32_at_least(info, 6, fn, "o", tv, &a->o);
}

static Napi::Value Recurrent(const Napi::CallbackInfo &info) {
    CoreArgs a;
    if (!core_args(info, "recurrent", &a)) return info.Env().Undefined();
    if (k3_kda_recurrent(a.q, a.k, a.v, a.g, a.beta, a.S, a.bf16, a.o, a.T, a.H, a.dk, a.dv) != 0)
        k3::fail(info.Env(), "recurrent", "out of memory for the per-head scratch", true);
    return info.Env().Undefined();
}

static Napi::Value Chunked(const Napi::CallbackInfo &info) {
    CoreArgs a;
    size_t chunk;
    if (!core_args(info, "chunked", &a) || !k3::get_size(info, 11, "chunked", "chunk", &chunk))
        return info.Env().Undefined();
    if (chunk < 1 || chunk > 1024)
        return k3::fail(info.Env(), "chunked", "chunk must be between 1 and 1024", true), info.Env().Undefined();
    if (k3_kda_chunked(a.q, a.k, a.v, a.g, a.beta, a.S, a.bf16, a.o, a.T, a.H, a.dk, a.dv, chunk) != 0)
        k3::fail(info.Env(), "chunked", "out of memory for the per-head scratch", true);
    return info.Env().Undefined();
}

// ---------------------------------------------------------------- module

static Napi::Object Module(Napi::Env env, Napi::Object exports) {
    exports["init"] = Napi::Function::New(env, Init);
    exports["shortConv"] = Napi::Function::New(env, ShortConv);
    exports["gate"] = Napi::Function::New(env, Gate);
    exports["recurrent"] = Napi::Function::New(env, Recurrent);
    exports["chunked"] = Napi::Function::New(env, Chunked);
    return exports;
}

NODE_API_MODULE(k3_kda, Module)
