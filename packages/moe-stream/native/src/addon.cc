// addon.cc: N-API glue for @k3/moe-stream's expert store. Checks arguments, owns the arena, the
// shard files and the read pool, and posts each finished read back to JS through one
// thread-safe function (so JS gets a per-expert completion while other reads are in flight).
#include <napi.h>
#include <cerrno>
#include <atomic>
#include <fcntl.h>
#include <unistd.h>
#include <cstring>
#include <string>
#include <vector>
#include "k3_napi.h"
extern "C" {
#include "arena.h"
#include "ceiling.h"
#include "crc32.h"
#include "direct_file.h"
#include "pool_bench.h"
#include "read_pool.h"
#include "resident_load.h"
#include "synth_block.h"
#include "uring.h"
}

static const char *kFn = "ExpertStore";

// ---------------------------------------------------------------- completions

// Builds the completion object with raw N-API and gives up quietly at the first failed call: while
// a worker thread is being terminated N-API calls fail (JS can no longer run), a node-addon-api call
// that fails throws, and a throw that fails there is a fatal error (seen in a test that closed a
// server's worker with reads in flight: "FATAL ERROR: Error::ThrowAsJavaScriptException napi_throw").
static bool set_number(napi_env env, napi_value o, const char *key, double v) {
    napi_value x;
    return napi_create_double(env, v, &x) == napi_ok && napi_set_named_property(env, o, key, x) == napi_ok;
}

static bool set_bool(napi_env env, napi_value o, const char *key, bool v) {
    napi_value x;
    return napi_get_boolean(env, v, &x) == napi_ok && napi_set_named_property(env, o, key, x) == napi_ok;
}

static bool set_string(napi_env env, napi_value o, const char *key, const char *v) {
    napi_value x;
    return napi_create_string_utf8(env, v, NAPI_AUTO_LENGTH, &x) == napi_ok && napi_set_named_property(env, o, key, x) == napi_ok;
}

static void deliver_done(napi_env env, napi_value callback, const k3_read_done *done) {
    napi_value o, undefined, result;
    if (napi_create_object(env, &o) != napi_ok) return;
    bool ok = set_number(env, o, "id", done->id) && set_number(env, o, "slot", done->slot) &&
              set_number(env, o, "status", done->result.status) && set_bool(env, o, "cancelled", done->cancelled != 0) &&
              set_number(env, o, "dataOffset", (double)done->result.data_offset) &&
              set_number(env, o, "deviceBytes", (double)done->result.device_bytes) &&
              set_bool(env, o, "direct", done->result.direct != 0) && set_number(env, o, "startNs", (double)done->start_ns) &&
              set_number(env, o, "endNs", (double)done->end_ns) && set_string(env, o, "message", done->result.message);
    if (ok && done->verdict.failed) {
        napi_value v;
        ok = napi_create_object(env, &v) == napi_ok && set_number(env, v, "tensor", done->verdict.tensor) &&
             set_number(env, v, "expected", done->verdict.expect) && set_number(env, v, "got", done->verdict.got) &&
             set_number(env, v, "others", done->verdict.others) && napi_set_named_property(env, o, "checksum", v) == napi_ok;
    }
    if (!ok || napi_get_undefined(env, &undefined) != napi_ok) return;
    // An exception the callback throws stays pending and surfaces as an uncaught one, as before.
    napi_call_function(env, undefined, callback, 1, &o, &result);
}

static void CallJs(Napi::Env env, Napi::Function callback, std::nullptr_t *, k3_read_done *done) {
    if (env != nullptr && callback != nullptr) deliver_done(env, callback, done);
    free(done);
}

using Tsfn = Napi::TypedThreadSafeFunction<std::nullptr_t, k3_read_done, CallJs>;

// ---------------------------------------------------------------- raw argument reading

// The read entry points (read, readChecked) run for every expert and trunk read, so they are also
// called while a worker thread is being terminated. There N-API calls that may run JS fail, a
// failed node-addon-api call throws, and a throw that cannot happen can be a fatal error. These
// helpers call N-API directly and check every status: each returns false either after throwing a
// TypeError/RangeError for a bad argument, or quietly when N-API itself refused (JS cannot run:
// there is nobody to report to). The entry point then returns undefined with nothing queued.
static bool raw_fail(napi_env env, const char *fn, const std::string &what, bool range = false) {
    std::string message = std::string(fn) + ": " + what;
    // In a terminating env the throw fails as well; its status is ignored on purpose.
    if (range) napi_throw_range_error(env, nullptr, message.c_str());
    else napi_throw_type_error(env, nullptr, message.c_str());
    return false;
}

static bool raw_type(napi_env env, napi_value v, napi_valuetype *type) { return napi_typeof(env, v, type) == napi_ok; }

// A non-negative integer that is exactly representable (<= 2^53).
static bool raw_integer(napi_env env, napi_value v, const char *fn, const std::string &name, uint64_t *out) {
    napi_valuetype t;
    double d;
    if (!raw_type(env, v, &t)) return false;
    if (t != napi_number) return raw_fail(env, fn, name + " must be a number");
    if (napi_get_value_double(env, v, &d) != napi_ok) return false;
    if (!(d >= 0) || d > 9007199254740992.0 || d != (double)(uint64_t)d) return raw_fail(env, fn, name + " must be a non-negative integer", true);
    *out = (uint64_t)d;
    return true;
}

// JS truthiness (a missing argument is undefined: false).
static bool raw_truthy(napi_env env, napi_value v, bool *out) {
    napi_value b;
    return napi_coerce_to_bool(env, v, &b) == napi_ok && napi_get_value_bool(env, b, out) == napi_ok;
}

static bool raw_string(napi_env env, napi_value v, std::string *out) {
    size_t n;
    if (napi_get_value_string_utf8(env, v, nullptr, 0, &n) != napi_ok) return false;
    out->resize(n + 1);
    if (napi_get_value_string_utf8(env, v, &(*out)[0], n + 1, &n) != napi_ok) return false;
    out->resize(n);
    return true;
}

// `v` as an array of at least `min` elements; *ok false (with a TypeError) when it is not one.
static bool raw_array(napi_env env, napi_value v, uint32_t min, bool *ok, uint32_t *length) {
    bool is;
    if (napi_is_array(env, v, &is) != napi_ok) return false;
    *ok = is && napi_get_array_length(env, v, length) == napi_ok && *length >= min;
    return true;
}

// ---------------------------------------------------------------- the arena

// The arena is never handed to JS whole (above 2^32 bytes that cannot be one buffer: see
// k3::kMaxExternalBytes). JS asks for views of ranges (a slot, a layer's chunks), each one external
// ArrayBuffer holding a reference. The store holds one more until close() (or its finalizer, or
// env teardown); the arena is freed once, when the last reference goes, whatever the order.
struct ArenaOwner {
    uint8_t *data;
    uint64_t bytes;
    int64_t accounted;       // bytes reported to V8 with AdjustExternalMemory
    std::atomic<int> refs{1};  // finalizers run on the JS thread; atomic all the same
};

static void arena_release(ArenaOwner *a) {
    if (a->refs.fetch_sub(1) == 1) {
        k3_arena_free(a->data);
        delete a;
    }
}

static void arena_view_finalize(napi_env, void *, void *hint) { arena_release(static_cast<ArenaOwner *>(hint)); }

// ---------------------------------------------------------------- the store

class Store : public Napi::ObjectWrap<Store> {
  public:
    static Napi::Function Define(Napi::Env env) {
        return DefineClass(env, "NativeExpertStore",
                           {InstanceMethod("read", &Store::Read), InstanceMethod("readChecked", &Store::ReadChecked), InstanceMethod("cancelPrefetch", &Store::CancelPrefetch),
                            InstanceMethod("stats", &Store::Stats), InstanceMethod("injectFault", &Store::InjectFault),
                            InstanceMethod("fileInfo", &Store::FileInfo), InstanceMethod("ref", &Store::Ref),
                            InstanceMethod("unref", &Store::Unref), InstanceMethod("close", &Store::Close),
                            InstanceMethod("view", &Store::View)});
    }

