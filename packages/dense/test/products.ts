// Shared by the gemm-acc and dot-rows tests: an fmaf independent of the native code (for their exact
// references), the SIMD level / thread switch, and their shapes and operands.
import * as dense from "../src/index.js";
import { f32ToBf16 } from "../src/index.js";
// @k3/test-utils depends on @k3/dense (a cycle in turbo's graph), so its dependency-free modules are imported by path.
import { uniform } from "../../test-utils/src/random.js";
import { settingsSetter } from "../../test-utils/src/settings.js";

/** Runs the next kernel calls at this SIMD level and thread count. */
export const at = settingsSetter(dense);

// ---------------------------------------------------------------- an independent fmaf

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

/** The float32 next to r (a float32, not 0) in the direction of `toward`. */
function nextF32(r: number, toward: number): number {
  f32[0] = r;
  const away = toward > r === r > 0; // moving away from zero grows the magnitude bits
  u32[0] = away ? u32[0] + 1 : u32[0] - 1;
  return f32[0];
}

/**
 * fmaf(a, b, c) on float32 values, rounded once, from float64 arithmetic: a*b is exact in a double
 * (48 significant bits), p + c is rounded to a double s with error e (TwoSum), and s rounds to the
 * right float32 unless it sits exactly on a float32 tie, where e decides. Normal-range values only.
 */
export function fmaf(a: number, b: number, c: number): number {
  const p = a * b;
  const s = p + c;
  const bb = s - p;
  const e = p - (s - bb) + (c - bb);
  const r = Math.fround(s);
  if (e === 0 || r === s || r === 0) return r;
  const other = nextF32(r, s);
  if (s - r !== other - s) return r; // not a tie: s's float32 is the exact value's
  return e > 0 === other > r ? other : r;
}

// ---------------------------------------------------------------- shapes and operands

/** C [m x n] from A [m x k] and B, with every row stride explicit. */
export interface ProductCase {
  m: number;
  n: number;
  k: number;
  lda: number;
  ldb: number;
  ldc: number;
}

/**
 * The edge shapes, one with strides equal to the widths (16 x 64 x 64), then 40 random ones with m,
 * n, k in 1..70; every other stride wider than its row. B's rows hold `bWidth` values: n for
 * C += A B (B is k x n), k for C = A B^T (B is n x k).
 */
export function productCases(edge: Array<[number, number, number]>, bWidth: "n" | "k", seed: number): ProductCase[] {
  const out: ProductCase[] = [];
  for (const [m, n, k] of edge) out.push({ m, n, k, lda: k + 3, ldb: (bWidth === "n" ? n : k) + 5, ldc: n + 1 });
  out.push({ m: 16, n: 64, k: 64, lda: 64, ldb: 64, ldc: 64 });
  const r = uniform(40 * 6, 0, 1, seed);
  for (let t = 0; t < 40; t++) {
    const m = 1 + Math.floor(r[6 * t] * 70), n = 1 + Math.floor(r[6 * t + 1] * 70), k = 1 + Math.floor(r[6 * t + 2] * 70);
    const bw = bWidth === "n" ? n : k;
    out.push({ m, n, k, lda: k + 1 + Math.floor(r[6 * t + 3] * 9), ldb: bw + 1 + Math.floor(r[6 * t + 4] * 9), ldc: n + 1 + Math.floor(r[6 * t + 5] * 9) });
  }
  return out;
}

/** Random A, B (f32 and its bf16 bits) and C; C is longer than its last row and its gaps hold values that must survive. */
export function operands(c: ProductCase, bWidth: "n" | "k", seed: number) {
  const A = uniform((c.m - 1) * c.lda + c.k, -1, 1, seed);
  const Bf = bWidth === "n" ? uniform((c.k - 1) * c.ldb + c.n, -1, 1, seed + 1) : uniform((c.n - 1) * c.ldb + c.k, -1, 1, seed + 1);
  const B16 = f32ToBf16(Bf);
  const C0 = uniform(c.m * c.ldc + 3, -1, 1, seed + 2);
  return { A, Bf, B16, C0 };
}

export const label = (c: ProductCase) => `m=${c.m} n=${c.n} k=${c.k} lda=${c.lda} ldb=${c.ldb} ldc=${c.ldc}`;
