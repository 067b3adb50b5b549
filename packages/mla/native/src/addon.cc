// addon.cc: N-API glue for @k3/mla. Checks every argument (types, lengths, index bounds with
// overflow checks) before the attention kernel reads a byte.
#include <napi.h>
#include <string>
#include "k3_napi.h"
#include "k3_dense_napi.h"
extern "C" {
#include "k3_mla.h"
}

static const size_t MAX_SAFE = (size_t)9007199254740992ull;

static Napi::Value Init(const Napi::CallbackInfo &info) {
    const k3_dense_api *api = k3::get_dense_api(info, 0, "@k3/mla init");
    if (api && k3_mla_init(api) != 0) k3::fail(info.Env(), "@k3/mla init", "the @k3/dense table was refused", true);
    return info.Env().Undefined();
}

// Rows (keys or values): a Float32Array or Uint16Array (bf16) plus offset/stride/head, checked so
// that positions [0, n_pos) of heads [0, H) with `width` values each lie inside the array.
static bool rows_arg(const Napi::CallbackInfo &info, size_t index, const char *fn, const char *name, size_t n_pos,
                     size_t H, size_t width, k3_mla_rows *out) {
    Napi::Env env = info.Env();
    std::string nm(name);
    if (info.Length() <= index || !info[index].IsTypedArray())
        return k3::fail(env, fn, "argument '" + nm + "' must be a Float32Array or Uint16Array (bf16)");
    Napi::TypedArray a = info[index].As<Napi::TypedArray>();
    if (a.TypedArrayType() != napi_float32_array && a.TypedArrayType() != napi_uint16_array)
        return k3::fail(env, fn, "argument '" + nm + "' must be a Float32Array or Uint16Array (bf16)");
    size_t offset, stride, head;
    if (!k3::get_size(info, index + 1, fn, (nm + "Offset").c_str(), &offset) ||
        !k3::get_size(info, index + 2, fn, (nm + "Stride").c_str(), &stride) ||
        !k3::get_size(info, index + 3, fn, (nm + "Head").c_str(), &head))
        return false;
    size_t a1, a2, end;
    if (n_pos > 0) {
        if (!k3::mul_size(n_pos - 1, stride, &a1) || !k3::mul_size(H - 1, head, &a2) || a1 > MAX_SAFE || a2 > MAX_SAFE ||
            offset > MAX_SAFE || width > MAX_SAFE)
            return k3::fail(env, fn, "argument '" + nm + "' layout overflows", true);
        end = offset + a1 + a2 + width;
        if (end > a.ElementLength())
            return k3::fail(env, fn,
                            "argument '" + nm + "' has " + std::to_string(a.ElementLength()) + " values, the layout reaches " +
                                std::to_string(end) + " (positions " + std::to_string(n_pos) + ", heads " +
                                std::to_string(H) + ", width " + std::to_string(width) + ")",
                            true);
    }
    out->data = static_cast<uint8_t *>(a.ArrayBuffer().Data()) + a.ByteOffset();
    out->bf16 = a.TypedArrayType() == napi_uint16_array;
    out->offset = offset;
    out->stride = stride;
    out->head = head;
    return true;
}

// attend(q, T, H, dq, dv, keys, kOffset, kStride, kHead, values, vOffset, vStride, vHead, qPos0, scale, out)
static Napi::Value Attend(const Napi::CallbackInfo &info) {
    Napi::Env env = info.Env();
    const char *fn = "attend";
    if (!k3_mla_dense()) return k3::fail(env, fn, "the addon was not initialised with @k3/dense's nativeApi()"), env.Undefined();
    size_t T, H, dq, dv, pos0, th, nq, no;
    if (!k3::get_size(info, 1, fn, "T", &T) || !k3::get_size(info, 2, fn, "H", &H) || !k3::get_size(info, 3, fn, "dq", &dq) ||
        !k3::get_size(info, 4, fn, "dv", &dv) || !k3::get_size(info, 13, fn, "qPos0", &pos0))
        return env.Undefined();
    if (H < 1 || dq < 1 || dv < 1) return k3::fail(env, fn, "H, dq and dv must be >= 1", true), env.Undefined();
    if (T > (1u << 24) || H > 65536 || pos0 > MAX_SAFE - T)
        return k3::fail(env, fn, "T must be <= 2^24 and H <= 65536", true), env.Undefined();
    if (!k3::mul_size(T, H, &th) || !k3::mul_size(th, dq, &nq) || !k3::mul_size(th, dv, &no) || nq > MAX_SAFE || no > MAX_SAFE)
        return k3::fail(env, fn, "T*H*dq overflows", true), env.Undefined();
    float *q, *out;
    if (!k3::get_f32(info, 0, fn, "q", nq, &q, nullptr) || !k3::get_f32(info, 15, fn, "out", no, &out, nullptr))
        return env.Undefined();
    k3_mla_rows keys, values;
    size_t n_pos = pos0 + T;
    if (!rows_arg(info, 5, fn, "keys", n_pos, H, dq, &keys) || !rows_arg(info, 9, fn, "values", n_pos, H, dv, &values))
        return env.Undefined();
    if (info.Length() < 15 || !info[14].IsNumber()) return k3::fail(env, fn, "argument 'scale' must be a number"), env.Undefined();
    float scale = info[14].As<Napi::Number>().FloatValue();
    if (k3_mla_attend(q, T, H, dq, dv, &keys, &values, pos0, scale, out) != 0)
        k3::fail(env, fn, "out of memory for the attention scratch", true);
    return env.Undefined();
}

