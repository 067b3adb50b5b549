// addon.cc: N-API glue for @k3/safetensors. Checks arguments, runs the C scanner, and hands the
// column tables to JS as external ArrayBuffers (no copy). All buffers of one parse share one
// reference-counted owner, freed when the last buffer and the lookup handle are collected.
#include <napi.h>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include "k3_napi.h"
#include "k3_dense_napi.h"
extern "C" {
#include "k3_safetensors.h"
#include "k3_dense.h"
}

static const k3_dense_api *dense_api = nullptr;

// ---------------------------------------------------------------- ownership

struct Owner {
    st_checkpoint ck;
    std::atomic<int> refs{1};
};

static void release(Owner *o) {
    if (o->refs.fetch_sub(1) == 1) {
        st_checkpoint_free(&o->ck);
        delete o;
    }
}

static void release_buffer(Napi::Env, void *, Owner *o) { release(o); }

template <typename Array, typename T>
static Napi::Value column(Napi::Env env, Owner *o, T *data, size_t count) {
    size_t bytes = count * sizeof(T);
    Napi::ArrayBuffer buf;
    if (bytes == 0 || data == nullptr) {
        buf = Napi::ArrayBuffer::New(env, 0);
        count = 0;
    } else {
        o->refs.fetch_add(1);
        buf = Napi::ArrayBuffer::New(env, data, bytes, release_buffer, o);
    }
    return Array::New(env, count, buf, 0);
}

static Napi::Object table_object(Napi::Env env, Owner *o, st_table *t) {
    Napi::Object obj = Napi::Object::New(env);
    obj["count"] = Napi::Number::New(env, t->count);
    obj["headerLength"] = Napi::Number::New(env, (double)t->header_length);
    obj["fileSize"] = Napi::Number::New(env, (double)t->file_size);
    obj["dtype"] = column<Napi::Uint8Array>(env, o, t->dtype, t->count);
    obj["begin"] = column<Napi::Float64Array>(env, o, t->begin, t->count);
    obj["end"] = column<Napi::Float64Array>(env, o, t->end, t->count);
    obj["shapeStart"] = column<Napi::Uint32Array>(env, o, t->shape_start, (size_t)t->count + 1);
    obj["dims"] = column<Napi::Float64Array>(env, o, t->dims, t->n_dims);
    obj["nameStart"] = column<Napi::Uint32Array>(env, o, t->name_start, (size_t)t->count + 1);
    obj["nameBytes"] = column<Napi::Uint8Array>(env, o, t->name_bytes, t->name_length);
    obj["layer"] = column<Napi::Int32Array>(env, o, t->layer, t->count);
    obj["expert"] = column<Napi::Int32Array>(env, o, t->expert, t->count);
    obj["kind"] = column<Napi::Uint8Array>(env, o, t->kind, t->count);
    if (!t->has_metadata) {
        obj["metadata"] = env.Null();
    } else {
        Napi::Array pairs = Napi::Array::New(env, t->meta_count);
        for (uint32_t k = 0; k < t->meta_count; k++) {
            Napi::Array pair = Napi::Array::New(env, 2);
            for (uint32_t j = 0; j < 2; j++) {
                uint32_t a = t->meta_start[2 * k + j], b = t->meta_start[2 * k + j + 1];
                pair[j] = Napi::String::New(env, reinterpret_cast<const char *>(t->meta_bytes + a), b - a);
            }
            pairs[k] = pair;
        }
        obj["metadata"] = pairs;
    }
    return obj;
}

static Napi::Object error_object(Napi::Env env, const st_error &e) {
    Napi::Object err = Napi::Object::New(env);
    err["code"] = Napi::String::New(env, e.code < ST_N_CODES ? st_code_names[e.code] : "IoError");
    err["detail"] = Napi::String::New(env, e.detail);
    err["position"] = Napi::Number::New(env, (double)e.position);
    err["shard"] = Napi::Number::New(env, e.shard);
    if (e.tensor) err["tensor"] = Napi::String::New(env, e.tensor, e.tensor_len);
    return err;
}

static Napi::Object result_error(Napi::Env env, st_error &e) {
    Napi::Object r = Napi::Object::New(env);
    r["error"] = error_object(env, e);
    st_error_clear(&e);
    return r;
}

static Napi::Object checkpoint_result(Napi::Env env, Owner *o) {
    Napi::Object r = Napi::Object::New(env);
    Napi::Array tables = Napi::Array::New(env, o->ck.n_shards);
    for (uint32_t s = 0; s < o->ck.n_shards; s++) tables[s] = table_object(env, o, &o->ck.tables[s]);
    r["tables"] = tables;
    o->refs.fetch_add(1);
    r["handle"] = Napi::External<Owner>::New(env, o, [](Napi::Env, Owner *x) { release(x); });
    release(o);  // the creation reference
    return r;
}

