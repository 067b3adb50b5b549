// addon.cc: N-API glue for @k3/dense. Checks arguments, then calls the C kernels.
#include <napi.h>
#include <cmath>
#include <cstdlib>
#include <vector>
#include "k3_napi.h"
extern "C" {
#include "k3_dense.h"
#include "cpu.h"
#include "pool.h"
#include "gemv_bf16.h"
#include "gemv_trace.h"
#include "gemm.h"
#include "gemm_acc.h"
#include "gemm_rounded.h"
#include "ops.h"
#include "memread.h"
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

// gemvTraceStart(capacity): records k3_gemv_bf16 calls (gemv_trace.h).
static Napi::Value GemvTraceStart(const Napi::CallbackInfo &info) {
    size_t capacity;
    if (!k3::get_size(info, 0, "gemvTraceStart", "capacity", &capacity)) return info.Env().Undefined();
    if (capacity > (size_t)1 << 24) return k3::fail(info.Env(), "gemvTraceStart", "capacity must be at most 16777216", true), info.Env().Undefined();
    if (k3_gemv_trace_start(capacity) != 0) k3::fail(info.Env(), "gemvTraceStart", "out of memory for the records");
    return info.Env().Undefined();
}

// gemvTraceStop() -> { seen, inTasks, rows: Float64Array, cols: Float64Array, ns: Float64Array }
static Napi::Value GemvTraceStop(const Napi::CallbackInfo &info) {
    Napi::Env env = info.Env();
    size_t kept, seen, in_tasks;
    const k3_gemv_record *r = k3_gemv_trace_stop(&kept, &seen, &in_tasks);
    Napi::Float64Array rows = Napi::Float64Array::New(env, kept), cols = Napi::Float64Array::New(env, kept),
                       ns = Napi::Float64Array::New(env, kept);
    for (size_t i = 0; i < kept; i++) {
        rows[i] = (double)r[i].rows;
        cols[i] = (double)r[i].cols;
        ns[i] = (double)r[i].ns;
    }
    Napi::Object out = Napi::Object::New(env);
    out.Set("seen", Napi::Number::New(env, (double)seen));
    out.Set("inTasks", Napi::Number::New(env, (double)in_tasks));
    out.Set("rows", rows);
    out.Set("cols", cols);
    out.Set("ns", ns);
    return out;
}

// gemvTraceReplay() -> Float64Array of each kept call's replay ns (the trace must be stopped).
static Napi::Value GemvTraceReplay(const Napi::CallbackInfo &info) {
    Napi::Env env = info.Env();
    size_t kept, seen, in_tasks;
    k3_gemv_trace_stop(&kept, &seen, &in_tasks);
    Napi::Float64Array out = Napi::Float64Array::New(env, kept);
    uint64_t *ns = (uint64_t *)malloc((kept ? kept : 1) * sizeof(uint64_t));
    if (!ns || k3_gemv_trace_replay(ns) != 0) {
        free(ns);
        return k3::fail(env, "gemvTraceReplay", "out of memory for the replay"), env.Undefined();
    }
    for (size_t i = 0; i < kept; i++) out[i] = (double)ns[i];
    free(ns);
    return out;
}

// ---------------------------------------------------------------- shared checks

// A finite number (eps, beta).
static bool get_number(const Napi::CallbackInfo &info, size_t index, const char *fn, const char *name, double *out) {
    if (info.Length() <= index || !info[index].IsNumber())
        return k3::fail(info.Env(), fn, std::string("argument '") + name + "' must be a number");
    *out = info[index].As<Napi::Number>().DoubleValue();
    if (!std::isfinite(*out)) return k3::fail(info.Env(), fn, std::string("argument '") + name + "' must be finite", true);
    return true;
}

// Checks that a row-major matrix of `rows` rows (stride ld) x `cols` of `elem` bytes fits in `bytes`.
static bool check_matrix(Napi::Env env, const char *fn, size_t bytes, size_t rows, size_t cols, size_t ld, size_t elem) {
    if (ld < cols) return k3::fail(env, fn, "ld must be >= cols", true);
    size_t need;
    if (rows > 0 && (!k3::mul_size(rows - 1, ld, &need) || need > SIZE_MAX - cols || (need += cols) > SIZE_MAX / elem ||
                     bytes < need * elem))
        return k3::fail(env, fn, std::string("w holds fewer than rows x cols ") + (elem == 2 ? "bf16" : "f32") + " values",
                        true);
    return true;
}

// Checks that X holds batch x cols and Y batch x rows.
static bool check_batch(Napi::Env env, const char *fn, size_t nx, size_t ny, size_t rows, size_t cols, size_t batch) {
    size_t need;
    if (!k3::mul_size(batch, cols, &need) || nx < need)
        return k3::fail(env, fn, "X holds fewer than batch x cols values", true);
    if (!k3::mul_size(batch, rows, &need) || ny < need)
        return k3::fail(env, fn, "Y holds fewer than batch x rows values", true);
    return true;
}

// gemvF32(w, x, y, rows, cols, ld)
static Napi::Value GemvF32(const Napi::CallbackInfo &info) {
    Napi::Env env = info.Env();
    const char *fn = "gemvF32";
    float *w, *x, *y;
    size_t nw, rows, cols, ld, nx, ny;
    if (!k3::get_f32(info, 0, fn, "w", 0, &w, &nw) || !k3::get_f32(info, 1, fn, "x", 0, &x, &nx) ||
        !k3::get_f32(info, 2, fn, "y", 0, &y, &ny) || !k3::get_size(info, 3, fn, "rows", &rows) ||
        !k3::get_size(info, 4, fn, "cols", &cols) || !k3::get_size(info, 5, fn, "ld", &ld))
        return env.Undefined();
    if (!check_matrix(env, fn, nw * 4, rows, cols, ld, 4)) return env.Undefined();
    if (nx < cols) return k3::fail(env, fn, "x is shorter than cols", true), env.Undefined();
    if (ny < rows) return k3::fail(env, fn, "y is shorter than rows", true), env.Undefined();
    k3_gemv_f32(w, ld, x, y, rows, cols);
    return env.Undefined();
}

// The arguments of gemmBf16 and gemmBf16Rounded: (w, X, Y, rows, cols, batch, ld), checked.
struct GemmBf16Args {
    const uint16_t *w;
    float *x, *y;
    size_t rows, cols, batch, ld;
};

static bool get_gemm_bf16_args(const Napi::CallbackInfo &info, const char *fn, GemmBf16Args *a) {
    Napi::Env env = info.Env();
    k3::Bytes w;
    size_t nx, ny;
    if (!k3::get_bytes(info, 0, fn, "w", &w) || !k3::get_f32(info, 1, fn, "X", 0, &a->x, &nx) ||
        !k3::get_f32(info, 2, fn, "Y", 0, &a->y, &ny) || !k3::get_size(info, 3, fn, "rows", &a->rows) ||
        !k3::get_size(info, 4, fn, "cols", &a->cols) || !k3::get_size(info, 5, fn, "batch", &a->batch) ||
        !k3::get_size(info, 6, fn, "ld", &a->ld))
        return false;
    if (!check_matrix(env, fn, w.length, a->rows, a->cols, a->ld, 2) ||
        !check_batch(env, fn, nx, ny, a->rows, a->cols, a->batch))
        return false;
    if (reinterpret_cast<uintptr_t>(w.data) % 2 != 0)
        return k3::fail(env, fn, "w must start at an even byte offset (bf16)", true), false;
    a->w = reinterpret_cast<const uint16_t *>(w.data);
    return true;
}

// gemmBf16(w, X, Y, rows, cols, batch, ld)
static Napi::Value GemmBf16(const Napi::CallbackInfo &info) {
    GemmBf16Args a;
    if (get_gemm_bf16_args(info, "gemmBf16", &a)) k3_gemm_bf16(a.w, a.ld, a.x, a.y, a.rows, a.cols, a.batch);
    return info.Env().Undefined();
}

// gemmBf16Rounded(w, X, Y, rows, cols, batch, ld): the opt-in rounded path (gemm_rounded.h)
static Napi::Value GemmBf16Rounded(const Napi::CallbackInfo &info) {
    GemmBf16Args a;
    if (get_gemm_bf16_args(info, "gemmBf16Rounded", &a) &&
        k3_gemm_bf16_rounded(a.w, a.ld, a.x, a.y, a.rows, a.cols, a.batch) != 0)
        k3::fail(info.Env(), "gemmBf16Rounded", "out of memory for the rounded activations", false);
    return info.Env().Undefined();
}

static Napi::Value RoundedUsesDpbf16(const Napi::CallbackInfo &info) {
    return Napi::Boolean::New(info.Env(), k3_gemm_rounded_uses_dpbf16() != 0);
}

// gemmF32(w, X, Y, rows, cols, batch, ld)
static Napi::Value GemmF32(const Napi::CallbackInfo &info) {
    Napi::Env env = info.Env();
    const char *fn = "gemmF32";
    float *w, *x, *y;
    size_t nw, rows, cols, batch, ld, nx, ny;
    if (!k3::get_f32(info, 0, fn, "w", 0, &w, &nw) || !k3::get_f32(info, 1, fn, "X", 0, &x, &nx) ||
        !k3::get_f32(info, 2, fn, "Y", 0, &y, &ny) || !k3::get_size(info, 3, fn, "rows", &rows) ||
        !k3::get_size(info, 4, fn, "cols", &cols) || !k3::get_size(info, 5, fn, "batch", &batch) ||
        !k3::get_size(info, 6, fn, "ld", &ld))
        return env.Undefined();
    if (!check_matrix(env, fn, nw * 4, rows, cols, ld, 4) || !check_batch(env, fn, nx, ny, rows, cols, batch))
        return env.Undefined();
    k3_gemm_f32(w, ld, x, y, rows, cols, batch);
    return env.Undefined();
}

// ---------------------------------------------------------------- small products: gemmAcc, dotRows

// One operand of gemmAcc / dotRows: `rows` rows of `cols` values, `ld` apart, in `bytes` bytes from `data`.
struct Operand {
    const char *name;         // "A", "B", "C"
    const char *rows_name;    // for messages: "m", "k"
    const char *cols_name;    // "k", "n"
    const char *ld_name;      // "lda", "ldb", "ldc"
    const uint8_t *data;
    size_t bytes, rows, cols, ld, elem;
    size_t span;              // bytes from data to the end of the last value used (0 when empty)
};

// Checks ld >= cols and that rows x cols (stride ld) fit; sets op->span.
static bool check_operand(Napi::Env env, const char *fn, Operand *op) {
    if (op->ld < op->cols)
        return k3::fail(env, fn,
                        std::string(op->ld_name) + " (" + std::to_string(op->ld) + ") must be >= " + op->cols_name + " (" +
                            std::to_string(op->cols) + ")",
                        true);
    op->span = 0;
    if (op->rows == 0 || op->cols == 0) return true;
    size_t need;
    if (!k3::mul_size(op->rows - 1, op->ld, &need) || need > SIZE_MAX - op->cols || (need += op->cols) > SIZE_MAX / op->elem ||
        op->bytes < need * op->elem)
        return k3::fail(env, fn,
                        std::string(op->name) + " holds " + std::to_string(op->bytes / op->elem) + " values, needs " +
                            op->rows_name + " x " + op->cols_name + " = " + std::to_string(op->rows) + " x " +
                            std::to_string(op->cols) + " with row stride " + op->ld_name + " = " + std::to_string(op->ld),
                        true);
    op->span = need * op->elem;
    return true;
}

static bool spans_overlap(const Operand &a, const Operand &b) {
    if (a.span == 0 || b.span == 0) return false;
    return a.data < b.data + b.span && b.data < a.data + a.span;
}

// The arguments of gemmAcc and dotRows: (A, B, C, m, n, k, lda, ldb, ldc); B is f32 or bf16 bits.
struct ProductArgs {
    float *a, *c;
    const uint8_t *b;
    size_t na, b_bytes, nc, m, n, k, lda, ldb, ldc;
};

static bool get_product_args(const Napi::CallbackInfo &info, const char *fn, bool bf16, ProductArgs *p) {
    k3::Bytes b;
    float *bf = nullptr;
    size_t nbf = 0;
    if (!k3::get_f32(info, 0, fn, "A", 0, &p->a, &p->na)) return false;
    if (bf16 ? !k3::get_bytes(info, 1, fn, "B", &b) : !k3::get_f32(info, 1, fn, "B", 0, &bf, &nbf)) return false;
    if (!k3::get_f32(info, 2, fn, "C", 0, &p->c, &p->nc) || !k3::get_size(info, 3, fn, "m", &p->m) ||
        !k3::get_size(info, 4, fn, "n", &p->n) || !k3::get_size(info, 5, fn, "k", &p->k) ||
        !k3::get_size(info, 6, fn, "lda", &p->lda) || !k3::get_size(info, 7, fn, "ldb", &p->ldb) ||
        !k3::get_size(info, 8, fn, "ldc", &p->ldc))
        return false;
    p->b = bf16 ? b.data : reinterpret_cast<const uint8_t *>(bf);
    p->b_bytes = bf16 ? b.length : nbf * 4;
    return true;
}

// Bounds of A, B, C, B's alignment, and C overlapping A or B (C is written while they are read).
// B is k x n for gemmAcc (C += A B) and n x k for dotRows (C = A B^T).
static bool check_product(Napi::Env env, const char *fn, bool bf16, bool b_is_n_by_k, const ProductArgs &p) {
    Operand A = {"A", "m", "k", "lda", reinterpret_cast<const uint8_t *>(p.a), p.na * 4, p.m, p.k, p.lda, 4, 0};
    Operand B = b_is_n_by_k ? Operand{"B", "n", "k", "ldb", p.b, p.b_bytes, p.n, p.k, p.ldb, bf16 ? 2u : 4u, 0}
                            : Operand{"B", "k", "n", "ldb", p.b, p.b_bytes, p.k, p.n, p.ldb, bf16 ? 2u : 4u, 0};
    Operand C = {"C", "m", "n", "ldc", reinterpret_cast<const uint8_t *>(p.c), p.nc * 4, p.m, p.n, p.ldc, 4, 0};
    if (!check_operand(env, fn, &A) || !check_operand(env, fn, &B) || !check_operand(env, fn, &C)) return false;
    if (bf16 && reinterpret_cast<uintptr_t>(B.data) % 2 != 0)
        return k3::fail(env, fn, "B must start at an even byte offset (bf16)", true);
    if (spans_overlap(C, A) || spans_overlap(C, B))
        return k3::fail(env, fn, std::string("C overlaps ") + (spans_overlap(C, A) ? "A" : "B") +
                                     " (C is written while A and B are read)",
                        true);
    return true;
}

// What tells gemmAcc and dotRows apart: B's shape, whether k = 0 leaves C alone, and the kernels.
struct ProductKind {
    bool b_is_n_by_k;  // dotRows: B is n x k (C = A B^T); gemmAcc: k x n (C += A B)
    bool writes_at_k0; // dotRows writes +0 when k = 0; gemmAcc adds nothing
    void (*f32)(size_t, size_t, size_t, const float *, size_t, const float *, size_t, float *, size_t);
    void (*bf16)(size_t, size_t, size_t, const float *, size_t, const uint16_t *, size_t, float *, size_t);
};
static const ProductKind kGemmAcc = {false, false, k3_gemm_acc_f32, k3_gemm_acc_bf16};
static const ProductKind kDotRows = {true, true, k3_dot_rows_f32, k3_dot_rows_bf16};

// (A, B, C, m, n, k, lda, ldb, ldc): gemmAcc C[m][n] += A[m][k] B[k][n]; dotRows C[i][j] = A[i] . B[j].
static Napi::Value Product(const Napi::CallbackInfo &info, const char *fn, bool bf16, const ProductKind &kind) {
    ProductArgs p;
    if (!get_product_args(info, fn, bf16, &p) || !check_product(info.Env(), fn, bf16, kind.b_is_n_by_k, p) ||
        p.m == 0 || p.n == 0 || (p.k == 0 && !kind.writes_at_k0))
        return info.Env().Undefined();
    if (bf16)
        kind.bf16(p.m, p.n, p.k, p.a, p.lda, reinterpret_cast<const uint16_t *>(p.b), p.ldb, p.c, p.ldc);
    else
        kind.f32(p.m, p.n, p.k, p.a, p.lda, reinterpret_cast<const float *>(p.b), p.ldb, p.c, p.ldc);
    return info.Env().Undefined();
}
static Napi::Value GemmAccF32(const Napi::CallbackInfo &info) { return Product(info, "gemmAccF32", false, kGemmAcc); }
static Napi::Value GemmAccBf16(const Napi::CallbackInfo &info) { return Product(info, "gemmAccBf16", true, kGemmAcc); }
static Napi::Value DotRowsF32(const Napi::CallbackInfo &info) { return Product(info, "dotRowsF32", false, kDotRows); }
static Napi::Value DotRowsBf16(const Napi::CallbackInfo &info) { return Product(info, "dotRowsBf16", true, kDotRows); }

// Checks a row-wise op: x.length is a positive multiple of dim and out is as long as x.
// x holds whole rows of dim values; *n_rows is their count.
static bool check_dim(Napi::Env env, const char *fn, size_t nx, size_t dim, size_t *n_rows) {
    if (dim == 0) return k3::fail(env, fn, "dim must be >= 1", true);
    if (nx % dim != 0)
        return k3::fail(env, fn, "x.length (" + std::to_string(nx) + ") is not a multiple of dim (" + std::to_string(dim) + ")",
                        true);
    *n_rows = nx / dim;
    return true;
}

// ... and out is as long as x.
static bool check_rows(Napi::Env env, const char *fn, size_t nx, size_t nout, size_t dim, size_t *n_rows) {
    if (!check_dim(env, fn, nx, dim, n_rows)) return false;
    if (nout < nx) return k3::fail(env, fn, "out is shorter than x", true);
    return true;
}

// rmsNorm(x, w, eps, out, dim)
static Napi::Value RmsNorm(const Napi::CallbackInfo &info) {
    Napi::Env env = info.Env();
    const char *fn = "rmsNorm";
    float *x, *w, *out;
    size_t nx, nw, nout, dim, n_rows;
    double eps;
    if (!k3::get_f32(info, 0, fn, "x", 0, &x, &nx) || !k3::get_f32(info, 1, fn, "weight", 0, &w, &nw) ||
        !get_number(info, 2, fn, "eps", &eps) || !k3::get_f32(info, 3, fn, "out", 0, &out, &nout) ||
        !k3::get_size(info, 4, fn, "dim", &dim) || !check_rows(env, fn, nx, nout, dim, &n_rows))
        return env.Undefined();
    if (nw < dim) return k3::fail(env, fn, "weight is shorter than dim", true), env.Undefined();
    if (eps < 0) return k3::fail(env, fn, "eps must be >= 0", true), env.Undefined();
    k3_rms_norm(x, w, (float)eps, out, dim, n_rows);
    return env.Undefined();
}

// binary(a, b, out) for add / sigmoidMul: a and b the same length, out at least as long
static Napi::Value Binary(const Napi::CallbackInfo &info, const char *fn, const char *a_name, const char *b_name,
                          void (*op)(const float *, const float *, float *, size_t)) {
    Napi::Env env = info.Env();
    float *a, *b, *out;
    size_t na, nb, nout;
    if (!k3::get_f32(info, 0, fn, a_name, 0, &a, &na) || !k3::get_f32(info, 1, fn, b_name, 0, &b, &nb) ||
        !k3::get_f32(info, 2, fn, "out", 0, &out, &nout))
        return env.Undefined();
    if (nb != na) return k3::fail(env, fn, std::string(a_name) + " and " + b_name + " must have the same length", true), env.Undefined();
    if (nout < na) return k3::fail(env, fn, std::string("out is shorter than ") + a_name, true), env.Undefined();
    op(a, b, out, na);
    return env.Undefined();
}
// add(a, b, out): out = a + b
static Napi::Value Add(const Napi::CallbackInfo &info) { return Binary(info, "add", "a", "b", k3_add); }
// sigmoidMul(x, gate, out): out = x * sigma(gate)
static Napi::Value SigmoidMul(const Napi::CallbackInfo &info) { return Binary(info, "sigmoidMul", "x", "gate", k3_sigmoid_mul); }

// rmsNormDot(x, w, eps, dim, out): out[r] = the sum of row r's RMSNorm values (see ops.h)
static Napi::Value RmsNormDot(const Napi::CallbackInfo &info) {
    Napi::Env env = info.Env();
    const char *fn = "rmsNormDot";
    float *x, *w, *out;
    size_t nx, nw, nout, dim, n_rows;
    double eps;
    if (!k3::get_f32(info, 0, fn, "x", 0, &x, &nx) || !k3::get_f32(info, 1, fn, "weight", 0, &w, &nw) ||
        !get_number(info, 2, fn, "eps", &eps) || !k3::get_size(info, 3, fn, "dim", &dim) ||
        !k3::get_f32(info, 4, fn, "out", 0, &out, &nout) || !check_dim(env, fn, nx, dim, &n_rows))
        return env.Undefined();
    if (nw < dim) return k3::fail(env, fn, "weight is shorter than dim", true), env.Undefined();
    if (eps < 0) return k3::fail(env, fn, "eps must be >= 0", true), env.Undefined();
    if (nout < n_rows) return k3::fail(env, fn, "out holds fewer values than x has rows", true), env.Undefined();
    k3_rms_norm_dot(x, w, (float)eps, dim, n_rows, out);
    return env.Undefined();
}

// mixRows(sources: Float32Array[], pi, dim, out): out[t] = sum_i pi[t][i] sources[i][t] (see ops.h)
static Napi::Value MixRows(const Napi::CallbackInfo &info) {
    Napi::Env env = info.Env();
    const char *fn = "mixRows";
    if (info.Length() < 1 || !info[0].IsArray()) return k3::fail(env, fn, "argument 'sources' must be an array of Float32Array"), env.Undefined();
    float *pi, *out;
    size_t npi, nout, dim;
    if (!k3::get_f32(info, 1, fn, "pi", 0, &pi, &npi) || !k3::get_size(info, 2, fn, "dim", &dim) ||
        !k3::get_f32(info, 3, fn, "out", 0, &out, &nout))
        return env.Undefined();
    if (dim == 0) return k3::fail(env, fn, "dim must be >= 1", true), env.Undefined();
    if (nout % dim != 0) return k3::fail(env, fn, "out.length is not a multiple of dim", true), env.Undefined();
    const size_t rows = nout / dim;
    Napi::Array arr = info[0].As<Napi::Array>();
    const uint32_t n = arr.Length();
    if (n == 0 || n > 4096) return k3::fail(env, fn, "sources must hold 1..4096 arrays", true), env.Undefined();
    if (npi < (size_t)n * rows) return k3::fail(env, fn, "pi holds fewer than rows x sources values", true), env.Undefined();
    std::vector<const float *> src(n);
    const char *o0 = (const char *)out, *o1 = (const char *)(out + nout);
    for (uint32_t i = 0; i < n; i++) {
        Napi::Value v = arr.Get(i);
        if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != napi_float32_array)
            return k3::fail(env, fn, "sources[" + std::to_string(i) + "] must be a Float32Array"), env.Undefined();
        Napi::Float32Array a = v.As<Napi::Float32Array>();
        if (a.ElementLength() < nout)
            return k3::fail(env, fn, "sources[" + std::to_string(i) + "] is shorter than out", true), env.Undefined();
        const char *s0 = (const char *)a.Data(), *s1 = (const char *)(a.Data() + nout);
        if (s0 < o1 && o0 < s1) return k3::fail(env, fn, "out overlaps sources[" + std::to_string(i) + "]", true), env.Undefined();
        src[i] = a.Data();
    }
    k3_mix_rows(src.data(), n, pi, dim, rows, out);
    return env.Undefined();
}