    // new NativeExpertStore(files, slotBytes, slots, threads, direct, maxPrefetchInflight, prefault, onDone,
    //                       engine? "auto" | "io_uring" | "pread", sqpoll?)
    Store(const Napi::CallbackInfo &info) : Napi::ObjectWrap<Store>(info) {
        Napi::Env env = info.Env();
        if (info.Length() < 8 || !info[0].IsArray() || !info[4].IsBoolean() || !info[6].IsBoolean() ||
            !info[7].IsFunction()) {
            k3::fail(env, kFn, "expected (files[], slotBytes, slots, threads, direct, maxPrefetchInflight, prefault, onDone)");
            return;
        }
        size_t slot_bytes, slots, threads, max_prefetch;
        if (!k3::get_size(info, 1, kFn, "slotBytes", &slot_bytes) || !k3::get_size(info, 2, kFn, "slots", &slots) ||
            !k3::get_size(info, 3, kFn, "threads", &threads) ||
            !k3::get_size(info, 5, kFn, "maxPrefetchInflight", &max_prefetch))
            return;
        if (slots < 1 || slots > (1u << 24)) { k3::fail(env, kFn, "slots must be in [1, 2^24]", true); return; }
        if (threads < 1 || threads > 256) { k3::fail(env, kFn, "threads must be in [1, 256]", true); return; }
        if (slot_bytes < 4096 || slot_bytes % 4096 != 0)
            { k3::fail(env, kFn, "slotBytes must be a positive multiple of 4096", true); return; }
        size_t total;
        if (!k3::mul_size(slot_bytes, slots, &total) || total > (size_t)1 << 46)
            { k3::fail(env, kFn, "slotBytes x slots overflows", true); return; }
        int engine = K3_ENGINE_AUTO;
        if (info.Length() > 8 && !info[8].IsUndefined()) {
            std::string e = info[8].IsString() ? info[8].As<Napi::String>().Utf8Value() : "";
            if (e == "auto") engine = K3_ENGINE_AUTO;
            else if (e == "pread") engine = K3_ENGINE_PREAD;
            else if (e == "io_uring") engine = K3_ENGINE_URING;
            else { k3::fail(env, kFn, "engine must be \"auto\", \"io_uring\" or \"pread\"", true); return; }
        }
        bool sqpoll = info.Length() > 9 && info[9].ToBoolean();

        Napi::Array files = info[0].As<Napi::Array>();
        files_.resize(files.Length());
        for (auto &f : files_) {
            f.fd_direct = -1;
            f.fd_buffered = -1;
        }
        bool direct = info[4].As<Napi::Boolean>();
        for (uint32_t i = 0; i < files.Length(); i++) {
            Napi::Value v = files[i];
            if (!v.IsString()) { k3::fail(env, kFn, "files[" + std::to_string(i) + "] must be a path string"); return; }
            std::string path = v.As<Napi::String>();
            char message[K3_ERR_MESSAGE];
            if (k3_file_open(&files_[i], path.c_str(), direct, message, sizeof message) != 0) {
                CloseFiles();
                { k3::fail(env, kFn, message); return; }
            }
            if (slot_bytes % files_[i].offset_align != 0) {
                CloseFiles();
                { k3::fail(env, kFn, "slotBytes must be a multiple of the direct-I/O alignment of " + path,
                                      true); return; }
            }
        }
        uint32_t mem_align = 4096;
        for (auto &f : files_) mem_align = f.mem_align > mem_align ? f.mem_align : mem_align;
        uint8_t *arena = k3_arena_alloc(total, mem_align, info[6].As<Napi::Boolean>());
        if (!arena) {
            CloseFiles();
            { k3::fail(env, kFn,
                                  "cannot allocate the " + std::to_string(total) + "-byte arena: " + strerror(errno),
                                  true); return; }
        }
        slot_bytes_ = slot_bytes;
        n_slots_ = (uint32_t)slots;
        arena_ = new ArenaOwner{arena, total, (int64_t)total > INT32_MAX ? INT32_MAX : (int64_t)total};
        Napi::MemoryManagement::AdjustExternalMemory(env, arena_->accounted);

        tsfn_ = Tsfn::New(env, info[7].As<Napi::Function>(), "k3-moe-stream-reads", 0, 1);
        tsfn_.Unref(env);
        k3_read_pool_config cfg = {};
        cfg.files = files_.data();
        cfg.n_files = (uint32_t)files_.size();
        cfg.arena = arena_->data;
        cfg.slot_bytes = slot_bytes;
        cfg.n_slots = n_slots_;
        cfg.threads = (int)threads;
        cfg.max_prefetch_inflight = (int)max_prefetch;
        cfg.engine = engine;
        cfg.sqpoll = sqpoll ? 1 : 0;
        cfg.on_done = OnDone;
        cfg.ctx = this;
        char message[256] = "";
        pool_ = k3_read_pool_create(&cfg, message, sizeof message);
        if (!pool_) {
            tsfn_.Release();
            CloseFiles();
            DropArena(env);
            { k3::fail(env, kFn, message); return; }
        }
        // A store never closed must still stop cleanly at process exit. Node tears the env down in
        // an order we do not control: the thread-safe function may be deleted (and the wrapper
        // finalized from inside that deletion) before ~Store runs, and releasing it then aborts
        // (uv_mutex_lock on a destroyed mutex). A cleanup hook registered after the tsfn runs
        // before the tsfn's own (hooks run last-in first-out): the readers are joined and the
        // tsfn released while both are still valid; ~Store later finds nothing left to do.
        env_ = env;
        if (napi_add_env_cleanup_hook(env, EnvCleanup, this) == napi_ok) hooked_ = true;
    }

    ~Store() { Shutdown(nullptr); }

  private:
    static void OnDone(void *ctx, k3_read_done *done) {
        Store *s = static_cast<Store *>(ctx);
        if (s->tsfn_.NonBlockingCall(done) != napi_ok) free(done);
    }

    void CloseFiles() {
        for (auto &f : files_)
            if (f.fd_buffered >= 0 || f.fd_direct >= 0) k3_file_close(&f);
        files_.clear();
    }

    static void EnvCleanup(void *arg) {
        Store *s = static_cast<Store *>(arg);
        s->hooked_ = false;  // the hook is being run: it must not remove itself
        s->Shutdown(nullptr);
    }

    // The store's own reference (views keep theirs). env is null in teardown / finalizers.
    void DropArena(napi_env env) {
        if (!arena_) return;
        if (env) Napi::MemoryManagement::AdjustExternalMemory(Napi::Env(env), -arena_->accounted);
        arena_->accounted = 0;
        arena_release(arena_);
        arena_ = nullptr;
    }

    void Shutdown(napi_env env) {
        if (hooked_) {
            hooked_ = false;
            napi_remove_env_cleanup_hook(env_, EnvCleanup, this);
        }
        if (pool_) {
            k3_read_pool_destroy(pool_);  // joins readers; queued jobs are reported as cancelled
            pool_ = nullptr;
            tsfn_.Release();
        }
        CloseFiles();
        // An explicit close() (env set) gives the memory back now: JS views of the arena are freed
        // only when collected, which could hold gigabytes for seconds after close() and make the
        // next load plan with memory that is about to come back. The views stay valid (zeros).
        if (env && arena_) k3_release_pages(arena_->data, arena_->bytes);
        DropArena(env);  // after the readers are joined: nothing writes into it any more
    }

