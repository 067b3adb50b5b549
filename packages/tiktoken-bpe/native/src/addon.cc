// addon.cc: N-API glue for @k3/tiktoken-bpe. Checks every argument (k3_napi.h), then calls the C core.
#include <napi.h>
#include <string>
#include "k3_napi.h"
extern "C" {
#include "encoder.h"
#include "rank_file.h"
}

// The handle is an External tagged with this type tag, so a foreign External cannot be passed in.
static const napi_type_tag kEncoderTag = {0x6b33746b74626570ULL, 0x656e636f64657231ULL};

// What the handle points at: destroy() frees the encoder at once and leaves the box (freed by the
// finalizer), so a call after destroy() finds NULL and throws instead of touching freed memory.
struct encoder_box {
    k3_encoder *encoder;
};

static const char *kDisposed = "the tokenizer was disposed (Tokenizer.dispose()); create a new one";

// The box behind a handle, or nullptr after throwing (not a handle from create()).
static encoder_box *get_box(napi_env env, napi_value value, const char *fn) {
    bool tagged = false;
    void *ptr = nullptr;
    if (napi_check_object_type_tag(env, value, &kEncoderTag, &tagged) != napi_ok || !tagged ||
        napi_get_value_external(env, value, &ptr) != napi_ok) {
        k3::fail(Napi::Env(env), fn, "argument 'handle' must be a tokenizer handle from create()");
        return nullptr;
    }
    return static_cast<encoder_box *>(ptr);
}

// The live encoder behind a handle, or nullptr after throwing (not a handle, or disposed).
static k3_encoder *live_encoder(napi_env env, napi_value value, const char *fn) {
    encoder_box *box = get_box(env, value, fn);
    if (!box) return nullptr;
    if (!box->encoder) k3::fail(Napi::Env(env), fn, kDisposed);
    return box->encoder;
}

static k3_encoder *get_encoder(const Napi::CallbackInfo &info, const char *fn) {
    if (info.Length() < 1 || !info[0].IsExternal()) {
        k3::fail(info.Env(), fn, "argument 'handle' must be a tokenizer handle from create()");
        return nullptr;
    }
    return live_encoder(info.Env(), info[0], fn);
}

static bool get_u32(const Napi::CallbackInfo &info, size_t index, const char *fn, const char *name, uint32_t **out,
                    size_t *count) {
    if (info.Length() <= index || !info[index].IsTypedArray() ||
        info[index].As<Napi::TypedArray>().TypedArrayType() != napi_uint32_array)
        return k3::fail(info.Env(), fn, std::string("argument '") + name + "' must be a Uint32Array");
    Napi::Uint32Array a = info[index].As<Napi::Uint32Array>();
    *out = a.Data();
    *count = a.ElementLength();
    return true;
}

static bool get_u8(const Napi::CallbackInfo &info, size_t index, const char *fn, const char *name, uint8_t **out,
                   size_t *count, bool nullable) {
    if (nullable && info.Length() > index && info[index].IsNull()) {
        *out = nullptr;
        *count = 0;
        return true;
    }
    if (info.Length() <= index || !info[index].IsTypedArray() ||
        info[index].As<Napi::TypedArray>().TypedArrayType() != napi_uint8_array)
        return k3::fail(info.Env(), fn, std::string("argument '") + name + "' must be a Uint8Array" + (nullable ? " or null" : ""));
    Napi::Uint8Array a = info[index].As<Napi::Uint8Array>();
    *out = a.Data();
    *count = a.ElementLength();
    return true;
}

