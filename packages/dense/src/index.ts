/**
 * @k3/dense: the kernels every k3 package shares.
 *
 * One thread pool sized to the machine (`K3_THREADS` overrides it) and one SIMD level chosen at
 * load (`K3_SIMD=scalar|avx2|avx512` forces one). Every kernel gives bit-identical results at
 * every SIMD level and thread count: threads split outputs, reductions have one fixed order.
 */
import { addon, native, type SimdLevel } from "./native.js";

export type { SimdLevel };

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

/** bf16 bits -> f32 (exact). */
export function bf16ToF32(bits: Uint16Array): Float32Array {
  const out = new Float32Array(bits.length);
  const wide = new Uint32Array(out.buffer);
  for (let i = 0; i < bits.length; i++) wide[i] = bits[i] << 16;
  return out;
}

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