static void run_parallel(int n, void (*task)(void *, int), void *ctx) { dense_api->parallel_for(n, task, ctx); }

// String scans follow the process-wide SIMD level of @k3/dense (scalar until the pool is attached).
static void use_dense_level() { st_set_simd_level(dense_api ? (int)dense_api->simd_level() : 0); }

// ---------------------------------------------------------------- init(api)

static Napi::Value Init_(const Napi::CallbackInfo &info) {
    const k3_dense_api *api = k3::get_dense_api(info, 0, "@k3/safetensors init");
    if (api) dense_api = api;
    return info.Env().Undefined();
}

// ---------------------------------------------------------------- parseBuffer(bytes)

static Napi::Value ParseBuffer(const Napi::CallbackInfo &info) {
    Napi::Env env = info.Env();
    use_dense_level();
    k3::Bytes b;
    if (!k3::get_bytes(info, 0, "parseBuffer", "bytes", &b)) return env.Undefined();
    st_error e;
    memset(&e, 0, sizeof e);
    e.position = -1;
    e.shard = -1;
    int64_t n = st_header_length(b.data, b.length < 8 ? b.length : 8, b.length, &e);
    if (n < 0) return result_error(env, e);
    Owner *o = new Owner();
    o->ck.n_shards = 1;
    o->ck.tables = static_cast<st_table *>(calloc(1, sizeof(st_table)));
    o->ck.bases = static_cast<uint64_t *>(calloc(2, sizeof(uint64_t)));
    if (!o->ck.tables || !o->ck.bases || st_parse_header(b.data + 8, (size_t)n, b.length, nullptr, &o->ck.tables[0], &e) != 0) {
        if (e.code == ST_OK) st_fail(&e, ST_OUT_OF_MEMORY, -1, "out of memory");
        release(o);
        return result_error(env, e);
    }
    o->ck.bases[1] = o->ck.tables[0].count;
    return checkpoint_result(env, o);
}

// ---------------------------------------------------------------- parseIndexFile(path)

struct IndexOwner {
    st_index x;
};

static Napi::Value ParseIndexFile(const Napi::CallbackInfo &info) {
    Napi::Env env = info.Env();
    use_dense_level();
    if (info.Length() < 1 || !info[0].IsString()) return k3::fail(env, "parseIndexFile", "argument 'path' must be a string"), env.Undefined();
    std::string path = info[0].As<Napi::String>().Utf8Value();
    st_error e;
    memset(&e, 0, sizeof e);
    e.position = -1;
    e.shard = -1;
    auto *ix = new IndexOwner();
    if (st_parse_index_file(path.c_str(), &ix->x, &e) != 0) {
        st_index_free(&ix->x);
        delete ix;
        return result_error(env, e);
    }
    Napi::Object r = Napi::Object::New(env);
    Napi::Array shards = Napi::Array::New(env, ix->x.n_shards);
    for (uint32_t s = 0; s < ix->x.n_shards; s++) {
        uint32_t a = ix->x.shard_start[s], z = ix->x.shard_start[s + 1];
        shards[s] = Napi::String::New(env, reinterpret_cast<const char *>(ix->x.shard_bytes + a), z - a);
    }
    r["shards"] = shards;
    r["entries"] = Napi::Number::New(env, ix->x.count);
    if (ix->x.metadata_begin >= 0)
        r["metadataJson"] = Napi::String::New(env, reinterpret_cast<const char *>(ix->x.json + ix->x.metadata_begin),
                                              (size_t)(ix->x.metadata_end - ix->x.metadata_begin));
    else
        r["metadataJson"] = env.Null();
    r["handle"] = Napi::External<IndexOwner>::New(env, ix, [](Napi::Env, IndexOwner *p) {
        st_index_free(&p->x);
        delete p;
    });
    return r;
}

// ---------------------------------------------------------------- openShards(paths, index?)

static bool get_paths(const Napi::CallbackInfo &info, const char *fn, std::vector<std::string> *out) {
    if (info.Length() < 1 || !info[0].IsArray()) return k3::fail(info.Env(), fn, "argument 'paths' must be an array of strings");
    Napi::Array a = info[0].As<Napi::Array>();
    if (a.Length() > ST_MAX_SHARDS) return k3::fail(info.Env(), fn, "too many shard paths", true);
    for (uint32_t i = 0; i < a.Length(); i++) {
        Napi::Value v = a[i];
        if (!v.IsString()) return k3::fail(info.Env(), fn, "argument 'paths' must be an array of strings");
        out->push_back(v.As<Napi::String>().Utf8Value());
    }
    return true;
}

