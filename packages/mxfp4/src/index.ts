/**
 * @k3/mxfp4: MXFP4 weights (FP4 E2M1 elements, one E8M0 scale per 32 along the input dimension)
 * in the compressed-tensors layout K3 ships, with packed kernels that never dequantize a matrix.
 *
 * fp32 path, one fixed order at every SIMD level, thread count and batch size (see
 * native/include/k3_mxfp4.h): each weight is E2M1[code] * 2^(s-127), exact in f32; 32 lanes per
 * output (lane j takes the even elements 32b+2j, lane 16+j the odd ones 32b+2j+1) accumulate with
 * fmaf block after block, then a fixed tree (h = 16, 8, 4, 2, 1). So matvec equals "dequantize, then
 * that gemv" bit for bit, and matmul's Y[b] equals matvec(X[b]) bit for bit.
 *
 * The kernels run on @k3/dense's thread pool and SIMD level (setSimdLevel / setThreadCount there).
 */
import { bf16ToF32 } from "@k3/dense";
import { native } from "./native.js";
import { BLOCK_SIZE, Mxfp4Error, checkMatrix, checkQuantizeShape, nonFiniteError, validateScales, type Mxfp4Matrix } from "./codec.js";

export {
  BLOCK_SIZE,
  E2M1_VALUES,
  Mxfp4Error,
  blockExponent,
  e8m0ToNumber,
  quantizeReference,
  validateScales,
  type Mxfp4Matrix,
} from "./codec.js";
export { GGML_BLOCK_BYTES, fromGgml, fromGptOss, toGgml, toGptOss, type GptOssTensors } from "./layouts.js";

// ---------------------------------------------------------------- validated-scale cache
//
// A 0xFF scale is refused before any kernel runs. Scanning the scales costs ~2-8% of a matvec, so
// each (buffer, offset, length) range is scanned once and remembered. Bytes loaded later into the
// same range (an expert arena) are still caught: a 0xFF decodes to NaN in every kernel, the addon
// reports a NaN output, and `afterKernel` rescans the scales and throws (the output is then garbage).

const validated = new WeakMap<ArrayBufferLike, Set<string>>();

function ensureValid(m: Mxfp4Matrix, where: string): void {
  checkMatrix(m, where);
  const key = `${m.scales.byteOffset}:${m.scales.byteLength}`;
  let seen = validated.get(m.scales.buffer);
  if (seen?.has(key)) return;
  validateScales(m, where);
  if (!seen) validated.set(m.scales.buffer, (seen = new Set()));
  seen.add(key);
}

/** After a kernel: a NaN output may come from a 0xFF written after validation; rescan and throw. */
function afterKernel(m: Mxfp4Matrix, where: string, sawNaN: boolean): void {
  if (!sawNaN) return;
  validated.get(m.scales.buffer)?.delete(`${m.scales.byteOffset}:${m.scales.byteLength}`);
  validateScales(m, where); // throws on 0xFF; otherwise the NaN came from the activations
  validated.get(m.scales.buffer)?.add(`${m.scales.byteOffset}:${m.scales.byteLength}`);
}

// ---------------------------------------------------------------- kernels

/** y = W x on packed data (fp32 path). x has cols values, y has rows. */
export function matvec(m: Mxfp4Matrix, x: Float32Array, y: Float32Array): Float32Array {
  ensureValid(m, "matvec");
  afterKernel(m, "matvec", native.matmul(m.packed, m.scales, m.rows, m.cols, x, y, 1));
  return y;
}

/**
 * Y[b] = W X[b] for b < batch (prefill): X is [batch x cols], Y is [batch x rows], row-major. Each
 * weight byte is read from memory once for the whole batch; Y[b] is bit-identical to matvec(X[b]).
 */
export function matmul(m: Mxfp4Matrix, X: Float32Array, Y: Float32Array, batch: number): Float32Array {
  ensureValid(m, "matmul");
  afterKernel(m, "matmul", native.matmul(m.packed, m.scales, m.rows, m.cols, X, Y, batch));
  return Y;
}