// create(pool, offsets, ranks, family, specialPool, specialOffsets, specialIds)
static Napi::Value Create(const Napi::CallbackInfo &info) {
    Napi::Env env = info.Env();
    const char *fn = "create";
    uint8_t *pool, *spool;
    uint32_t *offsets, *ranks, *soff, *sids;
    size_t pool_len, n_off, n_ranks, spool_len, n_soff, n_sids, family;
    if (!get_u8(info, 0, fn, "pool", &pool, &pool_len, false) || !get_u32(info, 1, fn, "offsets", &offsets, &n_off) ||
        !get_u32(info, 2, fn, "ranks", &ranks, &n_ranks) || !k3::get_size(info, 3, fn, "family", &family) ||
        !get_u8(info, 4, fn, "specialPool", &spool, &spool_len, false) ||
        !get_u32(info, 5, fn, "specialOffsets", &soff, &n_soff) || !get_u32(info, 6, fn, "specialIds", &sids, &n_sids))
        return env.Undefined();
    if (family > 2) return k3::fail(env, fn, "family must be 0 (cl100k), 1 (o200k) or 2 (kimi)", true), env.Undefined();
    if (n_ranks == 0 || n_off != n_ranks + 1)
        return k3::fail(env, fn, "offsets must hold ranks.length + 1 values and ranks must not be empty", true), env.Undefined();
    if (n_soff != n_sids + 1)
        return k3::fail(env, fn, "specialOffsets must hold specialIds.length + 1 values", true), env.Undefined();
    if (offsets[0] != 0 || soff[0] != 0) return k3::fail(env, fn, "offsets must start at 0", true), env.Undefined();
    char err[256];
    k3_encoder *e = k3_encoder_new(pool, pool_len, offsets, ranks, n_ranks, (k3_family)family, spool, spool_len, soff,
                                   sids, n_sids, err, sizeof err);
    if (!e) return k3::fail(env, fn, err, true), env.Undefined();
    encoder_box *box = new encoder_box{e};
    Napi::External<encoder_box> handle = Napi::External<encoder_box>::New(env, box, [](Napi::Env, encoder_box *b) {
        k3_encoder_free(b->encoder);
        delete b;
    });
    napi_type_tag_object(env, handle, &kEncoderTag);
    return handle;
}

// destroy(handle): frees the encoder now instead of at garbage collection; a second call does nothing.
static Napi::Value Destroy(const Napi::CallbackInfo &info) {
    Napi::Env env = info.Env();
    if (info.Length() < 1 || !info[0].IsExternal())
        return k3::fail(env, "destroy", "argument 'handle' must be a tokenizer handle from create()"), env.Undefined();
    encoder_box *box = get_box(env, info[0], "destroy");
    if (!box) return env.Undefined();
    k3_encoder_free(box->encoder);
    box->encoder = nullptr;
    return env.Undefined();
}

// Shared checks of (handle, bytes, len, mask) for encode/count/findSpecial.
static bool text_args(const Napi::CallbackInfo &info, const char *fn, bool mask_nullable, k3_encoder **e, uint8_t **s,
                      size_t *len, uint8_t **mask) {
    size_t cap, mask_len;
    if (!(*e = get_encoder(info, fn)) || !get_u8(info, 1, fn, "bytes", s, &cap, false) ||
        !k3::get_size(info, 2, fn, "len", len) || !get_u8(info, 3, fn, "mask", mask, &mask_len, mask_nullable))
        return false;
    if (*len > cap) return k3::fail(info.Env(), fn, "len is larger than bytes.length", true);
    if (*mask && mask_len != (*e)->n_special)
        return k3::fail(info.Env(), fn,
                        "mask must have one entry per special token (" + std::to_string((*e)->n_special) + ")", true);
    return true;
}

// encode(handle, bytes, len, allowed | null, out) -> count
static Napi::Value Encode(const Napi::CallbackInfo &info) {
    Napi::Env env = info.Env();
    const char *fn = "encode";
    k3_encoder *e;
    uint8_t *s, *mask;
    uint32_t *out;
    size_t len, out_len;
    if (!text_args(info, fn, true, &e, &s, &len, &mask) || !get_u32(info, 4, fn, "out", &out, &out_len))
        return env.Undefined();
    if (out_len < len) return k3::fail(env, fn, "out must hold at least len ids", true), env.Undefined();
    size_t n = k3_encoder_encode(e, s, len, mask, out);
    if (n == (size_t)-1) return k3::fail(env, fn, "out of memory", true), env.Undefined();
    return Napi::Number::New(env, (double)n);
}

