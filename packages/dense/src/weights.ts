/**
 * Weight views: the one home of the F32/BF16 weight types every k3 package multiplies with.
 *
 * A weight comes as a Float32Array (F32), a Uint16Array of bf16 bits (BF16), or `{ dtype, shape,
 * data }` with the raw bytes of a checkpoint tensor. Matrices stay zero-copy views when their bytes
 * are aligned for the element type (a misaligned tensor is copied once); small per-channel vectors
 * are widened to f32. Shapes are checked with size-1 axes ignored ([1, 128] matches [128]); a bad
 * weight throws `fail(message)`, so each package keeps its own error type.
 */
import { native } from "./native.js";

export type WeightDtype = "F32" | "BF16";

export type WeightTensor = Float32Array | Uint16Array | { dtype: string; shape?: readonly number[]; data: ArrayBufferView };

/** Makes the error thrown for a bad weight (the message names the weight and what was expected). */
export type WeightErrorFactory = (message: string) => Error;

const denseWeightError: WeightErrorFactory = (message) => new Error(`@k3/dense: ${message}`);

/**
 * bf16 bits -> f32 (exact: the bits become the high half of each f32). `bits` is a Uint16Array or
 * any view of the raw little-endian bits (a tensor's Uint8Array, at any byte offset). Writes into
 * `out` (at least as long as the bits) when given, else into a new array; returns the f32 values.
 */
export function bf16ToF32(bits: Uint16Array | ArrayBufferView, out?: Float32Array): Float32Array {
  const b = bf16Bits(bits);
  const dst = out ? out.subarray(0, b.length) : new Float32Array(b.length);
  const wide = new Uint32Array(dst.buffer, dst.byteOffset, b.length);
  for (let i = 0; i < b.length; i++) wide[i] = b[i] << 16;
  return dst;
}

/** The bf16 bits of a view as a Uint16Array (a copy only when the view starts at an odd byte). */
function bf16Bits(v: Uint16Array | ArrayBufferView): Uint16Array {
  if (v instanceof Uint16Array) return v;
  if (v.byteLength % 2 !== 0) throw new RangeError(`bf16ToF32: ${v.byteLength} bytes are not a whole number of bf16 values`);
  const bytes = new Uint8Array(v.buffer, v.byteOffset, v.byteLength);
  const at = bytes.byteOffset % 2 === 0 ? bytes : bytes.slice();
  return new Uint16Array(at.buffer, at.byteOffset, at.byteLength / 2);
}

/** A weight resolved to its typed values (zero-copy when aligned). */
interface Resolved {
  dtype: WeightDtype;
  shape?: readonly number[];
  values: Float32Array | Uint16Array;
}

function resolve(name: string, t: WeightTensor | undefined, fail: WeightErrorFactory): Resolved {
  if (t === undefined || t === null) throw fail(`missing weight '${name}'`);
  if (t instanceof Float32Array) return { dtype: "F32", values: t };
  if (t instanceof Uint16Array) return { dtype: "BF16", values: t };
  if (typeof t !== "object" || !ArrayBuffer.isView(t.data)) throw fail(`weight '${name}' must be a Float32Array, a Uint16Array of bf16 bits, or { dtype, shape, data }`);
  if (t.dtype !== "F32" && t.dtype !== "BF16") throw fail(`weight '${name}' has dtype ${t.dtype}; expected F32 or BF16`);
  const width = t.dtype === "F32" ? 4 : 2;
  const d = t.data;
  if (d.byteLength % width !== 0) throw fail(`weight '${name}' (${t.dtype}): ${d.byteLength} bytes are not a whole number of ${width}-byte elements`);
  // A tensor at a misaligned offset of its buffer (a shard's data section can be) is copied once.
  const bytes = d.byteOffset % width === 0 ? new Uint8Array(d.buffer, d.byteOffset, d.byteLength) : new Uint8Array(d.buffer, d.byteOffset, d.byteLength).slice();
  const values = t.dtype === "F32" ? new Float32Array(bytes.buffer, bytes.byteOffset, bytes.byteLength / 4) : new Uint16Array(bytes.buffer, bytes.byteOffset, bytes.byteLength / 2);
  return { dtype: t.dtype, shape: t.shape, values };
}