// l2Normalize(x, out, dim, eps, scale)
static Napi::Value L2Normalize(const Napi::CallbackInfo &info) {
    Napi::Env env = info.Env();
    const char *fn = "l2Normalize";
    float *x, *out;
    size_t nx, nout, dim, n_rows;
    double eps, scale;
    if (!k3::get_f32(info, 0, fn, "x", 0, &x, &nx) || !k3::get_f32(info, 1, fn, "out", 0, &out, &nout) ||
        !k3::get_size(info, 2, fn, "dim", &dim) || !get_number(info, 3, fn, "eps", &eps) ||
        !get_number(info, 4, fn, "scale", &scale) || !check_rows(env, fn, nx, nout, dim, &n_rows))
        return env.Undefined();
    if (eps < 0) return k3::fail(env, fn, "eps must be >= 0", true), env.Undefined();
    k3_l2_normalize_scaled(x, out, dim, (float)eps, (float)scale, n_rows);
    return env.Undefined();
}

// unary(x, out) for sigmoid / silu
static Napi::Value Unary(const Napi::CallbackInfo &info, const char *fn, void (*op)(const float *, float *, size_t)) {
    Napi::Env env = info.Env();
    float *x, *out;
    size_t nx, nout;
    if (!k3::get_f32(info, 0, fn, "x", 0, &x, &nx) || !k3::get_f32(info, 1, fn, "out", 0, &out, &nout))
        return env.Undefined();
    if (nout < nx) return k3::fail(env, fn, "out is shorter than x", true), env.Undefined();
    op(x, out, nx);
    return env.Undefined();
}
static Napi::Value Sigmoid(const Napi::CallbackInfo &info) { return Unary(info, "sigmoid", k3_sigmoid); }
static Napi::Value Silu(const Napi::CallbackInfo &info) { return Unary(info, "silu", k3_silu); }
static Napi::Value Tanh(const Napi::CallbackInfo &info) { return Unary(info, "tanh", k3_tanh); }