// count(handle, bytes, len, allowed | null) -> count
static Napi::Value Count(const Napi::CallbackInfo &info) {
    Napi::Env env = info.Env();
    k3_encoder *e;
    uint8_t *s, *mask;
    size_t len;
    if (!text_args(info, "count", true, &e, &s, &len, &mask)) return env.Undefined();
    size_t n = k3_encoder_encode(e, s, len, mask, nullptr);
    if (n == (size_t)-1) return k3::fail(env, "count", "out of memory", true), env.Undefined();
    return Napi::Number::New(env, (double)n);
}

// findSpecial(handle, bytes, len, mask) -> special index or -1
static Napi::Value FindSpecial(const Napi::CallbackInfo &info) {
    Napi::Env env = info.Env();
    k3_encoder *e;
    uint8_t *s, *mask;
    size_t len, pos = 0;
    if (!text_args(info, "findSpecial", false, &e, &s, &len, &mask)) return env.Undefined();
    return Napi::Number::New(env, (double)k3_encoder_find_special(e, s, 0, len, mask, &pos));
}

// mergePiece(handle, piece, heap, out) -> count (test hook: linear vs heap merge, no whole-piece lookup)
static Napi::Value MergePiece(const Napi::CallbackInfo &info) {
    Napi::Env env = info.Env();
    const char *fn = "mergePiece";
    k3_encoder *e;
    uint8_t *s;
    uint32_t *out;
    size_t len, heap, out_len;
    if (!(e = get_encoder(info, fn)) || !get_u8(info, 1, fn, "piece", &s, &len, false) ||
        !k3::get_size(info, 2, fn, "heap", &heap) || !get_u32(info, 3, fn, "out", &out, &out_len))
        return env.Undefined();
    if (out_len < len) return k3::fail(env, fn, "out must hold at least piece.length ids", true), env.Undefined();
    if (!heap && len > K3_HEAP_THRESHOLD)
        return k3::fail(env, fn, "the linear merge takes pieces of at most 100 bytes", true), env.Undefined();
    size_t n = k3_bpe_encode(&e->table, s, len, out, &e->scratch, heap ? 2 : 1);
    if (n == (size_t)-1) return k3::fail(env, fn, "out of memory", true), env.Undefined();
    return Napi::Number::New(env, (double)n);
}

// decodeInto / decodeString are called per generated token by a streaming server, so they use raw
// N-API (one napi_get_typedarray_info per array, no node-addon-api wrappers): the call overhead is
// most of the cost of a short decode. Same checks, same messages as the helpers above.
static bool raw_u8_or_u32(napi_env env, napi_value v, napi_typedarray_type want, const char *fn, const char *name,
                          void **data, size_t *count) {
    napi_typedarray_type type;
    napi_value ab;
    size_t off;
    bool is_ta = false;
    if (napi_is_typedarray(env, v, &is_ta) != napi_ok || !is_ta ||
        napi_get_typedarray_info(env, v, &type, count, data, &ab, &off) != napi_ok || type != want)
        return k3::fail(Napi::Env(env), fn,
                        std::string("argument '") + name + "' must be a " +
                            (want == napi_uint8_array ? "Uint8Array" : "Uint32Array"));
    return true;
}

// Checks (handle, ids, out) and decodes; *result as k3_decode returns it.
static bool decode_call(napi_env env, napi_callback_info cbi, const char *fn, int64_t *result, uint8_t **out,
                        size_t *cap) {
    size_t argc = 3;
    napi_value argv[3];
    if (napi_get_cb_info(env, cbi, &argc, argv, nullptr, nullptr) != napi_ok) return false;
    if (argc < 3) return k3::fail(Napi::Env(env), fn, "expects (handle, ids, out)");
    k3_encoder *e = live_encoder(env, argv[0], fn);
    if (!e) return false;
    void *ids, *o;
    size_t n;
    if (!raw_u8_or_u32(env, argv[1], napi_uint32_array, fn, "ids", &ids, &n) ||
        !raw_u8_or_u32(env, argv[2], napi_uint8_array, fn, "out", &o, cap))
        return false;
    if (*cap < K3_DECODE_PAD)
        return k3::fail(Napi::Env(env), fn, "out must hold at least " + std::to_string(K3_DECODE_PAD) + " bytes", true);
    const k3_decode_table *t = k3_encoder_decode_table(e);
    if (!t) return k3::fail(Napi::Env(env), fn, "out of memory for the decode table", true);
    *out = static_cast<uint8_t *>(o);
    *result = k3_decode(t, static_cast<const uint32_t *>(ids), n, *out, *cap);
    return true;
}

