/**
 * @k3/dense: the kernels every k3 package shares.
 *
 * One thread pool sized to the machine (`K3_THREADS` overrides it) and one SIMD level chosen at
 * load (`K3_SIMD=scalar|avx2|avx512` forces one). Every kernel gives bit-identical results at
 * every SIMD level and thread count: threads split outputs, reductions have one fixed order.
 *
 * Above the kernels: the weight views every package multiplies through (`Linear`, `vectorF32`,
 * the one bf16 widen `bf16ToF32`; weights.ts) and the one GLU MLP (`GluMlp`; glu.ts).
 */
import { K3_SITU_BETAS } from "./glu.js";
import { addon, native, type PoolStats, type SimdLevel } from "./native.js";

export type { PoolStats, SimdLevel };

/** The SIMD level the kernels use now. */
export function simdLevel(): SimdLevel {
  return native.simdLevel();
}

/** The best level this CPU supports. */
export function bestSimdLevel(): SimdLevel {
  return native.bestSimdLevel();
}

/** Forces a level (for tests and benchmarks); throws if the CPU lacks it. */
export function setSimdLevel(level: SimdLevel): void {
  native.setSimdLevel(level);
}

/** Threads in the shared pool (the caller's thread included). */
export function threadCount(): number {
  return native.threadCount();
}

/** Resizes the shared pool; 1 runs every kernel on the calling thread. */
export function setThreadCount(threads: number): void {
  native.setThreadCount(threads);
}

/**
 * Thread-pool counters since load, for benches: `jobs` run on the pool (2+ tasks with 2+ threads),
 * jobs in which a worker thread `helped` (ran at least one task; the caller claims whatever the
 * workers do not), and `sleeps`: times a worker's spin ran out and it slept on its condition
 * variable. Workers spin up to K3_POOL_SPIN_US (default 200) microseconds between jobs, then sleep.
 */
export function poolStats(): PoolStats {
  return native.poolStats();
}

/** Where the native addon was loaded from. */
export function nativeInfo(): { file: string; origin: "prebuilt" | "source" } {
  return { file: addon.file, origin: addon.origin };
}

/**
 * The C function table (`k3_dense_api` in native/include/k3_dense.h) as an opaque N-API external.
 * Other k3 addons take it at load so the whole process shares one pool and one set of kernels.
 */
export function nativeApi(): unknown {
  return native.api();
}

/** Options shared by the matrix kernels. */
export interface MatrixShape {
  rows: number;
  cols: number;
  /** Row stride in elements (defaults to cols). */
  ld?: number;
}

/**
 * y = W x, with W in bf16 (raw bits, row-major) and x, y in f32.
 * `w` may be any view (Uint16Array, or the Uint8Array of a safetensors tensor).
 */
export function gemvBf16(w: ArrayBufferView, x: Float32Array, y: Float32Array, shape: MatrixShape): Float32Array {
  native.gemvBf16(w, x, y, shape.rows, shape.cols, shape.ld ?? shape.cols);
  return y;
}

/** The bf16 GEMV calls a trace recorded: shape and wall seconds per call, in call order. */
export interface GemvTrace {
  /** Top-level calls seen while the trace was on (more than `rows.length` when the capacity was exceeded). */
  seen: number;
  /** Calls from inside pool tasks (a kernel's own tiles, run inline on both threads at once): counted, not recorded. */
  inTasks: number;
  rows: Float64Array;
  cols: Float64Array;
  seconds: Float64Array;
}

/**
 * A probe of gemvBf16 (and every native caller of the kernel, through the k3_dense_api table):
 * `start(capacity)` records each call's weights pointer, shape and wall time; `stop()` returns
 * them; `replay()` runs the recorded calls again back to back on the same weight memory (scratch
 * x and y) and returns each one's seconds. Engine time over replay time is what the caller adds
 * around the kernel. replay() reads the recorded weights: call it only while they are still allocated.
 */
