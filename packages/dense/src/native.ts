import { loadAddon } from "@k3/native";

export type SimdLevel = "scalar" | "avx2" | "avx512";

/** Thread-pool counters since load (see poolStats in index.ts). */
export interface PoolStats {
  jobs: number;
  helped: number;
  sleeps: number;
}

export interface DenseBinding {
  simdLevel(): SimdLevel;
  bestSimdLevel(): SimdLevel;
  setSimdLevel(level: SimdLevel): void;
  threadCount(): number;
  setThreadCount(threads: number): void;
  gemvBf16(w: ArrayBufferView, x: Float32Array, y: Float32Array, rows: number, cols: number, ld: number): void;
  gemvTraceStart(capacity: number): void;
  gemvTraceStop(): { seen: number; inTasks: number; rows: Float64Array; cols: Float64Array; ns: Float64Array };
  gemvTraceReplay(): Float64Array;
  gemvF32(w: Float32Array, x: Float32Array, y: Float32Array, rows: number, cols: number, ld: number): void;
  gemmBf16(w: ArrayBufferView, X: Float32Array, Y: Float32Array, rows: number, cols: number, batch: number, ld: number): void;
  gemmF32(w: Float32Array, X: Float32Array, Y: Float32Array, rows: number, cols: number, batch: number, ld: number): void;
  gemmBf16Rounded(w: ArrayBufferView, X: Float32Array, Y: Float32Array, rows: number, cols: number, batch: number, ld: number): void;
  roundedUsesDpbf16(): boolean;
  poolStats(): PoolStats;
  gemmAccF32(A: Float32Array, B: Float32Array, C: Float32Array, m: number, n: number, k: number, lda: number, ldb: number, ldc: number): void;
  gemmAccBf16(A: Float32Array, B: ArrayBufferView, C: Float32Array, m: number, n: number, k: number, lda: number, ldb: number, ldc: number): void;
  dotRowsF32(A: Float32Array, B: Float32Array, C: Float32Array, m: number, n: number, k: number, lda: number, ldb: number, ldc: number): void;
  dotRowsBf16(A: Float32Array, B: ArrayBufferView, C: Float32Array, m: number, n: number, k: number, lda: number, ldb: number, ldc: number): void;
  rmsNorm(x: Float32Array, weight: Float32Array, eps: number, out: Float32Array, dim: number): void;
  l2Normalize(x: Float32Array, out: Float32Array, dim: number, eps: number, scale: number): void;
  sigmoidMul(x: Float32Array, gate: Float32Array, out: Float32Array): void;
  tanh(x: Float32Array, out: Float32Array): void;
  add(a: Float32Array, b: Float32Array, out: Float32Array): void;
  rmsNormDot(x: Float32Array, weight: Float32Array, eps: number, dim: number, out: Float32Array): void;
  mixRows(sources: Float32Array[], pi: Float32Array, dim: number, out: Float32Array): void;
  sigmoid(x: Float32Array, out: Float32Array): void;
  silu(x: Float32Array, out: Float32Array): void;
  siluGlu(gate: Float32Array, up: Float32Array, out: Float32Array): void;
  situGlu(gate: Float32Array, up: Float32Array, out: Float32Array, beta1: number, beta2: number): void;
  softmax(x: Float32Array, out: Float32Array, dim: number): void;
  topK(values: Float32Array, k: number, outIndex: Int32Array, outValue: Float32Array): void;
  memoryReadCeiling(bytes: number, threads: number, reps: number): number;
  fmaPeak(threads: number, reps: number, kind: number): number;
  api(): unknown;
}

export const addon = loadAddon<DenseBinding>("@k3/dense", import.meta.url);
export const native = addon.binding;
