/**
 * The MXFP4 format in plain TypeScript: E2M1 element values, E8M0 scales, scale validation and the
 * quantiser. The hot kernels are native (see index.ts); this module is the readable definition.
 */
import { PackageError } from "@k3/native";

/** E2M1 code (0..15) -> value; code 8 is -0. */
export const E2M1_VALUES: readonly number[] = Object.freeze([
  0, 0.5, 1, 1.5, 2, 3, 4, 6, -0, -0.5, -1, -1.5, -2, -3, -4, -6,
]);

/** Elements per scale block (along the input dimension). */
export const BLOCK_SIZE = 32;

/** A matrix in the compressed-tensors (K3) layout; views may sit at any byte offset. */
export interface Mxfp4Matrix {
  /** [rows, cols/2]: byte k of a row holds element 2k in its low nibble, 2k+1 in its high nibble. */
  packed: Uint8Array;
  /** [rows, cols/32] E8M0 bytes: block b covers elements 32b..32b+31 of its row; value 2^(s-127). */
  scales: Uint8Array;
  rows: number;
  cols: number;
}

/** Thrown for any malformed MXFP4 input (bad shape, short buffer, 0xFF scale, non-finite value). */
export class Mxfp4Error extends PackageError {
  constructor(message: string, options?: { cause?: unknown }) {
    super("@k3/mxfp4", "input", message, options);
    this.name = "Mxfp4Error";
  }
}

/** 2^(s-127) for an E8M0 byte (exact in float64); throws for 0xFF. */
export function e8m0ToNumber(s: number): number {
  if (s === 0xff) throw new Mxfp4Error("E8M0 scale 0xFF is NaN in OCP MX v1.0 and is refused");
  return 2 ** (s - 127);
}

/** Checks the shape fields and buffer lengths of a matrix; `where` prefixes the message. */
export function checkMatrix(m: Mxfp4Matrix, where: string): void {
  if (!Number.isSafeInteger(m.rows) || m.rows < 0) throw new Mxfp4Error(`${where}: rows (${m.rows}) must be a non-negative integer`);
  if (!Number.isSafeInteger(m.cols) || m.cols < 0) throw new Mxfp4Error(`${where}: cols (${m.cols}) must be a non-negative integer`);
  if (m.cols % BLOCK_SIZE !== 0)
    throw new Mxfp4Error(`${where}: cols (${m.cols}) is not a multiple of 32 (the MXFP4 block size)`);
  if (!(m.packed instanceof Uint8Array) || !(m.scales instanceof Uint8Array))
    throw new Mxfp4Error(`${where}: packed and scales must be Uint8Array views`);
  const packedBytes = (m.rows * m.cols) / 2;
  const scaleBytes = (m.rows * m.cols) / BLOCK_SIZE;
  if (m.packed.length !== packedBytes)
    throw new Mxfp4Error(`${where}: packed has ${m.packed.length} bytes, expected rows x cols/2 = ${m.rows} x ${m.cols / 2} = ${packedBytes}`);
  if (m.scales.length !== scaleBytes)
    throw new Mxfp4Error(`${where}: scales has ${m.scales.length} bytes, expected rows x cols/32 = ${m.rows} x ${m.cols / 32} = ${scaleBytes}`);
}

/** Throws, naming the row and block, if any scale byte is 0xFF. */
export function validateScales(m: Mxfp4Matrix, name = "matrix"): void {
  checkMatrix(m, `validateScales(${name})`);
  const at = m.scales.indexOf(0xff);
  if (at >= 0) {
    const perRow = m.cols / BLOCK_SIZE;
    const row = Math.floor(at / perRow);
    const block = at % perRow;
    throw new Mxfp4Error(
      `${name}: scale 0xFF (NaN in OCP MX) at row ${row}, block ${block} (columns ${block * 32}..${block * 32 + 31}); refused`,
    );
  }
}

// ---------------------------------------------------------------- quantiser