export const gemvTrace = {
  start(capacity: number): void {
    native.gemvTraceStart(capacity);
  },
  stop(): GemvTrace {
    const t = native.gemvTraceStop();
    return { seen: t.seen, inTasks: t.inTasks, rows: t.rows, cols: t.cols, seconds: t.ns.map((x) => x / 1e9) };
  },
  replay(): Float64Array {
    return native.gemvTraceReplay().map((x) => x / 1e9);
  },
};

/** f32 -> bf16 bits with round-to-nearest-even (NaN stays NaN). */
export function f32ToBf16(values: Float32Array): Uint16Array {
  const out = new Uint16Array(values.length);
  const bits = new Uint32Array(values.buffer, values.byteOffset, values.length);
  for (let i = 0; i < values.length; i++) {
    const b = bits[i];
    if ((b & 0x7f800000) === 0x7f800000 && (b & 0x007fffff) !== 0) {
      out[i] = (b >>> 16) | 0x0040;
      continue;
    }
    out[i] = (b + 0x7fff + ((b >>> 16) & 1)) >>> 16;
  }
  return out;
}

// ---------------------------------------------------------------- matrix kernels
//
// Reduction order of every dot product (gemv and gemm, bf16 and f32 weights, every SIMD level):
//   lane[k % 16] = fmaf(w[k], x[k], lane[k % 16]) for k = 0..cols-1, then lane[i] += lane[i + h]
//   for h = 8, 4, 2, 1. Threads split output rows, so results never depend on the thread count.

/** y = W x with W, x, y in f32 (W row-major, row stride `ld`). Same order as gemvBf16. */
export function gemvF32(w: Float32Array, x: Float32Array, y: Float32Array, shape: MatrixShape): Float32Array {
  native.gemvF32(w, x, y, shape.rows, shape.cols, shape.ld ?? shape.cols);
  return y;
}

/** Shape of a batched product: W [rows, cols] times `batch` activation rows. */
export interface BatchShape extends MatrixShape {
  batch: number;
}

/**
 * Y[b] = W X[b] for b < batch, W in bf16 bits; X is [batch x cols], Y is [batch x rows] (row-major).
 * Each weight byte is read from memory once for the whole batch, and Y[b] is bit-identical to
 * `gemvBf16(w, X[b])`, so a batched prefill equals token-by-token decode.
 */
export function gemmBf16(w: ArrayBufferView, X: Float32Array, Y: Float32Array, shape: BatchShape): Float32Array {
  native.gemmBf16(w, X, Y, shape.rows, shape.cols, shape.batch, shape.ld ?? shape.cols);
  return Y;
}

/** As gemmBf16 with f32 weights; Y[b] is bit-identical to `gemvF32(w, X[b])`. */
export function gemmF32(w: Float32Array, X: Float32Array, Y: Float32Array, shape: BatchShape): Float32Array {
  native.gemmF32(w, X, Y, shape.rows, shape.cols, shape.batch, shape.ld ?? shape.cols);
  return Y;
}

/**
 * OPT-IN, NOT EXACT: Y[b] ~= W X[b] with the activations rounded to bf16 (round to nearest even)
 * before the products, as ggml's bf16 matmul does; on a CPU with AVX512-BF16 at the avx512 level it
 * runs `vdpbf16ps` (about 1.6-2x the exact gemmBf16 at batch >= 8; see the README's bench). Its
 * error against gemmBf16 is that of rounding X (relative L2 about 1e-3 on K3 shapes; the tests
 * bound it). Bit-identical for any thread count at one SIMD level; levels without vdpbf16ps run the
 * exact kernels on the rounded X (so they agree with each other, not with the vdpbf16ps bits).
 * Same arguments as gemmBf16.
 */
export function gemmBf16Rounded(w: ArrayBufferView, X: Float32Array, Y: Float32Array, shape: BatchShape): Float32Array {
  native.gemmBf16Rounded(w, X, Y, shape.rows, shape.cols, shape.batch, shape.ld ?? shape.cols);
  return Y;
}

