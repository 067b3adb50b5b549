/**
 * A dense matrix as stored in a checkpoint (bf16 bits or f32), multiplied through @k3/dense only.
 */
import { gemmBf16, gemmF32, gemvBf16, gemvF32 } from "@k3/dense";
import { MoeStreamError } from "../errors.js";

export interface DenseMatrix {
  /** Row-major [rows, cols]: a Float32Array (F32) or the raw bytes/bits of BF16. */
  data: ArrayBufferView;
  dtype: "F32" | "BF16";
  rows: number;
  cols: number;
  /** Used in error messages. */
  name?: string;
}

/** Builds a DenseMatrix from raw tensor bytes, checking the size. */
export function denseMatrix(bytes: Uint8Array, dtype: string, shape: number[], name = "matrix"): DenseMatrix {
  if (shape.length !== 2) throw new MoeStreamError(`${name}: expected a 2-d weight, got shape [${shape}]`);
  const [rows, cols] = shape;
  const width = dtype === "F32" ? 4 : dtype === "BF16" ? 2 : 0;
  if (!width) throw new MoeStreamError(`${name}: dtype ${dtype} is not F32 or BF16`);
  if (bytes.byteLength !== rows * cols * width)
    throw new MoeStreamError(`${name}: ${bytes.byteLength} bytes for [${rows}, ${cols}] ${dtype} (expected ${rows * cols * width})`);
  const data = dtype === "F32" ? asF32(bytes) : bytes;
  return { data, dtype: dtype as "F32" | "BF16", rows, cols, name };
}

/** A 1-d f32 vector from F32 or BF16 bytes (copies only when it must). */
export function denseVector(bytes: Uint8Array, dtype: string, length: number, name = "vector"): Float32Array {
  if (dtype === "F32" && bytes.byteLength === length * 4) return asF32(bytes);
  if (dtype === "BF16" && bytes.byteLength === length * 2) {
    const out = new Float32Array(length);
    const wide = new Uint32Array(out.buffer);
    for (let i = 0; i < length; i++) wide[i] = (bytes[2 * i] | (bytes[2 * i + 1] << 8)) << 16;
    return out;
  }
  throw new MoeStreamError(`${name}: expected ${length} values of F32 or BF16, got ${bytes.byteLength} bytes of ${dtype}`);
}

function asF32(bytes: Uint8Array): Float32Array {
  if (bytes.byteOffset % 4 === 0) return new Float32Array(bytes.buffer, bytes.byteOffset, bytes.byteLength / 4);
  return new Float32Array(bytes.slice().buffer);
}

/**
 * Y[b] = W X[b] for b < batch (X [batch, cols], Y [batch, rows]). One row runs the GEMV kernels
 * (decode; @k3/dense's GEMM gives the same bits per row but its batch-1 path is slower).
 */
export function matmul(w: DenseMatrix, X: Float32Array, batch: number, Y: Float32Array): Float32Array {
  if (batch === 1) {
    const x = X.subarray(0, w.cols);
    const y = Y.subarray(0, w.rows);
    if (w.dtype === "F32") gemvF32(w.data as Float32Array, x, y, w);
    else gemvBf16(w.data, x, y, w);
    return Y;
  }
  const shape = { rows: w.rows, cols: w.cols, batch };
  if (w.dtype === "F32") return gemmF32(w.data as Float32Array, X, Y, shape);
  return gemmBf16(w.data, X, Y, shape);
}