/**
 * The opt-in int8-activation path (AVX-512 VNNI; other levels run its scalar reference, same bits):
 * activations are quantised per 32-block to int8 with d = max|x| / 127, weights use ggml's doubled
 * integer table, block dot products are exact int32 and are scaled by d * 2^(s-128). Faster, but it
 * adds the activation rounding error (measured in the README; about 1e-3 of sum|w x|). Not bit-equal
 * to matvec; bit-identical across SIMD levels, threads and batch sizes.
 */
export function matvecInt8(m: Mxfp4Matrix, x: Float32Array, y: Float32Array): Float32Array {
  ensureValid(m, "matvecInt8");
  afterKernel(m, "matvecInt8", native.matmulInt8(m.packed, m.scales, m.rows, m.cols, x, y, 1));
  return y;
}

/** Batched int8-activation path; Y[b] is bit-identical to matvecInt8(X[b]). */
export function matmulInt8(m: Mxfp4Matrix, X: Float32Array, Y: Float32Array, batch: number): Float32Array {
  ensureValid(m, "matmulInt8");
  afterKernel(m, "matmulInt8", native.matmulInt8(m.packed, m.scales, m.rows, m.cols, X, Y, batch));
  return Y;
}

/** Whether this CPU has AVX-512 VNNI (the int8 path's fast kernel). */
export function hasVnni(): boolean {
  return native.hasVnni();
}

/**
 * Activations reordered for the kernels (per 32-block: 16 even then 16 odd elements). Split once and
 * pass to matmulSplit for every matrix that reads the same input (all experts' w1 and w3).
 */
export function splitActivations(X: Float32Array, cols: number, batch = 1, out = new Float32Array(cols * batch)): Float32Array {
  native.splitActivations(X, out, cols, batch);
  return out;
}

/** As matmul, from splitActivations output; bit-identical to matmul. */
export function matmulSplit(m: Mxfp4Matrix, XS: Float32Array, Y: Float32Array, batch = 1): Float32Array {
  ensureValid(m, "matmulSplit");
  afterKernel(m, "matmulSplit", native.matmulSplit(m.packed, m.scales, m.rows, m.cols, XS, Y, batch));
  return Y;
}

/** W as f32 [rows x cols] (exactly the weights the fp32 path multiplies). For tests and tools. */
export function dequantize(m: Mxfp4Matrix): Float32Array {
  ensureValid(m, "dequantize");
  const out = new Float32Array(m.rows * m.cols);
  native.dequantize(m.packed, m.scales, m.rows, m.cols, out);
  return out;
}

/**
 * Quantises f32 values [rows x cols] to MXFP4, in C on the k3 pool (byte-identical to the TypeScript
 * definition `quantizeReference`, whose comment gives the rules: shared exponent from the block max,
 * round to nearest E2M1 with ties to the even code). Non-finite values are refused by position.
 */
export function quantize(values: Float32Array, rows: number, cols: number): Mxfp4Matrix {
  checkQuantizeShape(values, rows, cols);
  const packed = new Uint8Array((rows * cols) / 2);
  const scales = new Uint8Array((rows * cols) / BLOCK_SIZE);
  if (rows * cols > 0) {
    const bad = native.quantize(values, rows, cols, packed, scales);
    if (bad >= 0) throw nonFiniteError(values, cols, bad);
  }
  return { packed, scales, rows, cols };
}

/** quantize under its explicit name. */
export const quantizeF32 = quantize;

/** As quantize for bf16 input (raw bits, e.g. a Kimi-Linear-48B checkpoint tensor). */
export function quantizeBf16(bits: Uint16Array, rows: number, cols: number): Mxfp4Matrix {
  if (!(bits instanceof Uint16Array)) throw new Mxfp4Error("quantizeBf16: bits must be a Uint16Array of bf16 values");
  return quantize(bf16ToF32(bits), rows, cols);
}

/**
 * The C function table (`k3_mxfp4_api` in native/include/k3_mxfp4.h) as an N-API external, for
 * addons (e.g. @k3/moe-stream) that run experts without a JS round trip. They must validate scales
 * (find_bad_scale) when they load bytes.
 */
export function nativeApi(): unknown {
  return native.api();
}

/** Bytes of a matrix's packed + scale data (what a matvec streams). */
export function matrixBytes(m: Pick<Mxfp4Matrix, "rows" | "cols">): number {
  return (m.rows * m.cols) / 2 + (m.rows * m.cols) / BLOCK_SIZE;
}