/** True when gemmBf16Rounded runs vdpbf16ps at the current SIMD level (AVX512-BF16 CPU, avx512 level). */
export function roundedGemmUsesDpbf16(): boolean {
  return native.roundedUsesDpbf16();
}

// ---------------------------------------------------------------- accumulating small GEMM
//
// C[m][n] += A[m][k] B[k][n], one FMA chain per output element, in p order, at every SIMD level:
//   C[i][j] = fmaf(A[i][p], B[p][j], C[i][j]) for p = 0, 1, ..., k-1 (starting from C's value).
// The small products of the chunked KDA prefill (@k3/kda) and MLA's P.V (@k3/mla) run on this one
// kernel through the C table; from JS it runs on the calling thread.

/**
 * Shape of a small strided product (gemmAcc*, dotRows*): C is [m x n], the reduction runs over k.
 * Row strides are in elements and default to the row widths: A's rows are k wide, C's n wide, and
 * B's rows are n wide for gemmAcc (B is [k x n]) and k wide for dotRows (B is [n x k]). Elements
 * between C's rows are left untouched.
 */
export interface ProductShape {
  m: number;
  n: number;
  k: number;
  lda?: number;
  ldb?: number;
  ldc?: number;
}

/** Shape of `C[m][n] += A[m][k] B[k][n]` (see ProductShape). */
export type GemmAccShape = ProductShape;

/** The native argument list m, n, k, lda, ldb, ldc with the defaults filled in. */
function productArgs(shape: ProductShape, bRowWidth: number): [number, number, number, number, number, number] {
  return [shape.m, shape.n, shape.k, shape.lda ?? shape.k, shape.ldb ?? bRowWidth, shape.ldc ?? shape.n];
}

/**
 * C[m][n] += A[m][k] B[k][n] in f32 (all row-major). C is updated in place and returned; its
 * span must not overlap A's or B's. Bit-identical at every SIMD level (order above).
 */
export function gemmAccF32(A: Float32Array, B: Float32Array, C: Float32Array, shape: GemmAccShape): Float32Array {
  native.gemmAccF32(A, B, C, ...productArgs(shape, shape.n));
  return C;
}

/**
 * As gemmAccF32 with B in bf16 (raw bits, widened exactly): `B` may be a Uint16Array or any view
 * of the bits starting at an even byte offset (a safetensors tensor's Uint8Array, say).
 */
export function gemmAccBf16(A: Float32Array, B: ArrayBufferView, C: Float32Array, shape: GemmAccShape): Float32Array {
  native.gemmAccBf16(A, B, C, ...productArgs(shape, shape.n));
  return C;
}

// ---------------------------------------------------------------- dot rows
//
// C[i][j] = A[i] . B[j]: every row of A against every row of B, in the dot order of gemv/gemm
// above (A as the activation, B as the weights), so C[i][j] is bit for bit gemvF32(B, A[i])[j].
// Strides on all three operands and no thread pool: it is the kernel of MLA's attention scores
// and W_UV projection (@k3/mla) and of KDA's direct dots (@k3/kda), which call it through the C
// table from inside their own parallel tasks; from JS it runs on the calling thread.

/** Shape of `C[i][j] = A[i] . B[j]`, i < m, j < n, over k values (see ProductShape). */
export type DotRowsShape = ProductShape;

/**
 * C[i][j] = A[i] . B[j] in f32 (A [m x k], B [n x k], C [m x n], row-major). C is overwritten in
 * place and returned (k = 0 writes +0); its span must not overlap A's or B's. Bit-identical at
 * every SIMD level (order above).
 */
export function dotRowsF32(A: Float32Array, B: Float32Array, C: Float32Array, shape: DotRowsShape): Float32Array {
  native.dotRowsF32(A, B, C, ...productArgs(shape, shape.k));
  return C;
}

/**
 * As dotRowsF32 with B in bf16 (raw bits, widened exactly): `B` may be a Uint16Array or any view
 * of the bits starting at an even byte offset (a safetensors tensor's Uint8Array, say).
 */