// Checks gate/up/out of a GLU: same length.
static bool get_glu(const Napi::CallbackInfo &info, const char *fn, float **g, float **u, float **out, size_t *n) {
    size_t ng, nu, nout;
    if (!k3::get_f32(info, 0, fn, "gate", 0, g, &ng) || !k3::get_f32(info, 1, fn, "up", 0, u, &nu) ||
        !k3::get_f32(info, 2, fn, "out", 0, out, &nout))
        return false;
    if (nu != ng) return k3::fail(info.Env(), fn, "gate and up must have the same length", true);
    if (nout < ng) return k3::fail(info.Env(), fn, "out is shorter than gate", true);
    *n = ng;
    return true;
}

static Napi::Value SiluGlu(const Napi::CallbackInfo &info) {
    float *g = nullptr, *u = nullptr, *out = nullptr;
    size_t n = 0;
    if (get_glu(info, "siluGlu", &g, &u, &out, &n)) k3_silu_glu(g, u, out, n);
    return info.Env().Undefined();
}

// situGlu(gate, up, out, beta1, beta2)
static Napi::Value SituGlu(const Napi::CallbackInfo &info) {
    const char *fn = "situGlu";
    float *g = nullptr, *u = nullptr, *out = nullptr;
    size_t n = 0;
    double b1, b2;
    if (!get_glu(info, fn, &g, &u, &out, &n) || !get_number(info, 3, fn, "beta1", &b1) ||
        !get_number(info, 4, fn, "beta2", &b2))
        return info.Env().Undefined();
    if (!(b1 > 0) || !(b2 > 0)) return k3::fail(info.Env(), fn, "beta1 and beta2 must be > 0", true), info.Env().Undefined();
    k3_situ_glu(g, u, out, n, (float)b1, (float)b2);
    return info.Env().Undefined();
}