    bool Open(napi_env env, const char *fn) {
        if (pool_) return true;
        return raw_fail(env, fn, "the store is closed");
    }

    // A read job from (id, file, offset, length, slot, base) as JS numbers (base: undefined =
    // K3_BASE_AUTO), checked: false when a value is out of range (a JS exception thrown) or when
    // N-API refused (a terminating env: quietly).
    bool MakeJob(napi_env env, const char *fn, const napi_value *v, bool prefetch, k3_read_job *job) {
        uint64_t n[5];
        static const char *names[5] = {"id", "file", "offset", "length", "slot"};
        for (int i = 0; i < 5; i++)
            if (!raw_integer(env, v[i], fn, names[i], &n[i])) return false;
        uint64_t id = n[0], file = n[1], offset = n[2], length = n[3], slot = n[4];
        if (id > INT32_MAX) return raw_fail(env, fn, "id must be < 2^31", true);
        if (file >= files_.size()) return raw_fail(env, fn, "file index " + std::to_string(file) + " out of range", true);
        if (slot >= n_slots_) return raw_fail(env, fn, "slot " + std::to_string(slot) + " out of range", true);
        // base (optional): the file offset mapped to slot byte 0, aligned, <= offset; lets several
        // pieces of one expert fill one slot. The aligned span from base must fit the slot.
        uint64_t a = files_[file].offset_align;
        if (offset > UINT64_MAX / 2 || length > UINT64_MAX / 4) return raw_fail(env, fn, "offset + length overflows", true);
        uint64_t base = K3_BASE_AUTO;
        napi_valuetype bt;
        if (!raw_type(env, v[5], &bt)) return false;
        if (bt != napi_undefined) {
            uint64_t b;
            if (bt != napi_number) return raw_fail(env, fn, "base must be a number");
            if (!raw_integer(env, v[5], fn, "base", &b)) return false;
            if (b > offset || b % a != 0) return raw_fail(env, fn, "base must be <= offset and a multiple of the direct-I/O alignment", true);
            base = b;
        }
        uint64_t from = base == K3_BASE_AUTO ? offset / a * a : base;
        uint64_t span = (offset + length + a - 1) / a * a - from;
        if (length == 0 || span > slot_bytes_)
            return raw_fail(env, fn,
                            "length " + std::to_string(length) + " (plus alignment) does not fit a " +
                                std::to_string(slot_bytes_) + "-byte slot",
                            true);
        *job = k3_read_job{};
        job->id = (int32_t)id;
        job->file = (uint32_t)file;
        job->offset = offset;
        job->length = length;
        job->slot = (uint32_t)slot;
        job->base = base;
        job->priority = prefetch ? K3_PRIORITY_PREFETCH : K3_PRIORITY_DEMAND;
        return true;
    }

    // read(id, file, offset, length, slot, prefetch, base?): raw N-API throughout (see raw_fail).
    Napi::Value Read(const Napi::CallbackInfo &info) {
        napi_env env = info.Env();
        const char *fn = "ExpertStore.read";
        if (!Open(env, fn)) return Napi::Value();
        // info[i] past the arguments given is undefined (CallbackInfo holds them all already).
        napi_value v[6] = {info[0], info[1], info[2], info[3], info[4], info[6]};
        bool prefetch;
        k3_read_job job;
        if (!raw_truthy(env, info[5], &prefetch) || !MakeJob(env, fn, v, prefetch, &job)) return Napi::Value();
        if (k3_read_pool_submit(pool_, &job) != 0) raw_fail(env, fn, "cannot queue the read");
        return Napi::Value();
    }

    // readChecked(label, tensors: Array<[name, fileOffset, length, crc32]>,
    //             reads: Array<[id, file, offset, length, slot, base?]>, prefetch)
    // The reads of one load, each tensor's crc32 checked on the reader threads as the bytes land
    // (trunk_check.h): the last read to finish reports a mismatch (status EBADMSG, `verdict`).
    // Raw N-API throughout, as read().
    Napi::Value ReadChecked(const Napi::CallbackInfo &info) {
        napi_env env = info.Env();
        const char *fn = "ExpertStore.readChecked";
        if (!Open(env, fn)) return Napi::Value();
        const char *usage = "expected (label, tensors[], reads[], prefetch)";
        napi_valuetype lt;
        bool ts_ok, rs_ok, prefetch;
        uint32_t nt = 0, nr = 0;
        if (!raw_type(env, info[0], &lt) || !raw_array(env, info[1], 0, &ts_ok, &nt) || !raw_array(env, info[2], 0, &rs_ok, &nr)) return Napi::Value();
        if (info.Length() < 3 || lt != napi_string || !ts_ok || !rs_ok) return raw_fail(env, fn, usage), Napi::Value();
        std::string label;
        if (!raw_string(env, info[0], &label) || !raw_truthy(env, info[3], &prefetch)) return Napi::Value();
        if (nr == 0 || nr > (1u << 20) || nt > (1u << 20))
            return raw_fail(env, fn, "between 1 and 2^20 reads and at most 2^20 tensors", true), Napi::Value();
        std::vector<std::string> names(nt);
        std::vector<const char *> cnames(nt);
        std::vector<uint64_t> toff(nt), tlen(nt);
        std::vector<uint32_t> crcs(nt);
        for (uint32_t i = 0; i < nt; i++) {
            std::string what = "tensors[" + std::to_string(i) + "]";
            napi_value e, t[4];
            bool ok;
            uint32_t len;
            if (napi_get_element(env, info[1], i, &e) != napi_ok || !raw_array(env, e, 4, &ok, &len)) return Napi::Value();
            if (!ok) return raw_fail(env, fn, what + " must be [name, offset, length, crc32]"), Napi::Value();
            for (uint32_t k = 0; k < 4; k++)
                if (napi_get_element(env, e, k, &t[k]) != napi_ok) return Napi::Value();
            napi_valuetype nt0;
            uint64_t crc;
            if (!raw_type(env, t[0], &nt0)) return Napi::Value();
            if (nt0 != napi_string) return raw_fail(env, fn, what + " must be [name, offset, length, crc32]"), Napi::Value();
            if (!raw_string(env, t[0], &names[i]) || !raw_integer(env, t[1], fn, what + " offset", &toff[i]) ||
                !raw_integer(env, t[2], fn, what + " length", &tlen[i]) || !raw_integer(env, t[3], fn, what + " crc32", &crc))
                return Napi::Value();
            if (toff[i] + tlen[i] > 9007199254740992ull || crc > UINT32_MAX)
                return raw_fail(env, fn, what + ": offset + length must be <= 2^53, crc32 a 32-bit unsigned integer", true), Napi::Value();
            crcs[i] = (uint32_t)crc;
        }
        for (uint32_t i = 0; i < nt; i++) cnames[i] = names[i].c_str();
        std::vector<k3_read_job> jobs(nr);
        std::vector<uint64_t> roff(nr), rlen(nr);
        for (uint32_t i = 0; i < nr; i++) {
            napi_value e, v[6];
            bool ok;
            uint32_t len;
            if (napi_get_element(env, info[2], i, &e) != napi_ok || !raw_array(env, e, 5, &ok, &len)) return Napi::Value();
            if (!ok) return raw_fail(env, fn, "reads[" + std::to_string(i) + "] must be [id, file, offset, length, slot, base?]"), Napi::Value();
            for (uint32_t k = 0; k < 6; k++) {
                // Past the array's end: undefined (base is optional).
                if (k < len ? napi_get_element(env, e, k, &v[k]) != napi_ok : napi_get_undefined(env, &v[k]) != napi_ok) return Napi::Value();
            }
            if (!MakeJob(env, fn, v, prefetch, &jobs[i])) return Napi::Value();
            roff[i] = jobs[i].offset;
            rlen[i] = jobs[i].length;
        }
        char message[K3_ERR_MESSAGE] = "";
        k3_check_load *load = k3_check_load_new(label.c_str(), nt, cnames.data(), toff.data(), tlen.data(), crcs.data(),
                                                nr, roff.data(), rlen.data(), message, sizeof message);
        if (!load) return raw_fail(env, fn, message, true), Napi::Value();
        uint32_t submitted = 0;
        for (; submitted < jobs.size(); submitted++) {
            jobs[submitted].check = load;
            jobs[submitted].check_read = submitted;
            if (k3_read_pool_submit(pool_, &jobs[submitted]) != 0) break; // that job's check was counted down
        }
        if (submitted < jobs.size()) {
            // The rest never reach the pool: count them down too (the load frees itself at the last).
            for (uint32_t i = submitted + 1; i < jobs.size(); i++) k3_check_read_done(load, i, nullptr, "", nullptr, nullptr);
            return raw_fail(env, fn, "cannot queue the reads"), Napi::Value();
        }
        return Napi::Value();
    }