export function dotRowsBf16(A: Float32Array, B: ArrayBufferView, C: Float32Array, shape: DotRowsShape): Float32Array {
  native.dotRowsBf16(A, B, C, ...productArgs(shape, shape.k));
  return C;
}

// ---------------------------------------------------------------- norms and activations
//
// One C implementation each (O(n) per token), identical at every SIMD level; exp/tanh are libm's
// expf/tanhf. Row sums use the 16-lane tree above (sum of squares: lane[k%16] = fmaf(x,x,lane)).

/**
 * RMSNorm over each row of `dim` values: out = weight * (x / sqrt(mean(x^2) + eps)), in f32.
 * x.length must be a multiple of dim; out may be x.
 */
export function rmsNorm(x: Float32Array, weight: Float32Array, eps: number, out: Float32Array, dim: number): Float32Array {
  native.rmsNorm(x, weight, eps, out, dim);
  return out;
}

/** out = a + b elementwise in f32 (the residual stream's adds); out may be a or b. Pieces run on the pool. */
export function add(a: Float32Array, b: Float32Array, out: Float32Array): Float32Array {
  native.add(a, b, out);
  return out;
}

/**
 * out[r] = the sum of row r's RMSNorm values, weight * (x / sqrt(mean(x^2) + eps)) exactly as
 * rmsNorm makes them, summed in float64 in index order and rounded once (K3's attention-residual
 * scores). x holds whole rows of `dim`; out one value per row. Rows run on the pool.
 */
export function rmsNormDot(x: Float32Array, weight: Float32Array, eps: number, dim: number, out: Float32Array): Float32Array {
  native.rmsNormDot(x, weight, eps, dim, out);
  return out;
}

/**
 * out[t] = sum_i pi[t * n + i] * sources[i][t] for each row t of `dim` (n = sources.length; out's
 * length fixes the rows): per value o = fround(o + pi * v) in float64, source after source from +0
 * (K3's attention-residual mix). out must not overlap a source. Rows run on the pool.
 */
export function mixRows(sources: Float32Array[], pi: Float32Array, dim: number, out: Float32Array): Float32Array {
  native.mixRows(sources, pi, dim, out);
  return out;
}

/**
 * The KDA q/k norm over each row of `dim`: out = (x / sqrt(sum(x^2) + eps)) * scale (eps inside the
 * sum; two f32 roundings, so KDA's q scale dk^-1/2 costs no second pass; scale 1, the default, is
 * x / norm exactly). `scale` is used as a float32 (pass Math.fround of it). Rows run on the pool.
 */
export function l2Normalize(x: Float32Array, out: Float32Array, dim: number, eps: number, scale = 1): Float32Array {
  native.l2Normalize(x, out, dim, eps, scale);
  return out;
}

/** out = x * sigma(gate), elementwise (KDA's output gate): sigmoid's bits, then one f32 multiply. out may be x. */
export function sigmoidMul(x: Float32Array, gate: Float32Array, out: Float32Array): Float32Array {
  native.sigmoidMul(x, gate, out);
  return out;
}

/** sigma(x) = 1 / (1 + exp(-x)), elementwise. */
export function sigmoid(x: Float32Array, out: Float32Array): Float32Array {
  native.sigmoid(x, out);
  return out;
}

/**
 * tanh(x), elementwise: the kernels' own tanh (SiTU's), Cephes' tanhf over @k3/dense's expf,
 * within 3 ulp of tanh and the same bits at every SIMD level; +-0 and NaN give themselves.
 */
export function tanh(x: Float32Array, out: Float32Array): Float32Array {
  native.tanh(x, out);
  return out;
}

/** SiLU(x) = x * sigma(x), elementwise. */
export function silu(x: Float32Array, out: Float32Array): Float32Array {
  native.silu(x, out);
  return out;
}

/** SiLU-GLU (Kimi-Linear-48B experts): out = SiLU(gate) * up. */
export function siluGlu(gate: Float32Array, up: Float32Array, out: Float32Array): Float32Array {
  native.siluGlu(gate, up, out);
  return out;
}

