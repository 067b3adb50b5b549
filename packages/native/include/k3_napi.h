/*
 * k3_napi.h: argument checks shared by every k3 addon's N-API glue (node-addon-api, no C++
 * exceptions). Each helper validates before any kernel touches memory and, on failure, throws
 * a JS TypeError/RangeError naming the function and the argument, then returns false.
 */
#ifndef K3_NAPI_H
#define K3_NAPI_H

#include <napi.h>
#include <cstddef>
#include <cstdint>
#include <string>

namespace k3 {

struct Bytes {
    uint8_t *data = nullptr;
    size_t length = 0; /* in bytes */
};

inline bool fail(Napi::Env env, const std::string &where, const std::string &what, bool range = false) {
    std::string message = where + ": " + what;
    if (range)
        Napi::RangeError::New(env, message).ThrowAsJavaScriptException();
    else
        Napi::TypeError::New(env, message).ThrowAsJavaScriptException();
    return false;
}

/* Any TypedArray, DataView or Buffer: pointer and byte length of the viewed range. */
inline bool get_bytes(const Napi::CallbackInfo &info, size_t index, const char *where, const char *name, Bytes *out) {
    Napi::Env env = info.Env();
    if (info.Length() <= index) return fail(env, where, std::string("missing argument '") + name + "'");
    Napi::Value v = info[index];
    if (v.IsTypedArray()) {
        Napi::TypedArray a = v.As<Napi::TypedArray>();
        out->data = static_cast<uint8_t *>(a.ArrayBuffer().Data()) + a.ByteOffset();
        out->length = a.ByteLength();
        return true;
    }
    if (v.IsDataView()) {
        Napi::DataView d = v.As<Napi::DataView>();
        out->data = static_cast<uint8_t *>(d.ArrayBuffer().Data()) + d.ByteOffset();
        out->length = d.ByteLength();
        return true;
    }
    return fail(env, where, std::string("argument '") + name + "' must be a TypedArray, Buffer or DataView");
}

/* A Float32Array holding at least `min_count` values (min_count 0 = any length). */
inline bool get_f32(const Napi::CallbackInfo &info, size_t index, const char *where, const char *name, size_t min_count,
                    float **out, size_t *count) {
    Napi::Env env = info.Env();
    if (info.Length() <= index || !info[index].IsTypedArray() ||
        info[index].As<Napi::TypedArray>().TypedArrayType() != napi_float32_array)
        return fail(env, where, std::string("argument '") + name + "' must be a Float32Array");
    Napi::Float32Array a = info[index].As<Napi::Float32Array>();
    if (a.ElementLength() < min_count)
        return fail(env, where,
                    std::string("argument '") + name + "' has " + std::to_string(a.ElementLength()) +
                        " values, needs at least " + std::to_string(min_count),
                    true);
    *out = a.Data();
    if (count) *count = a.ElementLength();
    return true;
}

/* A non-negative integer that is exactly representable (<= 2^53). */
inline bool get_size(const Napi::CallbackInfo &info, size_t index, const char *where, const char *name, size_t *out) {
    Napi::Env env = info.Env();
    if (info.Length() <= index || !info[index].IsNumber())
        return fail(env, where, std::string("argument '") + name + "' must be a number");
    double d = info[index].As<Napi::Number>().DoubleValue();
    if (!(d >= 0) || d > 9007199254740992.0 || d != (double)(uint64_t)d)
        return fail(env, where, std::string("argument '") + name + "' must be a non-negative integer", true);
    *out = (size_t)d;
    return true;
}

/* a * b without wrapping; false on overflow. */
inline bool mul_size(size_t a, size_t b, size_t *out) {
    if (a != 0 && b > SIZE_MAX / a) return false;
    *out = a * b;
    return true;
}

/*
 * The largest external ArrayBuffer any addon may hand to JS. Node 20 builds an external
 * ArrayBuffer as a Buffer, whose limit is buffer.constants.MAX_LENGTH = 2^32 bytes (a typed array
 * is capped there too). Past it napi_create_external_arraybuffer fails AFTER scheduling the
 * finalizer, and node-addon-api's ArrayBuffer::New then frees its finalizer data a second time
 * ("free(): double free detected in tcache 2"). Check the length against this before creating one.
 */
constexpr uint64_t kMaxExternalBytes = (uint64_t)1 << 32;

}  // namespace k3

#endif