// softmax(x, out, dim)
static Napi::Value Softmax(const Napi::CallbackInfo &info) {
    Napi::Env env = info.Env();
    const char *fn = "softmax";
    float *x, *out;
    size_t nx, nout, dim, n_rows;
    if (!k3::get_f32(info, 0, fn, "x", 0, &x, &nx) || !k3::get_f32(info, 1, fn, "out", 0, &out, &nout) ||
        !k3::get_size(info, 2, fn, "dim", &dim) || !check_rows(env, fn, nx, nout, dim, &n_rows))
        return env.Undefined();
    k3_softmax(x, out, dim, n_rows);
    return env.Undefined();
}

// topK(values, k, outIndex: Int32Array, outValue: Float32Array)
static Napi::Value TopK(const Napi::CallbackInfo &info) {
    Napi::Env env = info.Env();
    const char *fn = "topK";
    float *values, *out_value;
    size_t n, k, n_out_value;
    if (!k3::get_f32(info, 0, fn, "values", 0, &values, &n) || !k3::get_size(info, 1, fn, "k", &k))
        return env.Undefined();
    if (k > n) return k3::fail(env, fn, "k (" + std::to_string(k) + ") exceeds values.length (" + std::to_string(n) + ")", true), env.Undefined();
    if (n > INT32_MAX) return k3::fail(env, fn, "values.length exceeds 2^31-1", true), env.Undefined();
    if (info.Length() <= 2 || !info[2].IsTypedArray() || info[2].As<Napi::TypedArray>().TypedArrayType() != napi_int32_array)
        return k3::fail(env, fn, "argument 'outIndex' must be an Int32Array"), env.Undefined();
    Napi::Int32Array out_index = info[2].As<Napi::Int32Array>();
    if (!k3::get_f32(info, 3, fn, "outValue", k, &out_value, &n_out_value)) return env.Undefined();
    if (out_index.ElementLength() < k) return k3::fail(env, fn, "outIndex is shorter than k", true), env.Undefined();
    k3_top_k(values, n, k, out_index.Data(), out_value);
    return env.Undefined();
}