    // cancelPrefetch, stats, view, ref and unref run beside every read too: raw N-API as read(),
    // each returning undefined quietly when N-API refuses (a terminating env).
    Napi::Value CancelPrefetch(const Napi::CallbackInfo &info) {
        napi_value n;
        if (napi_create_double(info.Env(), pool_ ? k3_read_pool_cancel_prefetch(pool_) : 0, &n) != napi_ok) return Napi::Value();
        return Napi::Value(info.Env(), n);
    }

    Napi::Value Stats(const Napi::CallbackInfo &info) {
        napi_env env = info.Env();
        k3_read_pool_stats st = {};
        if (pool_) k3_read_pool_stats_get(pool_, &st);
        const char *engine = st.engine == K3_ENGINE_IN_USE_URING_SQPOLL ? "io_uring+sqpoll" : st.engine == K3_ENGINE_IN_USE_URING ? "io_uring" : "pread";
        napi_value o;
        bool ok = napi_create_object(env, &o) == napi_ok && set_number(env, o, "reads", (double)st.reads) &&
                  set_number(env, o, "deviceBytes", (double)st.device_bytes) && set_number(env, o, "requestedBytes", (double)st.requested_bytes) &&
                  set_number(env, o, "directReads", (double)st.direct_reads) && set_number(env, o, "bufferedReads", (double)st.buffered_reads) &&
                  set_number(env, o, "busyNs", (double)st.busy_ns) && set_number(env, o, "inflight", st.inflight) &&
                  set_number(env, o, "queuedDemand", st.queued_demand) && set_number(env, o, "queuedPrefetch", st.queued_prefetch) &&
                  set_string(env, o, "engine", engine) && set_string(env, o, "engineNote", st.engine_note) &&
                  set_number(env, o, "nowNs", (double)k3_now_ns());
        return ok ? Napi::Value(env, o) : Napi::Value();
    }

    // injectFault(afterReads, kind): "eio" | "short" | "direct-einval" | "split"
    Napi::Value InjectFault(const Napi::CallbackInfo &info) {
        Napi::Env env = info.Env();
        const char *fn = "ExpertStore.injectFault";
        size_t after;
        if (!Open(env, fn) || !k3::get_size(info, 0, fn, "afterReads", &after)) return env.Undefined();
        std::string kind = info.Length() > 1 && info[1].IsString() ? info[1].As<Napi::String>().Utf8Value() : "";
        int k = kind == "eio" ? K3_FAULT_EIO : kind == "short" ? K3_FAULT_SHORT : kind == "direct-einval" ? K3_FAULT_DIRECT_EINVAL
                : kind == "split" ? K3_FAULT_SPLIT : 0;
        if (k == 0) return k3::fail(env, fn, "kind must be \"eio\", \"short\", \"direct-einval\" or \"split\"", true), env.Undefined();
        k3_read_pool_inject_fault(pool_, (int64_t)after, k);
        return env.Undefined();
    }

    Napi::Value FileInfo(const Napi::CallbackInfo &info) {
        Napi::Env env = info.Env();
        size_t i;
        if (!k3::get_size(info, 0, "ExpertStore.fileInfo", "file", &i)) return env.Undefined();
        if (i >= files_.size()) return k3::fail(env, "ExpertStore.fileInfo", "file index out of range", true), env.Undefined();
        Napi::Object o = Napi::Object::New(env);
        o["size"] = Napi::Number::New(env, (double)files_[i].size);
        o["direct"] = Napi::Boolean::New(env, files_[i].fd_direct >= 0 && !files_[i].direct_refused);
        o["memAlign"] = Napi::Number::New(env, files_[i].mem_align);
        o["offsetAlign"] = Napi::Number::New(env, files_[i].offset_align);
        return o;
    }

    Napi::Value Ref(const Napi::CallbackInfo &info) {
        if (pool_) napi_ref_threadsafe_function(info.Env(), tsfn_);
        return Napi::Value();
    }
    Napi::Value Unref(const Napi::CallbackInfo &info) {
        if (pool_) napi_unref_threadsafe_function(info.Env(), tsfn_);
        return Napi::Value();
    }

    Napi::Value Close(const Napi::CallbackInfo &info) {
        Shutdown(info.Env());
        return info.Env().Undefined();
    }

    // view(byteOffset, byteLength) -> ArrayBuffer over that range of the arena (at most
    // k3::kMaxExternalBytes); it keeps the arena alive until it is collected.
    Napi::Value View(const Napi::CallbackInfo &info) {
        napi_env env = info.Env();
        const char *fn = "ExpertStore.view";
        if (!arena_ || !pool_) return raw_fail(env, fn, "the store is closed"), Napi::Value();
        uint64_t offset, length;
        if (!raw_integer(env, info[0], fn, "argument 'byteOffset'", &offset) || !raw_integer(env, info[1], fn, "argument 'byteLength'", &length))
            return Napi::Value();
        if (offset > arena_->bytes || length > arena_->bytes - offset || length == 0)
            return raw_fail(env, fn, "range [" + std::to_string(offset) + ", +" + std::to_string(length) + ") is not inside the " +
                                         std::to_string(arena_->bytes) + "-byte arena", true),
                   Napi::Value();
        if (length > k3::kMaxExternalBytes)
            return raw_fail(env, fn, "byteLength " + std::to_string(length) + " is above the " + std::to_string(k3::kMaxExternalBytes) +
                                         " bytes one JS buffer can hold", true),
                   Napi::Value();
        arena_->refs.fetch_add(1);
        napi_value ab;
        napi_status status = napi_create_external_arraybuffer(env, arena_->data + offset, length, arena_view_finalize, arena_, &ab);
        if (status != napi_ok) {
            // Refused up front (napi_pending_exception: an exception pending, or JS cannot run in a
            // terminating env): nothing was made, no finalizer will drop the reference taken above.
            // Any later failure comes after the buffer was made: Node 20 runs its finalizer (later).
            if (status == napi_pending_exception) arena_release(arena_);
            return raw_fail(env, fn, "cannot create a view of the arena"), Napi::Value();
        }
        return Napi::Value(env, ab);
    }

    std::vector<k3_file> files_;
    ArenaOwner *arena_ = nullptr;
    uint64_t slot_bytes_ = 0;
    uint32_t n_slots_ = 0;
    Tsfn tsfn_;
    k3_read_pool *pool_ = nullptr;
    napi_env env_ = nullptr;
    bool hooked_ = false;
};

// ---------------------------------------------------------------- module