static const st_index *get_index(const Napi::CallbackInfo &info, size_t i) {
    if (info.Length() <= i || !info[i].IsExternal()) return nullptr;
    return &info[i].As<Napi::External<IndexOwner>>().Data()->x;
}

static Napi::Value OpenShards(const Napi::CallbackInfo &info) {
    Napi::Env env = info.Env();
    use_dense_level();
    std::vector<std::string> paths;
    if (!get_paths(info, "openShards", &paths)) return env.Undefined();
    std::vector<const char *> cpaths;
    for (auto &p : paths) cpaths.push_back(p.c_str());
    const st_index *ix = get_index(info, 1);
    if (ix && ix->n_shards != paths.size()) {
        k3::fail(env, "openShards", "paths must list the index's shards in order", true);
        return env.Undefined();
    }
    st_error e;
    memset(&e, 0, sizeof e);
    e.position = -1;
    e.shard = -1;
    Owner *o = new Owner();
    if (st_open_shards(cpaths.data(), (uint32_t)paths.size(), ix, dense_api ? run_parallel : nullptr, &o->ck, &e) != 0) {
        release(o);
        return result_error(env, e);
    }
    return checkpoint_result(env, o);
}

// Same work on a libuv thread; resolves to the same result object.
class OpenShardsWorker : public Napi::AsyncWorker {
  public:
    OpenShardsWorker(Napi::Env env, std::vector<std::string> paths, Napi::Value index_ref)
        : Napi::AsyncWorker(env), deferred_(Napi::Promise::Deferred::New(env)), paths_(std::move(paths)) {
        if (index_ref.IsExternal()) {
            index_ = &index_ref.As<Napi::External<IndexOwner>>().Data()->x;
            index_ref_ = Napi::Persistent(index_ref.As<Napi::Object>());
        }
        memset(&e_, 0, sizeof e_);
        e_.position = -1;
        e_.shard = -1;
        owner_ = new Owner();
    }
    Napi::Promise Promise() { return deferred_.Promise(); }
    void Execute() override {
        std::vector<const char *> cpaths;
        for (auto &p : paths_) cpaths.push_back(p.c_str());
        ok_ = st_open_shards(cpaths.data(), (uint32_t)paths_.size(), index_, dense_api ? run_parallel : nullptr, &owner_->ck,
                             &e_) == 0;
    }
    void OnOK() override {
        Napi::Env env = Env();
        if (!ok_) {
            release(owner_);
            deferred_.Resolve(result_error(env, e_));
        } else
            deferred_.Resolve(checkpoint_result(env, owner_));
    }
    void OnError(const Napi::Error &err) override {
        release(owner_);
        deferred_.Reject(err.Value());
    }

  private:
    Napi::Promise::Deferred deferred_;
    std::vector<std::string> paths_;
    const st_index *index_ = nullptr;
    Napi::ObjectReference index_ref_;
    st_error e_;
    Owner *owner_;
    bool ok_ = false;
};

static Napi::Value OpenShardsAsync(const Napi::CallbackInfo &info) {
    Napi::Env env = info.Env();
    use_dense_level();
    std::vector<std::string> paths;
    if (!get_paths(info, "openShardsAsync", &paths)) return env.Undefined();
    const st_index *ix = get_index(info, 1);
    if (ix && ix->n_shards != paths.size()) {
        k3::fail(env, "openShardsAsync", "paths must list the index's shards in order", true);
        return env.Undefined();
    }
    auto *w = new OpenShardsWorker(env, std::move(paths), info.Length() > 1 ? info[1] : env.Undefined());
    Napi::Promise p = w->Promise();
    w->Queue();
    return p;
}

// ---------------------------------------------------------------- freeIndex(handle)

// Releases a parsed index as soon as the shards are checked (the GC does not know its size).
static Napi::Value FreeIndex(const Napi::CallbackInfo &info) {
    if (info.Length() >= 1 && info[0].IsExternal()) st_index_free(&info[0].As<Napi::External<IndexOwner>>().Data()->x);
    return info.Env().Undefined();
}

// ---------------------------------------------------------------- speculative open

struct SpecOwner {
    st_speculative sp;
    std::vector<std::string> paths;
    std::vector<const char *> cpaths;
    bool done = false;
};

static void spec_release(Napi::Env, SpecOwner *o) {
    st_speculative_free(&o->sp);
    delete o;
}