// memoryReadCeiling(bytes, threads, reps) -> GB/s
static Napi::Value MemoryReadCeiling(const Napi::CallbackInfo &info) {
    Napi::Env env = info.Env();
    const char *fn = "memoryReadCeiling";
    size_t bytes, threads, reps;
    if (!k3::get_size(info, 0, fn, "bytes", &bytes) || !k3::get_size(info, 1, fn, "threads", &threads) ||
        !k3::get_size(info, 2, fn, "reps", &reps))
        return env.Undefined();
    if (bytes < 4096) return k3::fail(env, fn, "bytes must be >= 4096", true), env.Undefined();
    if (threads < 1 || threads > 256) return k3::fail(env, fn, "threads must be between 1 and 256", true), env.Undefined();
    if (reps < 1 || reps > 1000) return k3::fail(env, fn, "reps must be between 1 and 1000", true), env.Undefined();
    double gbps = k3_memory_read_ceiling(bytes, (int)threads, (int)reps);
    if (gbps < 0) return k3::fail(env, fn, "could not allocate " + std::to_string(bytes) + " bytes", true), env.Undefined();
    return Napi::Number::New(env, gbps);
}

// poolStats() -> { jobs, helped, sleeps } (pool.h)
static Napi::Value PoolStats(const Napi::CallbackInfo &info) {
    unsigned long c[3];
    k3_pool_stats(c);
    Napi::Object o = Napi::Object::New(info.Env());
    o.Set("jobs", Napi::Number::New(info.Env(), (double)c[0]));
    o.Set("helped", Napi::Number::New(info.Env(), (double)c[1]));
    o.Set("sleeps", Napi::Number::New(info.Env(), (double)c[2]));
    return o;
}