function checkShape(name: string, r: Resolved, expected: readonly number[], fail: WeightErrorFactory): void {
  const count = expected.reduce((a, b) => a * b, 1);
  if (r.shape) {
    const squeezed = r.shape.filter((n) => n !== 1);
    const want = expected.filter((n) => n !== 1);
    if (squeezed.length !== want.length || squeezed.some((n, i) => n !== want[i])) throw fail(`weight '${name}' has shape [${r.shape.join(", ")}], expected [${expected.join(", ")}]`);
  }
  if (r.values.length !== count) throw fail(`weight '${name}' has ${r.values.length} values, expected ${count} ([${expected.join(", ")}])`);
}

function widened(r: Resolved): Float32Array {
  return r.values instanceof Float32Array ? r.values.slice() : bf16ToF32(r.values);
}

/** A small vector or kernel, widened to f32 (copied) after its shape is checked. */
export function vectorF32(name: string, t: WeightTensor | undefined, expected: readonly number[], fail: WeightErrorFactory = denseWeightError): Float32Array {
  const r = resolve(name, t, fail);
  checkShape(name, r, expected, fail);
  return widened(r);
}

/** A vector of unknown length (KDA's A_log): widened to f32. */
export function anyVectorF32(name: string, t: WeightTensor | undefined, fail: WeightErrorFactory = denseWeightError): { values: Float32Array; shape?: readonly number[] } {
  const r = resolve(name, t, fail);
  return { values: widened(r), shape: r.shape };
}

/** The row count of a [rows, cols] matrix given its column count (for ranks read from the weights). */
export function rowsOf(name: string, t: WeightTensor | undefined, cols: number, fail: WeightErrorFactory = denseWeightError): number {
  const r = resolve(name, t, fail);
  if (r.shape && r.shape.length === 2) return r.shape[0];
  if (r.values.length % cols !== 0) throw fail(`weight '${name}' has ${r.values.length} values, not a multiple of its ${cols} columns`);
  return r.values.length / cols;
}

/**
 * y = W x for a [rows, cols] matrix (f32 or bf16, row stride ld): one token runs the GEMV kernels,
 * T tokens the batched GEMM (each weight byte read once for all T); Y[t] is bit-identical either way.
 */
export class Linear {
  /** The weight's name (error messages). */
  readonly name: string;
  readonly rows: number;
  readonly cols: number;
  readonly ld: number;
  readonly dtype: WeightDtype;
  /** The raw weights (Float32Array, or Uint16Array of bf16 bits), row-major with stride ld. */
  readonly raw: Float32Array | Uint16Array;

  /** Checks the shape of `t` against [rows, cols]; bad weights throw `fail(message)`. */
  constructor(name: string, t: WeightTensor | undefined, rows: number, cols: number, fail: WeightErrorFactory = denseWeightError) {
    const r = resolve(name, t, fail);
    checkShape(name, r, [rows, cols], fail);
    this.name = name;
    this.rows = rows;
    this.cols = cols;
    this.ld = cols;
    this.dtype = r.dtype;
    this.raw = r.values;
  }

  /** A [rows, cols] window starting at `offset` elements of `raw`, row stride `ld` (no copy). */
  static window(raw: Float32Array | Uint16Array, offset: number, rows: number, cols: number, ld: number, name = "window"): Linear {
    const l = Object.create(Linear.prototype) as { -readonly [K in keyof Linear]: Linear[K] };
    l.name = name;
    l.rows = rows;
    l.cols = cols;
    l.ld = ld;
    l.dtype = raw instanceof Float32Array ? "F32" : "BF16";
    l.raw = raw.subarray(offset, offset + (rows - 1) * ld + cols);
    return l as Linear;
  }

  /** Bytes of weights read per call. */
  get bytes(): number {
    return this.rows * this.cols * (this.dtype === "F32" ? 4 : 2);
  }

  /** Y [T][rows] = X [T][cols] W^T, into `out` when given (at least T x rows). */
  apply(X: Float32Array, T: number, out?: Float32Array): Float32Array {
    const Y: Float32Array = out ?? new Float32Array(T * this.rows);
    const { raw, rows, cols, ld } = this;
    if (raw instanceof Float32Array) {
      if (T === 1) native.gemvF32(raw, X, Y, rows, cols, ld);
      else native.gemmF32(raw, X, Y, rows, cols, T, ld);
    } else if (T === 1) native.gemvBf16(raw, X, Y, rows, cols, ld);
    else native.gemmBf16(raw, X, Y, rows, cols, T, ld);
    return Y;
  }
}