static Napi::Value SupersetBytes(const Napi::CallbackInfo &info) {
    size_t length, align;
    if (!k3::get_size(info, 0, "supersetBytes", "length", &length) || !k3::get_size(info, 1, "supersetBytes", "align", &align))
        return info.Env().Undefined();
    if (align == 0 || align > (1u << 30)) return k3::fail(info.Env(), "supersetBytes", "align out of range", true), info.Env().Undefined();
    return Napi::Number::New(info.Env(), (double)k3_file_superset_bytes(length, (uint32_t)align));
}

// A list of reads (paths[], file Uint32Array, offset Float64Array, length Float64Array, qd) as the
// benchmark entry points take it, checked before any of it reaches C.
struct ReadList {
    std::vector<std::string> paths;
    std::vector<const char *> cpaths;
    const uint32_t *file = nullptr;
    std::vector<uint64_t> off, len;
    size_t qd = 0;
};

static bool parse_read_list(const Napi::CallbackInfo &info, const char *fn, ReadList *r) {
    Napi::Env env = info.Env();
    Napi::Array arr = info[0].As<Napi::Array>();
    for (uint32_t i = 0; i < arr.Length(); i++) {
        Napi::Value v = arr[i];
        if (!v.IsString()) return k3::fail(env, fn, "paths must be strings"), false;
        r->paths.push_back(v.As<Napi::String>());
    }
    for (auto &p : r->paths) r->cpaths.push_back(p.c_str());
    Napi::TypedArray f = info[1].As<Napi::TypedArray>(), o = info[2].As<Napi::TypedArray>(), l = info[3].As<Napi::TypedArray>();
    if (f.TypedArrayType() != napi_uint32_array || o.TypedArrayType() != napi_float64_array || l.TypedArrayType() != napi_float64_array ||
        f.ElementLength() != o.ElementLength() || f.ElementLength() != l.ElementLength())
        return k3::fail(env, fn, "file/offset/length must be Uint32Array/Float64Array/Float64Array of one length"), false;
    if (!k3::get_size(info, 4, fn, "qd", &r->qd)) return false;
    if (r->qd < 1 || r->qd > 256) return k3::fail(env, fn, "qd must be in [1, 256]", true), false;
    size_t n = f.ElementLength();
    r->file = f.As<Napi::Uint32Array>().Data();
    for (size_t i = 0; i < n; i++)
        if (r->file[i] >= r->paths.size()) return k3::fail(env, fn, "a file index is past the paths", true), false;
    r->off.resize(n);
    r->len.resize(n);
    const double *od = o.As<Napi::Float64Array>().Data(), *ld = l.As<Napi::Float64Array>().Data();
    for (size_t i = 0; i < n; i++) {
        if (!(od[i] >= 0) || !(ld[i] > 0) || ld[i] > (double)(1ull << 34) || od[i] > (double)(1ull << 52))
            return k3::fail(env, fn, "bad offset/length", true), false;
        r->off[i] = (uint64_t)od[i];
        r->len[i] = (uint64_t)ld[i];
    }
    return true;
}

// readCeiling(paths[], file Uint32Array, offset Float64Array, length Float64Array, qd, direct) -> {bytes, seconds}
static Napi::Value ReadCeiling(const Napi::CallbackInfo &info) {
    Napi::Env env = info.Env();
    const char *fn = "readCeiling";
    if (info.Length() < 6 || !info[0].IsArray() || !info[1].IsTypedArray() || !info[2].IsTypedArray() || !info[3].IsTypedArray())
        return k3::fail(env, fn, "expected (paths[], Uint32Array file, Float64Array offset, Float64Array length, qd, direct)"), env.Undefined();
    ReadList r;
    if (!parse_read_list(info, fn, &r)) return env.Undefined();
    uint64_t bytes = 0;
    double seconds = 0;
    int rc = k3_read_ceiling(r.cpaths.data(), (int)r.cpaths.size(), r.file, r.off.data(), r.len.data(), (int)r.off.size(), (int)r.qd,
                             info[5].ToBoolean(), &bytes, &seconds);
    if (rc != 0) return k3::fail(env, fn, std::string("read failed: ") + strerror(rc)), env.Undefined();
    Napi::Object out = Napi::Object::New(env);
    out["bytes"] = Napi::Number::New(env, (double)bytes);
    out["seconds"] = Napi::Number::New(env, seconds);
    return out;
}

// poolBench(paths[], file Uint32Array, offset Float64Array, length Float64Array, qd, engine, direct)
//   -> {bytes, seconds, cpuSeconds, engine}: the read pool driven from C, no JS in the loop.
static Napi::Value PoolBench(const Napi::CallbackInfo &info) {
    Napi::Env env = info.Env();
    const char *fn = "poolBench";
    if (info.Length() < 7 || !info[0].IsArray() || !info[1].IsTypedArray() || !info[2].IsTypedArray() || !info[3].IsTypedArray() || !info[5].IsString())
        return k3::fail(env, fn, "expected (paths[], Uint32Array file, Float64Array offset, Float64Array length, qd, engine, direct)"), env.Undefined();
    ReadList r;
    if (!parse_read_list(info, fn, &r)) return env.Undefined();
    std::string e = info[5].As<Napi::String>().Utf8Value();
    int engine = e == "pread" ? K3_ENGINE_PREAD : e == "io_uring" ? K3_ENGINE_URING : -1;
    if (engine < 0) return k3::fail(env, fn, "engine must be \"io_uring\" or \"pread\"", true), env.Undefined();
    uint64_t bytes = 0;
    double seconds = 0, cpu = 0;
    int used = 0;
    char message[256] = "";
    int rc = k3_pool_bench(r.cpaths.data(), (int)r.cpaths.size(), r.file, r.off.data(), r.len.data(), (int)r.off.size(), (int)r.qd,
                           engine, info[6].ToBoolean(), &bytes, &seconds, &cpu, &used, message, sizeof message);
    if (rc != 0) return k3::fail(env, fn, std::string(message[0] ? message : strerror(rc))), env.Undefined();
    Napi::Object out = Napi::Object::New(env);
    out["bytes"] = Napi::Number::New(env, (double)bytes);
    out["seconds"] = Napi::Number::New(env, seconds);
    out["cpuSeconds"] = Napi::Number::New(env, cpu);
    out["engine"] = Napi::String::New(env, used == K3_ENGINE_IN_USE_PREAD ? "pread" : "io_uring");
    return out;
}

// loadResident(paths[], file Uint32Array, start Float64Array, end Float64Array,
//              {pieceBytes, threads, engine, direct, prefault}, onProgress?(doneBytes, totalBytes))
//   -> {blocks: ArrayBuffer[], bases: number[], stats}: each block [start, end) of its file read by
//   the read pool straight into its own 2 MiB-aligned memory; file byte x at blocks[i][x - bases[i]].
//   Each ArrayBuffer owns its memory (unmapped when collected); none exceeds 4 GiB.
struct LoadProgress {
    Napi::Env env;
    Napi::Function fn;
};

static void load_progress(void *ctx, uint64_t done, uint64_t total) {
    LoadProgress *p = static_cast<LoadProgress *>(ctx);
    p->fn.Call({Napi::Number::New(p->env, (double)done), Napi::Number::New(p->env, (double)total)});
}