// fmaPeak(threads, reps, kind) -> GFLOP/s; kind 0 = FMA chains, 1 = the exact GEMM's register loop
static Napi::Value FmaPeak(const Napi::CallbackInfo &info) {
    Napi::Env env = info.Env();
    const char *fn = "fmaPeak";
    size_t threads, reps, kind;
    if (!k3::get_size(info, 0, fn, "threads", &threads) || !k3::get_size(info, 1, fn, "reps", &reps) ||
        !k3::get_size(info, 2, fn, "kind", &kind))
        return env.Undefined();
    if (threads < 1 || threads > 256) return k3::fail(env, fn, "threads must be between 1 and 256", true), env.Undefined();
    if (reps < 1 || reps > 1000) return k3::fail(env, fn, "reps must be between 1 and 1000", true), env.Undefined();
    if (kind > 1) return k3::fail(env, fn, "kind must be 0 (chains) or 1 (GEMM loop)", true), env.Undefined();
    double gflops = k3_fma_peak((int)threads, (int)reps, (k3_peak_kind)kind);
    if (gflops < 0) return k3::fail(env, fn, "could not allocate the GEMM loop's operands", true), env.Undefined();
    return Napi::Number::New(env, gflops);
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
    exports["gemvTraceStart"] = Napi::Function::New(env, GemvTraceStart);
    exports["gemvTraceStop"] = Napi::Function::New(env, GemvTraceStop);
    exports["gemvTraceReplay"] = Napi::Function::New(env, GemvTraceReplay);
    exports["gemvF32"] = Napi::Function::New(env, GemvF32);
    exports["gemmBf16"] = Napi::Function::New(env, GemmBf16);
    exports["gemmF32"] = Napi::Function::New(env, GemmF32);
    exports["gemmBf16Rounded"] = Napi::Function::New(env, GemmBf16Rounded);
    exports["roundedUsesDpbf16"] = Napi::Function::New(env, RoundedUsesDpbf16);
    exports["gemmAccF32"] = Napi::Function::New(env, GemmAccF32);
    exports["gemmAccBf16"] = Napi::Function::New(env, GemmAccBf16);
    exports["dotRowsF32"] = Napi::Function::New(env, DotRowsF32);
    exports["dotRowsBf16"] = Napi::Function::New(env, DotRowsBf16);
    exports["rmsNorm"] = Napi::Function::New(env, RmsNorm);
    exports["l2Normalize"] = Napi::Function::New(env, L2Normalize);
    exports["sigmoid"] = Napi::Function::New(env, Sigmoid);
    exports["sigmoidMul"] = Napi::Function::New(env, SigmoidMul);
    exports["tanh"] = Napi::Function::New(env, Tanh);
    exports["rmsNormDot"] = Napi::Function::New(env, RmsNormDot);
    exports["add"] = Napi::Function::New(env, Add);
    exports["mixRows"] = Napi::Function::New(env, MixRows);
    exports["silu"] = Napi::Function::New(env, Silu);
    exports["siluGlu"] = Napi::Function::New(env, SiluGlu);
    exports["situGlu"] = Napi::Function::New(env, SituGlu);
    exports["softmax"] = Napi::Function::New(env, Softmax);
    exports["topK"] = Napi::Function::New(env, TopK);
    exports["memoryReadCeiling"] = Napi::Function::New(env, MemoryReadCeiling);
    exports["fmaPeak"] = Napi::Function::New(env, FmaPeak);
    exports["poolStats"] = Napi::Function::New(env, PoolStats);
    exports["api"] = Napi::Function::New(env, Api);
    return exports;
}

NODE_API_MODULE(k3_dense, Init)