static Napi::Object spec_result(Napi::Env env, SpecOwner *o) {
    Napi::Object r = Napi::Object::New(env);
    st_index &x = o->sp.index;
    if (o->sp.index_error.code != ST_OK) {
        r["error"] = error_object(env, o->sp.index_error);
    } else {
        Napi::Array shards = Napi::Array::New(env, x.n_shards);
        for (uint32_t s = 0; s < x.n_shards; s++)
            shards[s] = Napi::String::New(env, reinterpret_cast<const char *>(x.shard_bytes + x.shard_start[s]),
                                          x.shard_start[s + 1] - x.shard_start[s]);
        r["shards"] = shards;
        r["entries"] = Napi::Number::New(env, x.count);
        if (x.metadata_begin >= 0)
            r["metadataJson"] = Napi::String::New(env, reinterpret_cast<const char *>(x.json + x.metadata_begin),
                                                  (size_t)(x.metadata_end - x.metadata_begin));
        else
            r["metadataJson"] = env.Null();
    }
    r["handle"] = Napi::External<SpecOwner>::New(env, o, spec_release);
    return r;
}

static SpecOwner *spec_args(const Napi::CallbackInfo &info, const char *fn, std::string *index_path) {
    Napi::Env env = info.Env();
    if (info.Length() < 2 || !info[0].IsString() || !info[1].IsArray()) {
        k3::fail(env, fn, "expected (indexPath: string, candidates: string[])");
        return nullptr;
    }
    *index_path = info[0].As<Napi::String>().Utf8Value();
    Napi::Array a = info[1].As<Napi::Array>();
    if (a.Length() > ST_MAX_SHARDS) {
        k3::fail(env, fn, "too many candidate files", true);
        return nullptr;
    }
    auto *o = new SpecOwner();
    for (uint32_t i = 0; i < a.Length(); i++) {
        Napi::Value v = a[i];
        if (!v.IsString()) {
            delete o;
            k3::fail(env, fn, "candidates must be strings");
            return nullptr;
        }
        o->paths.push_back(v.As<Napi::String>().Utf8Value());
    }
    for (auto &p : o->paths) o->cpaths.push_back(p.c_str());
    return o;
}

static Napi::Value SpeculativeOpen(const Napi::CallbackInfo &info) {
    use_dense_level();
    std::string index_path;
    SpecOwner *o = spec_args(info, "speculativeOpen", &index_path);
    if (!o) return info.Env().Undefined();
    st_speculative_parse(index_path.c_str(), o->cpaths.data(), (uint32_t)o->cpaths.size(), dense_api ? run_parallel : nullptr, &o->sp);
    return spec_result(info.Env(), o);
}

class SpeculativeWorker : public Napi::AsyncWorker {
  public:
    SpeculativeWorker(Napi::Env env, SpecOwner *o, std::string index_path)
        : Napi::AsyncWorker(env), deferred_(Napi::Promise::Deferred::New(env)), o_(o), index_path_(std::move(index_path)) {}
    Napi::Promise Promise() { return deferred_.Promise(); }
    void Execute() override {
        st_speculative_parse(index_path_.c_str(), o_->cpaths.data(), (uint32_t)o_->cpaths.size(), dense_api ? run_parallel : nullptr,
                             &o_->sp);
    }
    void OnOK() override { deferred_.Resolve(spec_result(Env(), o_)); }
    void OnError(const Napi::Error &err) override {
        st_speculative_free(&o_->sp);
        delete o_;
        deferred_.Reject(err.Value());
    }

  private:
    Napi::Promise::Deferred deferred_;
    SpecOwner *o_;
    std::string index_path_;
};

static Napi::Value SpeculativeOpenAsync(const Napi::CallbackInfo &info) {
    use_dense_level();
    std::string index_path;
    SpecOwner *o = spec_args(info, "speculativeOpenAsync", &index_path);
    if (!o) return info.Env().Undefined();
    auto *w = new SpeculativeWorker(info.Env(), o, index_path);
    Napi::Promise p = w->Promise();
    w->Queue();
    return p;
}

