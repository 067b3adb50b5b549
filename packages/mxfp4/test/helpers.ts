/** MXFP4 test helpers: random matrices and a float64/f32 scalar reference (the generic helpers are in @k3/test-utils). */
import { randomBytes } from "@k3/test-utils";
import { E2M1_VALUES, type Mxfp4Matrix } from "../src/index.js";

/** A random matrix with scales in [lo, hi]. */
export function randomMatrix(rows: number, cols: number, seed: number, lo = 118, hi = 130): Mxfp4Matrix {
  const scales = randomBytes((rows * cols) / 32, seed + 1000).map((v) => lo + (v % (hi - lo + 1)));
  return { packed: randomBytes((rows * cols) / 2, seed), scales, rows, cols };
}

/** Element (r, k) decoded in float64 straight from the spec (for an independent check). */
export function elementF64(m: Mxfp4Matrix, r: number, k: number): number {
  const byte = m.packed[r * (m.cols / 2) + (k >> 1)];
  const code = k & 1 ? byte >> 4 : byte & 15;
  return E2M1_VALUES[code] * 2 ** (m.scales[r * (m.cols / 32) + (k >> 5)] - 127);
}

/**
 * fmaf(a, b, c) in JS for a*b exact in float64 (true here: E2M1 weights have 2 significant bits, so
 * w*x needs at most 26). TwoSum gives the exact p + c = s + err; fround(s) is the correctly rounded
 * f32 unless s sits exactly halfway between two f32 values, where err decides the direction.
 */
export function fmaf(a: number, b: number, c: number): number {
  const p = a * b;
  const s = p + c;
  if (!Number.isFinite(s)) return Math.fround(s);
  const bb = s - p;
  const err = p - (s - bb) + (c - bb);
  const f = Math.fround(s);
  if (err === 0 || f === s) return f;
  const g = Math.fround(2 * s - f);
  if (g === f || (f + g) / 2 !== s) return f; // not a midpoint
  return err > 0 ? Math.max(f, g) : Math.min(f, g);
}

export function referenceMatvec(m: Mxfp4Matrix, x: Float32Array): Float32Array {
  const y = new Float32Array(m.rows);
  for (let r = 0; r < m.rows; r++) {
    const lane = new Array<number>(32).fill(0);
    for (let k = 0; k < m.cols; k++) {
      const w = Math.fround(elementF64(m, r, k)); // exact (or +-inf past FLT_MAX)
      // lane i reads byte i of the block: element 2i (even) or 2i + 1 (odd)
      const i = (k & 31) >> 1;
      const l = k % 2 === 0 ? i : 16 + i;
      lane[l] = fmaf(w, x[k], lane[l]);
    }
    for (let h = 16; h >= 1; h >>= 1) for (let i = 0; i < h; i++) lane[i] = Math.fround(lane[i] + lane[i + h]);
    y[r] = lane[0];
  }
  return y;
}