static Napi::Value LoadResident(const Napi::CallbackInfo &info) {
    Napi::Env env = info.Env();
    const char *fn = "loadResident";
    if (info.Length() < 5 || !info[0].IsArray() || !info[1].IsTypedArray() || !info[2].IsTypedArray() || !info[3].IsTypedArray() ||
        !info[4].IsObject())
        return k3::fail(env, fn, "expected (paths[], Uint32Array file, Float64Array start, Float64Array end, options, onProgress?)"), env.Undefined();
    Napi::Array paths = info[0].As<Napi::Array>();
    Napi::TypedArray f = info[1].As<Napi::TypedArray>(), s = info[2].As<Napi::TypedArray>(), e = info[3].As<Napi::TypedArray>();
    if (f.TypedArrayType() != napi_uint32_array || s.TypedArrayType() != napi_float64_array || e.TypedArrayType() != napi_float64_array ||
        f.ElementLength() != s.ElementLength() || f.ElementLength() != e.ElementLength())
        return k3::fail(env, fn, "file/start/end must be Uint32Array/Float64Array/Float64Array of one length"), env.Undefined();
    Napi::Object o = info[4].As<Napi::Object>();
    auto num = [&](const char *k, double dflt) { Napi::Value v = o.Get(k); return v.IsNumber() ? v.As<Napi::Number>().DoubleValue() : dflt; };
    double piece = num("pieceBytes", 8 << 20), threads = num("threads", 8);
    if (!(piece >= (2 << 20)) || piece > (double)(1u << 30) || (uint64_t)piece % (2u << 20) != 0)
        return k3::fail(env, fn, "pieceBytes must be a multiple of 2 MiB in [2 MiB, 1 GiB]", true), env.Undefined();
    if (!(threads >= 1 && threads <= 256)) return k3::fail(env, fn, "threads must be in [1, 256]", true), env.Undefined();
    double pthreads = num("populateThreads", 0);
    if (!(pthreads >= 0 && pthreads <= 8) || pthreads != (int)pthreads)
        return k3::fail(env, fn, "populateThreads must be an integer in [0, 8] (0 = one per core)", true), env.Undefined();
    std::string eng = o.Get("engine").IsString() ? o.Get("engine").As<Napi::String>().Utf8Value() : "auto";
    int engine = eng == "auto" ? K3_ENGINE_AUTO : eng == "pread" ? K3_ENGINE_PREAD : eng == "io_uring" ? K3_ENGINE_URING : -1;
    if (engine < 0) return k3::fail(env, fn, "engine must be \"auto\", \"io_uring\" or \"pread\"", true), env.Undefined();
    std::string pf = o.Get("prefault").IsString() ? o.Get("prefault").As<Napi::String>().Utf8Value() : "populate";
    int prefault = pf == "none" ? K3_PREFAULT_NONE : pf == "huge" ? K3_PREFAULT_HUGE : pf == "populate" ? K3_PREFAULT_POPULATE : -1;
    if (prefault < 0) return k3::fail(env, fn, "prefault must be \"none\", \"huge\" or \"populate\"", true), env.Undefined();
    bool direct = o.Get("direct").IsBoolean() ? o.Get("direct").As<Napi::Boolean>().Value() : true;
    bool has_progress = info.Length() > 5 && info[5].IsFunction();
    // Test hook: {faultAfter, fault: "eio" | "short" | "direct-einval"} for one read of the load.
    std::string fault = o.Get("fault").IsString() ? o.Get("fault").As<Napi::String>().Utf8Value() : "";
    int fault_kind = fault == "eio" ? K3_FAULT_EIO : fault == "short" ? K3_FAULT_SHORT : fault == "direct-einval" ? K3_FAULT_DIRECT_EINVAL : 0;
    if (!fault.empty() && !fault_kind) return k3::fail(env, fn, "fault must be \"eio\", \"short\" or \"direct-einval\"", true), env.Undefined();

    size_t n = f.ElementLength();
    const uint32_t *fd = f.As<Napi::Uint32Array>().Data();
    const double *sd = s.As<Napi::Float64Array>().Data(), *ed = e.As<Napi::Float64Array>().Data();
    std::vector<k3_load_block> blocks(n);
    for (size_t i = 0; i < n; i++) {
        if (fd[i] >= paths.Length()) return k3::fail(env, fn, "a file index is past the paths", true), env.Undefined();
        if (!(sd[i] >= 0) || !(ed[i] > sd[i]) || ed[i] > (double)(1ull << 52))
            return k3::fail(env, fn, "block " + std::to_string(i) + ": bad start/end", true), env.Undefined();
        if (ed[i] - sd[i] > (double)(0xffffffffull - 8192))
            return k3::fail(env, fn, "block " + std::to_string(i) + ": above 4 GiB (one JS buffer cannot hold it)", true), env.Undefined();
        blocks[i] = {};
        blocks[i].file = fd[i];
        blocks[i].start = (uint64_t)sd[i];
        blocks[i].end = (uint64_t)ed[i];
    }
    std::vector<k3_file> files(paths.Length());
    for (auto &x : files) x.fd_direct = x.fd_buffered = -1;
    auto close_files = [&]() {
        for (auto &x : files)
            if (x.fd_buffered >= 0 || x.fd_direct >= 0) k3_file_close(&x);
    };
    for (uint32_t i = 0; i < paths.Length(); i++) {
        Napi::Value v = paths[i];
        if (!v.IsString()) return close_files(), k3::fail(env, fn, "paths must be strings"), env.Undefined();
        std::string p = v.As<Napi::String>();
        char message[K3_ERR_MESSAGE];
        if (k3_file_open(&files[i], p.c_str(), direct, message, sizeof message) != 0) return close_files(), k3::fail(env, fn, message), env.Undefined();
        posix_fadvise(files[i].fd_buffered, 0, 0, POSIX_FADV_SEQUENTIAL); /* the buffered fallback reads whole ranges in order */
    }
    LoadProgress lp{env, has_progress ? info[5].As<Napi::Function>() : Napi::Function()};
    k3_load_config cfg = {};
    cfg.files = files.data();
    cfg.n_files = (uint32_t)files.size();
    cfg.piece_bytes = (uint64_t)piece;
    cfg.threads = (int)threads;
    cfg.engine = engine;
    cfg.prefault = prefault;
    cfg.populate_threads = (int)num("populateThreads", 0);
    cfg.progress = has_progress ? load_progress : nullptr;
    cfg.progress_ctx = &lp;
    cfg.progress_ms = 250;
    cfg.fault_kind = fault_kind;
    cfg.fault_after = (int64_t)num("faultAfter", 0);
    k3_load_stats st;
    char message[512] = "";
    int rc = k3_resident_load(&cfg, blocks.data(), (int)n, &st, message, sizeof message);
    close_files();
    if (env.IsExceptionPending()) {  // the progress callback threw
        if (rc == 0) for (auto &b : blocks) k3_resident_block_free(b.data, b.owned);
        return env.Undefined();
    }
    if (rc != 0) return k3::fail(env, fn, message[0] ? message : strerror(rc)), env.Undefined();
    // {discard: true}: a ceiling run (the same reads into fresh memory); nothing is handed to JS.
    bool discard = o.Get("discard").IsBoolean() && o.Get("discard").As<Napi::Boolean>().Value();
    if (discard) {
        for (auto &b : blocks) k3_resident_block_free(b.data, b.owned);
        n = 0;
    }
    Napi::Array out = Napi::Array::New(env, n);
    Napi::Array bases = Napi::Array::New(env, n);
    for (size_t i = 0; i < n; i++) {
        uint64_t *owned = new uint64_t(blocks[i].owned);
        Napi::ArrayBuffer ab = Napi::ArrayBuffer::New(
            env, blocks[i].data, (size_t)blocks[i].bytes,
            [](Napi::Env env, void *data, uint64_t *owned) {
                Napi::MemoryManagement::AdjustExternalMemory(env, -(int64_t)*owned);
                k3_resident_block_free(static_cast<uint8_t *>(data), *owned);
                delete owned;
            },
            owned);
        Napi::MemoryManagement::AdjustExternalMemory(env, (int64_t)blocks[i].owned);
        out[i] = ab;
        bases[i] = Napi::Number::New(env, (double)blocks[i].base);
    }
    Napi::Object so = Napi::Object::New(env);
    so["reads"] = Napi::Number::New(env, (double)st.reads);
    so["deviceBytes"] = Napi::Number::New(env, (double)st.device_bytes);
    so["requestedBytes"] = Napi::Number::New(env, (double)st.requested_bytes);
    so["directReads"] = Napi::Number::New(env, (double)st.direct_reads);
    so["bufferedReads"] = Napi::Number::New(env, (double)st.buffered_reads);
    so["mappedBytes"] = Napi::Number::New(env, (double)st.mapped_bytes);
    so["seconds"] = Napi::Number::New(env, st.seconds);
    so["engine"] = Napi::String::New(env, st.engine == K3_ENGINE_IN_USE_URING_SQPOLL ? "io_uring+sqpoll" : st.engine == K3_ENGINE_IN_USE_URING ? "io_uring" : "pread");
    so["engineNote"] = Napi::String::New(env, st.engine_note);
    so["populateThreads"] = Napi::Number::New(env, st.populate_threads);
    so["populateSeconds"] = Napi::Number::New(env, st.populate_seconds);
    so["readBusySeconds"] = Napi::Number::New(env, st.read_busy_seconds);
    so["prefault"] = Napi::String::New(env, st.prefault_used == K3_PREFAULT_POPULATE ? "populate" : st.prefault_used == K3_PREFAULT_HUGE ? "huge" : "none");
    Napi::Object r = Napi::Object::New(env);
    r["blocks"] = out;
    r["bases"] = bases;
    r["stats"] = so;
    return r;
}