// speculativeFinish(handle, order: Uint32Array) -> checkpoint result or {error}; frees the rest.
static Napi::Value SpeculativeFinish(const Napi::CallbackInfo &info) {
    Napi::Env env = info.Env();
    if (info.Length() < 2 || !info[0].IsExternal() || !info[1].IsTypedArray() ||
        info[1].As<Napi::TypedArray>().TypedArrayType() != napi_uint32_array) {
        k3::fail(env, "speculativeFinish", "expected (handle, order: Uint32Array)");
        return env.Undefined();
    }
    SpecOwner *o = info[0].As<Napi::External<SpecOwner>>().Data();
    Napi::Uint32Array order = info[1].As<Napi::Uint32Array>();
    if (o->done || o->sp.index_error.code != ST_OK || order.ElementLength() != o->sp.index.n_shards) {
        k3::fail(env, "speculativeFinish", "order must give one candidate per index shard, once", true);
        return env.Undefined();
    }
    o->done = true;
    st_error e;
    memset(&e, 0, sizeof e);
    e.position = -1;
    e.shard = -1;
    Owner *ck = new Owner();
    int rc = st_speculative_finish(&o->sp, order.Data(), dense_api ? run_parallel : nullptr, &ck->ck, &e);
    st_speculative_free(&o->sp);
    if (rc != 0) {
        release(ck);
        return result_error(env, e);
    }
    return checkpoint_result(env, ck);
}

// ---------------------------------------------------------------- find(handle, name)

static Napi::Value Find(const Napi::CallbackInfo &info) {
    Napi::Env env = info.Env();
    if (info.Length() < 2 || !info[0].IsExternal() || !info[1].IsString()) {
        k3::fail(env, "find", "expected (handle, name: string)");
        return env.Undefined();
    }
    Owner *o = info[0].As<Napi::External<Owner>>().Data();
    std::string name = info[1].As<Napi::String>().Utf8Value();
    int64_t g = st_checkpoint_find(&o->ck, reinterpret_cast<const uint8_t *>(name.data()), name.size());
    return Napi::Number::New(env, (double)g);
}

// ---------------------------------------------------------------- mapRange(path, offset, length)

struct Mapping {
    void *base;
    size_t length;
};

static Napi::Value MapRange(const Napi::CallbackInfo &info) {
    Napi::Env env = info.Env();
    const char *fn = "mapRange";
    if (info.Length() < 1 || !info[0].IsString()) return k3::fail(env, fn, "argument 'path' must be a string"), env.Undefined();
    size_t offset, length;
    if (!k3::get_size(info, 1, fn, "offset", &offset) || !k3::get_size(info, 2, fn, "length", &length)) return env.Undefined();
    std::string path = info[0].As<Napi::String>().Utf8Value();
    if (length == 0) return Napi::ArrayBuffer::New(env, 0);
    if (length > k3::kMaxExternalBytes)
        return k3::fail(env, fn, "length " + std::to_string(length) + " of " + path + " is above the " +
                                     std::to_string(k3::kMaxExternalBytes) + " bytes one JS buffer can hold; map it in pieces", true),
               env.Undefined();
    int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return k3::fail(env, fn, "cannot open " + path + ": " + strerror(errno)), env.Undefined();
    struct stat st;
    if (fstat(fd, &st) != 0 || offset > (size_t)st.st_size || length > (size_t)st.st_size - offset) {
        close(fd);
        return k3::fail(env, fn, "range [" + std::to_string(offset) + ", +" + std::to_string(length) + ") is not inside " + path, true),
               env.Undefined();
    }
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t aligned = offset - offset % page;
    size_t span = length + (offset - aligned);
    void *base = mmap(nullptr, span, PROT_READ, MAP_PRIVATE, fd, (off_t)aligned);
    close(fd);
    if (base == MAP_FAILED) return k3::fail(env, fn, std::string("mmap failed: ") + strerror(errno)), env.Undefined();
    auto *m = new Mapping{base, span};
    return Napi::ArrayBuffer::New(env, static_cast<uint8_t *>(base) + (offset - aligned), length,
                                  [](Napi::Env, void *, Mapping *x) {
                                      munmap(x->base, x->length);
                                      delete x;
                                  },
                                  m);
}

// ---------------------------------------------------------------- module

static Napi::Object InitModule(Napi::Env env, Napi::Object exports) {
    exports["init"] = Napi::Function::New(env, Init_);
    exports["parseBuffer"] = Napi::Function::New(env, ParseBuffer);
    exports["parseIndexFile"] = Napi::Function::New(env, ParseIndexFile);
    exports["openShards"] = Napi::Function::New(env, OpenShards);
    exports["openShardsAsync"] = Napi::Function::New(env, OpenShardsAsync);
    exports["find"] = Napi::Function::New(env, Find);
    exports["freeIndex"] = Napi::Function::New(env, FreeIndex);
    exports["speculativeOpen"] = Napi::Function::New(env, SpeculativeOpen);
    exports["speculativeOpenAsync"] = Napi::Function::New(env, SpeculativeOpenAsync);
    exports["speculativeFinish"] = Napi::Function::New(env, SpeculativeFinish);
    exports["mapRange"] = Napi::Function::New(env, MapRange);
    return exports;
}

NODE_API_MODULE(k3_safetensors, InitModule)