/**
 * SiTU-GLU (K3 experts): out = [beta1 tanh(g / beta1) sigma(g)] * [beta2 tanh(u / beta2)],
 * with sigma on the uncapped gate; |out| <= beta1 * beta2.
 */
export function situGlu(gate: Float32Array, up: Float32Array, out: Float32Array, beta1 = K3_SITU_BETAS.beta, beta2 = K3_SITU_BETAS.linearBeta): Float32Array {
  native.situGlu(gate, up, out, beta1, beta2);
  return out;
}

/**
 * Softmax over each row of `dim` values (max-subtracted, f32). A row holding a NaN, or only -inf,
 * comes out all NaN.
 */
export function softmax(x: Float32Array, out: Float32Array, dim: number): Float32Array {
  native.softmax(x, out, dim);
  return out;
}

/**
 * The k largest values, descending. Ties: lower index first. NaN ranks below every number
 * (-Infinity included), so NaNs are returned only when fewer than k numbers exist, lower index first.
 */
export function topK(values: Float32Array, k: number): { indices: Int32Array; values: Float32Array } {
  const indices = new Int32Array(k >= 0 ? k : 0);
  const out = new Float32Array(k >= 0 ? k : 0);
  native.topK(values, k, indices, out);
  return { indices, values: out };
}

// ---------------------------------------------------------------- benchmarks

/**
 * The memory-read ceiling: a plain streaming sum (AVX-512/AVX2 aligned loads, 8 accumulators) over a
 * fresh buffer of `bytes` (default 1 GiB; make it far larger than the caches), split over `threads`
 * (default: the pool size), best of `reps` passes. GB = 1e9 bytes. Temporarily resizes the pool.
 */
/**
 * The FMA peak: independent FMA chains per thread at the current SIMD level (16 zmm on AVX-512, 12 ymm
 * on AVX2 (16 would not fit its 16 registers), 16 fmaf otherwise), each task about 20 ms, best of `reps` (default 3) passes;
 * GFLOP/s counting 2 flops per lane per FMA. `threads` defaults to the pool size. Temporarily resizes the pool.
 *
 * `loop: "gemm"` times the exact batched GEMM's register loop instead (gemmBf16's micro-kernel with every
 * operand in L1: on AVX-512 6 weight + 4 activation vectors loaded per 24 FMAs; on AVX2 2 + 3 per 6): the
 * rate the exact summation order can reach on this core with no cache miss, which sits below the chains
 * where the loads compete with the FMAs. The scalar level has no such loop and times the chains.
 */
export function fmaPeak(options: { threads?: number; reps?: number; loop?: "chains" | "gemm" } = {}): { gflops: number } {
  const loop = options.loop ?? "chains";
  if (loop !== "chains" && loop !== "gemm") throw new TypeError(`fmaPeak: loop must be "chains" or "gemm", got ${JSON.stringify(loop)}`);
  const before = threadCount();
  const threads = options.threads ?? before;
  if (threads !== before) setThreadCount(threads);
  try {
    return { gflops: native.fmaPeak(threads, options.reps ?? 3, loop === "gemm" ? 1 : 0) };
  } finally {
    if (threads !== before) setThreadCount(before);
  }
}

export function memoryReadCeiling(options: { bytes?: number; threads?: number; reps?: number } = {}): { gbPerSec: number } {
  const before = threadCount();
  const threads = options.threads ?? before;
  if (threads !== before) setThreadCount(threads);
  try {
    return { gbPerSec: native.memoryReadCeiling(options.bytes ?? 2 ** 30, threads, options.reps ?? 5) };
  } finally {
    if (threads !== before) setThreadCount(before);
  }
}

export { Scratch } from "./scratch.js";
export { anyVectorF32, bf16ToF32, Linear, rowsOf, vectorF32, type WeightDtype, type WeightErrorFactory, type WeightTensor } from "./weights.js";
export { applyGlu, GluMlp, K3_SITU_BETAS, type GluActivation, type LinearMap, type SituBetas } from "./glu.js";