// backingCeiling(bytes, threads, huge) -> seconds: fresh memory mapped, faulted in, unmapped (k3_backing_ceiling).
static Napi::Value BackingCeiling(const Napi::CallbackInfo &info) {
    Napi::Env env = info.Env();
    const char *fn = "backingCeiling";
    if (info.Length() < 3 || !info[0].IsNumber() || !info[1].IsNumber())
        return k3::fail(env, fn, "expected (bytes, threads, huge)"), env.Undefined();
    double bytes = info[0].As<Napi::Number>().DoubleValue(), threads = info[1].As<Napi::Number>().DoubleValue();
    if (!(bytes >= 0 && bytes <= (double)(1ull << 46)) || !(threads >= 0 && threads <= 8) || threads != (int)threads)
        return k3::fail(env, fn, "bytes must be in [0, 2^46] and threads an integer in [0, 8]", true), env.Undefined();
    double seconds = 0;
    int rc = k3_backing_ceiling((uint64_t)bytes, (int)threads, info[2].ToBoolean(), &seconds);
    if (rc != 0) return k3::fail(env, fn, std::string("cannot back fresh memory: ") + strerror(rc)), env.Undefined();
    return Napi::Number::New(env, seconds);
}

static Napi::Value DropFileCache(const Napi::CallbackInfo &info) {
    if (info.Length() < 1 || !info[0].IsString()) return k3::fail(info.Env(), "dropFileCache", "path must be a string"), info.Env().Undefined();
    std::string p = info[0].As<Napi::String>();
    return Napi::Number::New(info.Env(), k3_drop_file_cache(p.c_str()));
}

// ---------------------------------------------------------------- O_DIRECT write buffers

// alignedBuffer(bytes, align) -> ArrayBuffer on k3_arena_alloc memory (aligned to `align`, at least
// 4096; 2 MiB from 8 MiB up): the staging buffers of the O_DIRECT writer (src/io/direct-write.ts),
// which JS fills and hands to fs.write. Freed by the buffer's finalizer.
struct AlignedOwner {
    uint8_t *data;
    int64_t accounted;
};

static Napi::Value AlignedBuffer(const Napi::CallbackInfo &info) {
    Napi::Env env = info.Env();
    const char *fn = "alignedBuffer";
    size_t bytes, align;
    if (!k3::get_size(info, 0, fn, "bytes", &bytes) || !k3::get_size(info, 1, fn, "align", &align)) return env.Undefined();
    if (bytes == 0 || bytes > k3::kMaxExternalBytes)
        return k3::fail(env, fn, "bytes must be in [1, " + std::to_string(k3::kMaxExternalBytes) + "], got " + std::to_string(bytes), true), env.Undefined();
    if (align < 512 || align > (1u << 24) || (align & (align - 1)) != 0)
        return k3::fail(env, fn, "align must be a power of two in [512, 2^24], got " + std::to_string(align), true), env.Undefined();
    uint8_t *p = k3_arena_alloc(bytes, (uint32_t)align, 0);
    if (!p) return k3::fail(env, fn, "cannot allocate " + std::to_string(bytes) + " aligned bytes: " + strerror(errno)), env.Undefined();
    auto *o = new AlignedOwner{p, (int64_t)bytes};
    Napi::MemoryManagement::AdjustExternalMemory(env, o->accounted);
    return Napi::ArrayBuffer::New(env, p, bytes,
                                  [](Napi::Env e, void *, AlignedOwner *x) {
                                      Napi::MemoryManagement::AdjustExternalMemory(e, -x->accounted);
                                      k3_arena_free(x->data);
                                      delete x;
                                  },
                                  o);
}

// dioAlignment(path) -> {memAlign, offsetAlign}: what O_DIRECT needs for that file (k3_dio_alignment).
static Napi::Value DioAlignment(const Napi::CallbackInfo &info) {
    Napi::Env env = info.Env();
    if (info.Length() < 1 || !info[0].IsString()) return k3::fail(env, "dioAlignment", "argument 'path' must be a string"), env.Undefined();
    std::string path = info[0].As<Napi::String>();
    int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return k3::fail(env, "dioAlignment", "cannot open " + path + ": " + strerror(errno)), env.Undefined();
    uint32_t mem, off;
    k3_dio_alignment(fd, &mem, &off);
    close(fd);
    Napi::Object o = Napi::Object::New(env);
    o["memAlign"] = Napi::Number::New(env, mem);
    o["offsetAlign"] = Napi::Number::New(env, off);
    return o;
}

// ---------------------------------------------------------------- k3 synth blocks

// synthBlock(kind, state Uint32Array(4), n, mean, std, s) -> Promise<ArrayBuffer> of 2 n elements
// (k3_synth_block), built on a libuv thread: the JS thread keeps copying earlier tensors meanwhile.
class SynthBlockWorker : public Napi::AsyncWorker {
  public:
    SynthBlockWorker(Napi::Env env, int kind, const uint32_t *state, uint64_t n, double mean, double std, uint32_t s,
                     Napi::ArrayBuffer out)
        : Napi::AsyncWorker(env), deferred_(Napi::Promise::Deferred::New(env)), kind_(kind), n_(n), mean_(mean),
          std_(std), s_(s), data_(static_cast<uint8_t *>(out.Data())) {
        memcpy(state_, state, sizeof state_);
        out_ = Napi::Persistent(out);
    }
    Napi::Promise Promise() { return deferred_.Promise(); }
    void Execute() override { k3_synth_block(kind_, state_, n_, mean_, std_, s_, data_); }
    void OnOK() override { deferred_.Resolve(out_.Value()); }
    void OnError(const Napi::Error &err) override { deferred_.Reject(err.Value()); }

  private:
    Napi::Promise::Deferred deferred_;
    int kind_;
    uint32_t state_[4];
    uint64_t n_;
    double mean_, std_;
    uint32_t s_;
    uint8_t *data_;
    Napi::Reference<Napi::ArrayBuffer> out_;
};

