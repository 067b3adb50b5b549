/**
 * (Same helper as @k3/kda's weights.ts; a shared home would be a small @k3/weights package.)
 * Weight tensors as they come from @k3/safetensors: a Float32Array (F32), a Uint16Array of bf16
 * bits (BF16), or `{ dtype, shape, data }` with the raw bytes. Matrices stay zero-copy views; the
 * small per-channel vectors are widened to f32 once.
 */
import { bf16ToF32, gemmBf16, gemmF32, gemvBf16, gemvF32 } from "@k3/dense";
import { MlaError } from "./errors.js";

export type WeightTensor = Float32Array | Uint16Array | { dtype: string; shape?: readonly number[]; data: ArrayBufferView };

interface Resolved {
  dtype: "F32" | "BF16";
  shape?: readonly number[];
  f32?: Float32Array;
  bf16?: Uint16Array;
  length: number;
}

function resolve(name: string, t: WeightTensor | undefined): Resolved {
  if (t === undefined || t === null) throw new MlaError("weight", `missing weight '${name}'`);
  if (t instanceof Float32Array) return { dtype: "F32", f32: t, length: t.length };
  if (t instanceof Uint16Array) return { dtype: "BF16", bf16: t, length: t.length };
  if (typeof t !== "object" || !ArrayBuffer.isView(t.data))
    throw new MlaError("weight", `weight '${name}' must be a Float32Array, a Uint16Array of bf16 bits, or { dtype, shape, data }`);
  const d = t.data;
  if (t.dtype === "F32") {
    if (d.byteLength % 4 !== 0 || d.byteOffset % 4 !== 0) throw new MlaError("weight", `weight '${name}' (F32): ${d.byteLength} bytes at offset ${d.byteOffset} is not 4-byte aligned`);
    return { dtype: "F32", shape: t.shape, f32: new Float32Array(d.buffer, d.byteOffset, d.byteLength / 4), length: d.byteLength / 4 };
  }
  if (t.dtype === "BF16") {
    if (d.byteLength % 2 !== 0 || d.byteOffset % 2 !== 0) throw new MlaError("weight", `weight '${name}' (BF16): ${d.byteLength} bytes at offset ${d.byteOffset} is not 2-byte aligned`);
    return { dtype: "BF16", shape: t.shape, bf16: new Uint16Array(d.buffer, d.byteOffset, d.byteLength / 2), length: d.byteLength / 2 };
  }
  throw new MlaError("weight", `weight '${name}' has dtype ${t.dtype}; expected F32 or BF16`);
}

function checkShape(name: string, r: Resolved, expected: readonly number[]): void {
  const count = expected.reduce((a, b) => a * b, 1);
  if (r.shape) {
    const squeezed = r.shape.filter((n) => n !== 1);
    const want = expected.filter((n) => n !== 1);
    if (squeezed.length !== want.length || squeezed.some((n, i) => n !== want[i]))
      throw new MlaError("weight", `weight '${name}' has shape [${r.shape.join(", ")}], expected [${expected.join(", ")}]`);
  }
  if (r.length !== count) throw new MlaError("weight", `weight '${name}' has ${r.length} values, expected ${count} ([${expected.join(", ")}])`);
}

/** A small vector or kernel, widened to f32 (copied) after its shape is checked. */
export function vectorF32(name: string, t: WeightTensor | undefined, expected: readonly number[]): Float32Array {
  const r = resolve(name, t);
  checkShape(name, r, expected);
  return r.f32 ? r.f32.slice() : bf16ToF32(r.bf16!);
}

/** A vector of unknown length (A_log): widened to f32. */
export function anyVectorF32(name: string, t: WeightTensor | undefined): { values: Float32Array; shape?: readonly number[] } {
  const r = resolve(name, t);
  return { values: r.f32 ? r.f32.slice() : bf16ToF32(r.bf16!), shape: r.shape };
}

/** The row count of a [rows, cols] matrix given its column count (for ranks read from the weights). */
export function rowsOf(name: string, t: WeightTensor | undefined, cols: number): number {
  const r = resolve(name, t);
  if (r.shape && r.shape.length === 2) return r.shape[0];
  if (r.length % cols !== 0) throw new MlaError("weight", `weight '${name}' has ${r.length} values, not a multiple of its ${cols} columns`);
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

  constructor(name: string, t: WeightTensor | undefined, rows: number, cols: number) {
    const r = resolve(name, t);
    checkShape(name, r, [rows, cols]);
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
