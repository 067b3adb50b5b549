/**
 * Weight tensors as they come from @k3/safetensors: a Float32Array (F32), a Uint16Array of bf16
 * bits (BF16), or `{ dtype, shape, data }` with the raw bytes. Matrices stay zero-copy views; the
 * small per-channel vectors are widened to f32 once.
 *
 * This is the one home of this code: @k3/mla imports it from here. The byte -> typed-array step
 * is @k3/safetensors' `typedView`; what is added here is the F32/BF16 restriction, the shape check
 * (size-1 axes ignored, so [1, 128] matches [128]) and errors of the caller's own type.
 */
import { bf16ToF32, gemmBf16, gemmF32, gemvBf16, gemvF32 } from "@k3/dense";
import { typedView } from "@k3/safetensors";
import { KdaError } from "./errors.js";

export type WeightTensor = Float32Array | Uint16Array | { dtype: string; shape?: readonly number[]; data: ArrayBufferView };

/** Makes the error thrown for a bad weight (message names the weight and what was expected). */
export type WeightErrorFactory = (message: string) => Error;

const kdaWeightError: WeightErrorFactory = (message) => new KdaError("weight", message);

interface Resolved {
  dtype: "F32" | "BF16";
  shape?: readonly number[];
  f32?: Float32Array;
  bf16?: Uint16Array;
  length: number;
}

function resolve(name: string, t: WeightTensor | undefined, fail: WeightErrorFactory): Resolved {
  if (t === undefined || t === null) throw fail(`missing weight '${name}'`);
  if (t instanceof Float32Array) return { dtype: "F32", f32: t, length: t.length };
  if (t instanceof Uint16Array) return { dtype: "BF16", bf16: t, length: t.length };
  if (typeof t !== "object" || !ArrayBuffer.isView(t.data)) throw fail(`weight '${name}' must be a Float32Array, a Uint16Array of bf16 bits, or { dtype, shape, data }`);
  if (t.dtype !== "F32" && t.dtype !== "BF16") throw fail(`weight '${name}' has dtype ${t.dtype}; expected F32 or BF16`);
  const d = t.data;
  const bytes = new Uint8Array(d.buffer, d.byteOffset, d.byteLength);
  try {
    if (t.dtype === "F32") {
      const f32 = typedView(bytes, "F32", { tensor: name });
      return { dtype: "F32", shape: t.shape, f32, length: f32.length };
    }
    const bf16 = typedView(bytes, "BF16", { tensor: name });
    return { dtype: "BF16", shape: t.shape, bf16, length: bf16.length };
  } catch (e) {
    throw fail(`weight '${name}' (${t.dtype}): ${(e as Error).message}`);
  }
}

function checkShape(name: string, r: Resolved, expected: readonly number[], fail: WeightErrorFactory): void {
  const count = expected.reduce((a, b) => a * b, 1);
  if (r.shape) {
    const squeezed = r.shape.filter((n) => n !== 1);
    const want = expected.filter((n) => n !== 1);
    if (squeezed.length !== want.length || squeezed.some((n, i) => n !== want[i])) throw fail(`weight '${name}' has shape [${r.shape.join(", ")}], expected [${expected.join(", ")}]`);
  }
  if (r.length !== count) throw fail(`weight '${name}' has ${r.length} values, expected ${count} ([${expected.join(", ")}])`);
}

/** A small vector or kernel, widened to f32 (copied) after its shape is checked. */
export function vectorF32(name: string, t: WeightTensor | undefined, expected: readonly number[], fail: WeightErrorFactory = kdaWeightError): Float32Array {
  const r = resolve(name, t, fail);
  checkShape(name, r, expected, fail);
  return r.f32 ? r.f32.slice() : bf16ToF32(r.bf16!);
}

/** A vector of unknown length (A_log): widened to f32. */
export function anyVectorF32(name: string, t: WeightTensor | undefined, fail: WeightErrorFactory = kdaWeightError): { values: Float32Array; shape?: readonly number[] } {
  const r = resolve(name, t, fail);
  return { values: r.f32 ? r.f32.slice() : bf16ToF32(r.bf16!), shape: r.shape };
}

/** The row count of a [rows, cols] matrix given its column count (for ranks read from the weights). */
export function rowsOf(name: string, t: WeightTensor | undefined, cols: number, fail: WeightErrorFactory = kdaWeightError): number {
  const r = resolve(name, t, fail);
  if (r.shape && r.shape.length === 2) return r.shape[0];
  if (r.length % cols !== 0) throw fail(`weight '${name}' has ${r.length} values, not a multiple of its ${cols} columns`);
  return r.length / cols;
}

/** y = W x for a [rows, cols] matrix (f32 or bf16, row stride ld), one token (gemv) or T tokens (batched gemm). */
export class Linear {
  readonly rows: number;
  readonly cols: number;
  readonly ld: number;
  readonly dtype: "F32" | "BF16";
  /** The raw weights (Float32Array, or Uint16Array of bf16 bits), row-major with stride ld. */
  readonly raw: Float32Array | Uint16Array;

  /** Checks the shape of `t` against [rows, cols]; bad weights throw `fail(message)` (a KdaError by default). */
  constructor(name: string, t: WeightTensor | undefined, rows: number, cols: number, fail: WeightErrorFactory = kdaWeightError) {
    const r = resolve(name, t, fail);
    checkShape(name, r, [rows, cols], fail);
    this.rows = rows;
    this.cols = cols;
    this.ld = cols;
    this.dtype = r.dtype;
    this.raw = (r.f32 ?? r.bf16)!;
  }

  /** A [rows, cols] window starting at `offset` elements of `raw`, row stride `ld` (no copy). */
  static window(raw: Float32Array | Uint16Array, offset: number, rows: number, cols: number, ld: number): Linear {
    const l = Object.create(Linear.prototype) as { -readonly [K in keyof Linear]: Linear[K] };
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

  /** Y [T][rows] = X [T][cols] W^T; Y[t] is bit-identical to a one-token call on X[t]. */
  apply(X: Float32Array, T: number, out?: Float32Array): Float32Array {
    const Y: Float32Array = out ?? new Float32Array(T * this.rows);
    const shape = { rows: this.rows, cols: this.cols, ld: this.ld };
    if (this.raw instanceof Float32Array) {
      if (T === 1) gemvF32(this.raw, X, Y, shape);
      else gemmF32(this.raw, X, Y, { ...shape, batch: T });
    } else if (T === 1) gemvBf16(this.raw, X, Y, shape);
    else gemmBf16(this.raw, X, Y, { ...shape, batch: T });
    return Y;
  }
}