static Napi::Value SynthBlock(const Napi::CallbackInfo &info) {
    Napi::Env env = info.Env();
    const char *fn = "synthBlock";
    size_t kind, n, s;
    if (!k3::get_size(info, 0, fn, "kind", &kind) || !k3::get_size(info, 2, fn, "n", &n) || !k3::get_size(info, 5, fn, "s", &s))
        return env.Undefined();
    uint32_t esize = k3_synth_elem_bytes((int)kind);
    if (esize == 0) return k3::fail(env, fn, "kind must be 0 (normal bf16), 1 (normal f32), 2 (nibbles) or 3 (e8m0), got " + std::to_string(kind), true), env.Undefined();
    if (!info[1].IsTypedArray() || info[1].As<Napi::TypedArray>().TypedArrayType() != napi_uint32_array || info[1].As<Napi::Uint32Array>().ElementLength() != 4)
        return k3::fail(env, fn, "argument 'state' must be a Uint32Array of 4 (sfc32 a, b, c, d)"), env.Undefined();
    if (n == 0 || n > ((size_t)1 << 30) / esize) return k3::fail(env, fn, "n must be in [1, 2^30 / element bytes], got " + std::to_string(n), true), env.Undefined();
    if (!info[3].IsNumber() || !info[4].IsNumber()) return k3::fail(env, fn, "arguments 'mean' and 'std' must be numbers"), env.Undefined();
    if (s > 255) return k3::fail(env, fn, "s must be a byte, got " + std::to_string(s), true), env.Undefined();
    Napi::ArrayBuffer out = Napi::ArrayBuffer::New(env, 2 * n * esize);
    auto *w = new SynthBlockWorker(env, (int)kind, info[1].As<Napi::Uint32Array>().Data(), n, info[3].As<Napi::Number>().DoubleValue(),
                                   info[4].As<Napi::Number>().DoubleValue(), (uint32_t)s, out);
    Napi::Promise p = w->Promise();
    w->Queue();
    return p;
}

// Test hook: every later io_uring setup fails with this errno (0 = off), as under a seccomp filter.
static Napi::Value SimulateUringUnavailable(const Napi::CallbackInfo &info) {
    size_t err;
    if (!k3::get_size(info, 0, "simulateUringUnavailable", "errno", &err)) return info.Env().Undefined();
    k3_uring_simulate_unavailable((int)err);
    return info.Env().Undefined();
}

void RegisterCompute(Napi::Env env, Napi::Object exports); // compute_addon.cc

// crc32(bytes, crc = 0, kernel = best): k3_crc32 with the best kernel this CPU has, or with the one
// named ("table" | "pclmul" | "vpclmul", capped at the best; true = "table", for tests and the bench).
static Napi::Value Crc32(const Napi::CallbackInfo &info) {
    Napi::Env env = info.Env();
    k3::Bytes b;
    if (!k3::get_bytes(info, 0, "crc32", "bytes", &b)) return env.Undefined();
    size_t crc = 0;
    if (info.Length() > 1 && !info[1].IsUndefined() && (!k3::get_size(info, 1, "crc32", "crc", &crc) || crc > UINT32_MAX))
        return env.IsExceptionPending() ? env.Undefined() : (k3::fail(env, "crc32", "crc must be a 32-bit unsigned integer", true), env.Undefined());
    k3_crc32_kernel kernel = k3_crc32_best_kernel();
    if (info.Length() > 2 && info[2].IsBoolean()) {
        if (info[2].As<Napi::Boolean>().Value()) kernel = K3_CRC32_TABLE;
    } else if (info.Length() > 2 && info[2].IsString()) {
        std::string name = info[2].As<Napi::String>().Utf8Value();
        if (name == "table") kernel = K3_CRC32_TABLE;
        else if (name == "pclmul") kernel = K3_CRC32_PCLMUL;
        else if (name == "vpclmul") kernel = K3_CRC32_VPCLMUL;
        else return k3::fail(env, "crc32", "kernel must be \"table\", \"pclmul\" or \"vpclmul\", got \"" + name + "\""), env.Undefined();
    } else if (info.Length() > 2 && !info[2].IsUndefined())
        return k3::fail(env, "crc32", "kernel must be a kernel name or a boolean"), env.Undefined();
    return Napi::Number::New(env, k3_crc32_with(kernel, (uint32_t)crc, b.data, b.length));
}

// crc32Kernel() -> "vpclmul" | "pclmul" | "table": what crc32 uses on this CPU.
static Napi::Value Crc32Kernel(const Napi::CallbackInfo &info) {
    static const char *names[] = {"table", "pclmul", "vpclmul"};
    return Napi::String::New(info.Env(), names[k3_crc32_best_kernel()]);
}

// crc32Combine(crcA, crcB, lengthB)
static Napi::Value Crc32Combine(const Napi::CallbackInfo &info) {
    size_t a, b, n;
    if (!k3::get_size(info, 0, "crc32Combine", "crcA", &a) || !k3::get_size(info, 1, "crc32Combine", "crcB", &b) ||
        !k3::get_size(info, 2, "crc32Combine", "lengthB", &n))
        return info.Env().Undefined();
    if (a > UINT32_MAX || b > UINT32_MAX) return k3::fail(info.Env(), "crc32Combine", "crcs are 32-bit", true), info.Env().Undefined();
    return Napi::Number::New(info.Env(), k3_crc32_combine((uint32_t)a, (uint32_t)b, n));
}

// releasePages(arrayBuffer): the whole pages of a buffer this addon made (resident blocks) go back
// to the kernel now; the buffer stays valid and reads as zeros (raw N-API: nothing here may throw
// past a failed status).
static napi_value ReleasePages(napi_env env, napi_callback_info info) {
    size_t argc = 1;
    napi_value argv[1];
    if (napi_get_cb_info(env, info, &argc, argv, nullptr, nullptr) != napi_ok) return nullptr;
    bool is_ab = false;
    if (argc < 1 || napi_is_arraybuffer(env, argv[0], &is_ab) != napi_ok || !is_ab) {
        napi_throw_type_error(env, nullptr, "releasePages: expected an ArrayBuffer");
        return nullptr;
    }
    void *data = nullptr;
    size_t length = 0;
    if (napi_get_arraybuffer_info(env, argv[0], &data, &length) != napi_ok) return nullptr;
    k3_release_pages(static_cast<uint8_t *>(data), length);
    return nullptr;
}

static Napi::Object Init(Napi::Env env, Napi::Object exports) {
    RegisterCompute(env, exports);
    exports["simulateUringUnavailable"] = Napi::Function::New(env, SimulateUringUnavailable);
    exports["readCeiling"] = Napi::Function::New(env, ReadCeiling);
    exports["dropFileCache"] = Napi::Function::New(env, DropFileCache);
    exports["backingCeiling"] = Napi::Function::New(env, BackingCeiling);
    exports["poolBench"] = Napi::Function::New(env, PoolBench);
    exports["NativeExpertStore"] = Store::Define(env);
    exports["supersetBytes"] = Napi::Function::New(env, SupersetBytes);
    exports["loadResident"] = Napi::Function::New(env, LoadResident);
    napi_value release_pages;
    if (napi_create_function(env, "releasePages", NAPI_AUTO_LENGTH, ReleasePages, nullptr, &release_pages) == napi_ok)
        exports["releasePages"] = Napi::Value(env, release_pages);
    exports["alignedBuffer"] = Napi::Function::New(env, AlignedBuffer);
    exports["dioAlignment"] = Napi::Function::New(env, DioAlignment);
    exports["synthBlock"] = Napi::Function::New(env, SynthBlock);
    exports["crc32"] = Napi::Function::New(env, Crc32);
    exports["crc32Combine"] = Napi::Function::New(env, Crc32Combine);
    exports["crc32UsesPclmul"] = Napi::Function::New(env, [](const Napi::CallbackInfo &info) { return Napi::Boolean::New(info.Env(), k3_crc32_uses_pclmul() != 0); });
    exports["crc32Kernel"] = Napi::Function::New(env, Crc32Kernel);
    return exports;
}

NODE_API_MODULE(k3_moe_stream, Init)