// The shared checks of absorb/project: (in, T, H, inStride, inHead, kvb, n, v, L, out, outStride, outHead).
// `in_width` / `out_width` are the values read / written per (t, h).
static bool absorb_args(const Napi::CallbackInfo &info, const char *fn, bool absorb, float **in, size_t *T, size_t *H,
                        size_t *in_stride, size_t *in_head, void **kvb, int *bf16, size_t *n, size_t *v, size_t *L,
                        float **out, size_t *out_stride, size_t *out_head) {
    Napi::Env env = info.Env();
    if (!k3_mla_dense()) return k3::fail(env, fn, "the addon was not initialised with @k3/dense's nativeApi()");
    if (!k3::get_size(info, 1, fn, "T", T) || !k3::get_size(info, 2, fn, "H", H) ||
        !k3::get_size(info, 3, fn, "inStride", in_stride) || !k3::get_size(info, 4, fn, "inHead", in_head) ||
        !k3::get_size(info, 6, fn, "n", n) || !k3::get_size(info, 7, fn, "v", v) || !k3::get_size(info, 8, fn, "L", L) ||
        !k3::get_size(info, 10, fn, "outStride", out_stride) || !k3::get_size(info, 11, fn, "outHead", out_head))
        return false;
    if (*T < 1 || *H < 1 || *n < 1 || *v < 1 || *L < 1) return k3::fail(env, fn, "T, H, n, v and L must be >= 1", true);
    if (*T > (1u << 24) || *H > 65536 || *n > 65536 || *v > 65536 || *L > 65536 || *in_stride > MAX_SAFE ||
        *in_head > MAX_SAFE || *out_stride > MAX_SAFE || *out_head > MAX_SAFE)
        return k3::fail(env, fn, "sizes out of range", true);
    size_t in_w = absorb ? *n : *L, out_w = absorb ? *L : *v;
    // last element touched: (T-1)*stride + (H-1)*head + width (all terms < 2^53 after the range check)
    double in_end = (double)(*T - 1) * (double)*in_stride + (double)(*H - 1) * (double)*in_head + (double)in_w;
    double out_end = (double)(*T - 1) * (double)*out_stride + (double)(*H - 1) * (double)*out_head + (double)out_w;
    size_t kvb_need = *H * (*n + *v) * *L;
    if (!k3::get_f32(info, 0, fn, "in", 0, in, nullptr) || !k3::get_f32(info, 9, fn, "out", 0, out, nullptr)) return false;
    if (in_end > (double)info[0].As<Napi::Float32Array>().ElementLength())
        return k3::fail(env, fn, "argument 'in' is shorter than its layout reaches (" + std::to_string((size_t)in_end) + ")", true);
    if (out_end > (double)info[9].As<Napi::Float32Array>().ElementLength())
        return k3::fail(env, fn, "argument 'out' is shorter than its layout reaches (" + std::to_string((size_t)out_end) + ")", true);
    if (info.Length() <= 5 || !info[5].IsTypedArray()) return k3::fail(env, fn, "argument 'kvb' must be a Float32Array or Uint16Array (bf16)");
    Napi::TypedArray a = info[5].As<Napi::TypedArray>();
    if (a.TypedArrayType() != napi_float32_array && a.TypedArrayType() != napi_uint16_array)
        return k3::fail(env, fn, "argument 'kvb' must be a Float32Array or Uint16Array (bf16)");
    if (a.ElementLength() < kvb_need)
        return k3::fail(env, fn, "argument 'kvb' has " + std::to_string(a.ElementLength()) + " values, needs H*(n+v)*L = " + std::to_string(kvb_need), true);
    *kvb = static_cast<uint8_t *>(a.ArrayBuffer().Data()) + a.ByteOffset();
    *bf16 = a.TypedArrayType() == napi_uint16_array;
    return true;
}

// absorb(qNope, T, H, inStride, inHead, kvb, n, v, L, out, outStride, outHead)
static Napi::Value Absorb(const Napi::CallbackInfo &info) {
    float *in, *out;
    size_t T, H, is, ih, n, v, L, os, oh;
    void *kvb;
    int bf16;
    if (absorb_args(info, "absorb", true, &in, &T, &H, &is, &ih, &kvb, &bf16, &n, &v, &L, &out, &os, &oh))
        k3_mla_absorb(in, T, H, is, ih, kvb, bf16, n, v, L, out, os, oh);
    return info.Env().Undefined();
}

// project(latent, T, H, inStride, inHead, kvb, n, v, L, out, outStride, outHead)
static Napi::Value Project(const Napi::CallbackInfo &info) {
    float *in, *out;
    size_t T, H, is, ih, n, v, L, os, oh;
    void *kvb;
    int bf16;
    if (absorb_args(info, "project", false, &in, &T, &H, &is, &ih, &kvb, &bf16, &n, &v, &L, &out, &os, &oh))
        k3_mla_project(in, T, H, is, ih, kvb, bf16, n, v, L, out, os, oh);
    return info.Env().Undefined();
}

static Napi::Object Module(Napi::Env env, Napi::Object exports) {
    exports["init"] = Napi::Function::New(env, Init);
    exports["attend"] = Napi::Function::New(env, Attend);
    exports["absorb"] = Napi::Function::New(env, Absorb);
    exports["project"] = Napi::Function::New(env, Project);
    return exports;
}

NODE_API_MODULE(k3_mla, Module)