// decodeInto(handle, ids, out) -> bytes written; bytes needed when > out.length - 16; -(i + 1) when ids[i] is unknown
static napi_value DecodeInto(napi_env env, napi_callback_info cbi) {
    int64_t r;
    uint8_t *out;
    size_t cap;
    napi_value v = nullptr;
    if (decode_call(env, cbi, "decodeInto", &r, &out, &cap)) napi_create_double(env, (double)r, &v);
    return v;
}

// decodeString(handle, ids, out) -> the UTF-8 text of the ids (V8's decoder: one U+FFFD per maximal
// invalid subpart, BOM kept), or the number decodeInto would return when out is too small or an id is unknown
static napi_value DecodeString(napi_env env, napi_callback_info cbi) {
    int64_t r;
    uint8_t *out;
    size_t cap;
    napi_value v = nullptr;
    if (!decode_call(env, cbi, "decodeString", &r, &out, &cap)) return nullptr;
    if (r < 0 || (uint64_t)r + K3_DECODE_PAD > cap) {
        napi_create_double(env, (double)r, &v);
        return v;
    }
    if (napi_create_string_utf8(env, reinterpret_cast<const char *>(out), (size_t)r, &v) != napi_ok) {
        k3::fail(Napi::Env(env), "decodeString", "cannot create the string (too long?)", true);
        return nullptr;
    }
    return v;
}

static void export_raw(Napi::Env env, Napi::Object exports, const char *name, napi_callback cb) {
    napi_value f;
    napi_create_function(env, name, NAPI_AUTO_LENGTH, cb, nullptr, &f);
    exports[name] = Napi::Value(env, f);
}

// parseRankFile(data, pool, offsets, ranks) -> [count, poolUsed] or -(line) of the first bad line
static Napi::Value ParseRankFile(const Napi::CallbackInfo &info) {
    Napi::Env env = info.Env();
    const char *fn = "parseRankFile";
    uint8_t *data, *pool;
    uint32_t *offsets, *ranks;
    size_t len, pool_cap, n_off, n_ranks, used = 0;
    if (!get_u8(info, 0, fn, "data", &data, &len, false) || !get_u8(info, 1, fn, "pool", &pool, &pool_cap, false) ||
        !get_u32(info, 2, fn, "offsets", &offsets, &n_off) || !get_u32(info, 3, fn, "ranks", &ranks, &n_ranks))
        return env.Undefined();
    if (n_off != n_ranks + 1) return k3::fail(env, fn, "offsets must hold ranks.length + 1 values", true), env.Undefined();
    long r = k3_parse_rank_file(data, len, pool, pool_cap, offsets, ranks, n_off, &used);
    if (r < 0) return Napi::Number::New(env, (double)r);
    Napi::Array out = Napi::Array::New(env, 2);
    out.Set(0u, Napi::Number::New(env, (double)r));
    out.Set(1u, Napi::Number::New(env, (double)used));
    return out;
}

static Napi::Object Init(Napi::Env env, Napi::Object exports) {
    exports["create"] = Napi::Function::New(env, Create);
    exports["destroy"] = Napi::Function::New(env, Destroy);
    exports["encode"] = Napi::Function::New(env, Encode);
    exports["count"] = Napi::Function::New(env, Count);
    exports["findSpecial"] = Napi::Function::New(env, FindSpecial);
    exports["mergePiece"] = Napi::Function::New(env, MergePiece);
    export_raw(env, exports, "decodeInto", DecodeInto);
    export_raw(env, exports, "decodeString", DecodeString);
    exports["parseRankFile"] = Napi::Function::New(env, ParseRankFile);
    return exports;
}

NODE_API_MODULE(k3_tiktoken_bpe, Init)