/** Magnitude (already divided by the block scale) -> E2M1 code 0..7, nearest, ties to the even code, saturating at 6. */
function roundToE2M1(m: number): number {
  if (m <= 0.25) return 0;
  if (m < 0.75) return 1;
  if (m <= 1.25) return 2;
  if (m < 1.75) return 3;
  if (m <= 2.5) return 4;
  if (m < 3.5) return 5;
  if (m <= 5) return 6;
  return 7;
}

/** The smallest integer e with 6 * 2^e >= amax (so amax / 2^e lies in (3, 6]); 0 for amax = 0. */
export function blockExponent(amax: number): number {
  if (amax === 0) return 0;
  let e = Math.ceil(Math.log2(amax / 6));
  while (6 * 2 ** e < amax) e++;
  while (6 * 2 ** (e - 1) >= amax) e--;
  return e + 0; // never -0
}

/** Checks the arguments of a quantiser call (shared by the TS reference and the native quantiser). */
export function checkQuantizeShape(values: Float32Array, rows: number, cols: number): void {
  if (!Number.isSafeInteger(rows) || rows < 0 || !Number.isSafeInteger(cols) || cols < 0)
    throw new Mxfp4Error(`quantize: rows (${rows}) and cols (${cols}) must be non-negative integers`);
  if (cols % BLOCK_SIZE !== 0) throw new Mxfp4Error(`quantize: cols (${cols}) is not a multiple of 32 (the MXFP4 block size)`);
  if (!(values instanceof Float32Array)) throw new Mxfp4Error("quantize: values must be a Float32Array");
  if (values.length !== rows * cols)
    throw new Mxfp4Error(`quantize: values has ${values.length} elements, expected rows x cols = ${rows * cols}`);
}

/** The error for a non-finite input at flat index `at`. */
export function nonFiniteError(values: Float32Array, cols: number, at: number): Mxfp4Error {
  return new Mxfp4Error(`quantize: non-finite value ${values[at]} at row ${Math.floor(at / cols)}, column ${at % cols}`);
}

/**
 * The readable definition of the quantiser in TypeScript (index.ts `quantize` runs the same rules in
 * C, threaded, and is tested byte for byte against this). Quantises f32 values [rows, cols] to MXFP4 (the reference quantiser of the K3 fixtures):
 * per block of 32, s = clamp(127 + e, 0, 254) with e the smallest integer such that 6 * 2^e >= max|v|
 * (so the block maximum lands in (3, 6] and never clips unless s would exceed 254); each v / 2^(s-127)
 * is rounded to the nearest E2M1 value, ties to the even code, saturating at 6; the sign bit is the sign
 * of v (a small negative gives code 8, -0). Error bound per element: half the local E2M1 step times
 * 2^(s-127), i.e. at most 2^(s-127), and at most max|v| / 5 when s is not clamped (worst case v = 5 * 2^(s-127)).
 * Non-finite values are refused.
 */
export function quantizeReference(values: Float32Array, rows: number, cols: number): Mxfp4Matrix {
  checkQuantizeShape(values, rows, cols);
  const packed = new Uint8Array((rows * cols) / 2);
  const scales = new Uint8Array((rows * cols) / BLOCK_SIZE);
  const codes = new Uint8Array(BLOCK_SIZE);
  for (let blk = 0; blk < scales.length; blk++) {
    const base = blk * BLOCK_SIZE;
    let amax = 0;
    for (let i = 0; i < BLOCK_SIZE; i++) {
      const v = values[base + i];
      if (!Number.isFinite(v)) throw nonFiniteError(values, cols, base + i);
      const a = Math.abs(v);
      if (a > amax) amax = a;
    }
    const s = Math.min(254, Math.max(0, 127 + blockExponent(amax)));
    const inverse = 2 ** (127 - s); // exact: dividing by a power of two
    for (let i = 0; i < BLOCK_SIZE; i++) {
      const q = values[base + i] * inverse;
      codes[i] = roundToE2M1(Math.abs(q)) | (q < 0 ? 8 : 0);
    }
    scales[blk] = s;
    for (let j = 0; j < 16; j++) packed[blk * 16 + j] = codes[2 * j] | (codes[2 * j + 1] << 4);
  }
  return { packed, scales, rows, cols };
}
