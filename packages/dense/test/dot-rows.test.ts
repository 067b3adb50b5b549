import { describe, expect, it } from "vitest";
import { bf16ToF32, dotRowsBf16, dotRowsF32, gemmF32, gemvBf16, gemvF32 } from "../src/index.js";
import * as dense from "../src/index.js";
// @k3/test-utils depends on @k3/dense (a cycle in turbo's graph), so these dependency-free modules are imported by path.
import { bytesEqual } from "../../test-utils/src/compare.js";
import { uniform } from "../../test-utils/src/random.js";
import { testedSimdLevels } from "../../test-utils/src/settings.js";
import { at, fmaf, label, operands as productOperands, productCases, type ProductCase } from "./products.js";

const available = testedSimdLevels(dense);

// ---------------------------------------------------------------- shapes

type Case = ProductCase;

/**
 * Every tile and remainder of the SIMD variants (m and n around multiples of 2 and 4, k around multiples of 8 and 16),
 * MLA's 576 / 192 / 512 widths, and m >= 2 past one K block of the blocked kernel (1024) with its panel (m >= 9).
 */
const edgeShapes: Array<[number, number, number]> = [
  [1, 1, 1], [1, 70, 1], [70, 1, 70], [4, 16, 16], [5, 17, 65], [3, 64, 64], [4, 33, 7], [8, 48, 129], [13, 70, 70],
  [2, 7, 9], [1, 5, 8], [3, 6, 24], [1, 64, 576], [12, 64, 576], [1, 61, 192], [2, 128, 512],
  [9, 37, 1040], [20, 19, 2071], [2, 5, 3000],
  // m past the 64-row pieces a kernel call takes (gemm.c BATCH_PIECE)
  [130, 9, 1100], [65, 6, 40],
];
const cases = () => productCases(edgeShapes, "k", 1977);
const operands = (c: Case, seed: number) => productOperands(c, "k", seed);

/** The documented order, from an fmaf independent of the native code: 16 lanes, then the tree. */
function reference(c: Case, A: Float32Array, B: Float32Array, C0: Float32Array): Float32Array {
  const C = C0.slice();
  for (let i = 0; i < c.m; i++)
    for (let j = 0; j < c.n; j++) {
      const lane = new Float32Array(16);
      for (let p = 0; p < c.k; p++) lane[p % 16] = fmaf(A[i * c.lda + p], B[j * c.ldb + p], lane[p % 16]);
      for (let h = 8; h >= 1; h /= 2) for (let t = 0; t < h; t++) lane[t] = lane[t] + lane[t + h];
      C[i * c.ldc + j] = lane[0];
    }
  return C;
}

describe("dotRowsF32 / dotRowsBf16", () => {
  const all = cases();

  it("scalar equals the documented 16-lane order, f32 and bf16 B", () => {
    at("scalar", 1);
    for (const [ci, c] of all.entries()) {
      const { A, Bf, B16, C0 } = operands(c, 100 + ci);
      expect(bytesEqual(dotRowsF32(A, Bf, C0.slice(), c), reference(c, A, Bf, C0)), `f32 ${label(c)}`).toBe(true);
      expect(bytesEqual(dotRowsBf16(A, B16, C0.slice(), c), reference(c, A, bf16ToF32(B16), C0)), `bf16 ${label(c)}`).toBe(true);
    }
  });

  it("is bit-identical to scalar at every SIMD level and thread count (m, n, k in 1..70 and MLA widths, strides != widths)", () => {
    let compared = 0;
    for (const [ci, c] of all.entries()) {
      const { A, Bf, B16, C0 } = operands(c, 300 + ci);
      at("scalar", 1);
      const want = dotRowsF32(A, Bf, C0.slice(), c);
      const want16 = dotRowsBf16(A, B16, C0.slice(), c);
      for (const level of available)
        for (const threads of [1, 3]) {
          at(level, threads);
          expect(bytesEqual(dotRowsF32(A, Bf, C0.slice(), c), want), `f32 ${level} x${threads} ${label(c)}`).toBe(true);
          expect(bytesEqual(dotRowsBf16(A, B16, C0.slice(), c), want16), `bf16 ${level} x${threads} ${label(c)}`).toBe(true);
          compared += 2;
        }
    }
    expect(compared).toBe(all.length * available.length * 2 * 2);
  });

  it("C[i] is bit for bit gemv(B, A[i]) and a row of gemm (one dot order for the package)", () => {
    const c: Case = { m: 7, n: 29, k: 83, lda: 83, ldb: 83, ldc: 29 };
    const { A, Bf, B16 } = operands(c, 701);
    for (const level of available) {
      at(level, 2);
      const C = dotRowsF32(A, Bf, new Float32Array(c.m * c.n), c);
      const C16 = dotRowsBf16(A, B16, new Float32Array(c.m * c.n), c);
      for (let i = 0; i < c.m; i++) {
        const x = A.subarray(i * c.k, (i + 1) * c.k);
        expect(bytesEqual(C.subarray(i * c.n, (i + 1) * c.n), gemvF32(Bf, x, new Float32Array(c.n), { rows: c.n, cols: c.k })), `${level} f32 row ${i}`).toBe(true);
        expect(bytesEqual(C16.subarray(i * c.n, (i + 1) * c.n), gemvBf16(B16, x, new Float32Array(c.n), { rows: c.n, cols: c.k })), `${level} bf16 row ${i}`).toBe(true);
      }
      expect(bytesEqual(C, gemmF32(Bf, A, new Float32Array(c.m * c.n), { rows: c.n, cols: c.k, batch: c.m })), `${level} gemm`).toBe(true);
    }
  });

  it("bf16 B gives the bits of f32 B holding the same (widened) values", () => {
    const c: Case = { m: 9, n: 37, k: 21, lda: 23, ldb: 40, ldc: 38 };
    const { A, B16, C0 } = operands(c, 501);
    for (const level of available) {
      at(level, 1);
      expect(bytesEqual(dotRowsBf16(A, B16, C0.slice(), c), dotRowsF32(A, bf16ToF32(B16), C0.slice(), c)), level).toBe(true);
    }
  });

  it("keeps NaN, inf and signed zeros per element, identically at every level", () => {
    const c: Case = { m: 6, n: 35, k: 19, lda: 19, ldb: 20, ldc: 35 };
    const { A, Bf, C0 } = operands(c, 601);
    A[2] = NaN; // row 0: every C[0][j] is NaN
    A[c.lda + 4] = Infinity;
    Bf[17 * c.ldb + 3] = -Infinity;
    Bf[33 * c.ldb + 5] = NaN;
    // row 3 of A is -0 against row 5 of B positive: every product is -0, yet lanes start at +0
    A.fill(-0, 3 * c.lda, 3 * c.lda + c.k);
    for (let p = 0; p < c.k; p++) Bf[5 * c.ldb + p] = Math.abs(Bf[5 * c.ldb + p]) + 0.5;
    at("scalar", 1);
    const want = dotRowsF32(A, Bf, C0.slice(), c);
    expect(Object.is(want[3 * c.ldc + 5], 0)).toBe(true);
    expect(Number.isNaN(want[0])).toBe(true);
    expect(Math.abs(want[c.ldc + 3])).toBe(Infinity); // A[1][4] = inf meets a finite B[3][4] != 0
    for (const level of available) {
      at(level, 1);
      const got = dotRowsF32(A, Bf, C0.slice(), c);
      for (let i = 0; i < got.length; i++) expect(Object.is(got[i], want[i]), `${level} ${i}`).toBe(true);
    }
  });

  it("k = 0 writes +0 to C (gaps kept); m = 0 or n = 0 writes nothing", () => {
    const C = uniform(12, -1, 1, 7);
    const before = C.slice();
    for (const level of available) {
      at(level, 1);
      const got = dotRowsF32(new Float32Array(0), new Float32Array(0), C.slice(), { m: 3, n: 3, k: 0, ldc: 4 });
      for (let i = 0; i < 12; i++) expect(Object.is(got[i], i % 4 === 3 ? before[i] : 0), `${level} ${i}`).toBe(true);
      expect(bytesEqual(dotRowsF32(new Float32Array(4), new Float32Array(0), C.slice(), { m: 1, n: 0, k: 4 }), before)).toBe(true);
      expect(bytesEqual(dotRowsBf16(new Float32Array(0), new Uint16Array(4), C.slice(), { m: 0, n: 1, k: 4 }), before)).toBe(true);
    }
  });

  it("validates shapes, strides and overlap before touching memory", () => {
    const A = new Float32Array(12), B = new Float32Array(20), C = new Float32Array(15);
    const ok = { m: 3, n: 5, k: 4 };
    expect(() => dotRowsF32(A, B, C, ok)).not.toThrow();
    expect(() => dotRowsF32(A.subarray(1), B, C, ok)).toThrow(/dotRowsF32: A holds 11 values, needs m x k = 3 x 4 with row stride lda = 4/);
    expect(() => dotRowsF32(A, B.subarray(1), C, ok)).toThrow(/dotRowsF32: B holds 19 values, needs n x k = 5 x 4 with row stride ldb = 4/);
    expect(() => dotRowsF32(A, B, C.subarray(1), ok)).toThrow(/dotRowsF32: C holds 14 values, needs m x n = 3 x 5/);
    expect(() => dotRowsF32(A, B, C, { ...ok, lda: 3 })).toThrow(/dotRowsF32: lda \(3\) must be >= k \(4\)/);
    expect(() => dotRowsF32(A, B, C, { ...ok, ldb: 3 })).toThrow(/dotRowsF32: ldb \(3\) must be >= k \(4\)/);
    expect(() => dotRowsF32(A, B, C, { ...ok, ldc: 6 })).toThrow(/C holds 15 values, needs m x n = 3 x 5 with row stride ldc = 6/);
    expect(() => dotRowsF32(A, B, C, { ...ok, n: -1 })).toThrow(/'n' must be a non-negative integer/);
    expect(() => dotRowsF32(A, new Uint16Array(20) as unknown as Float32Array, C, ok)).toThrow(/argument 'B' must be a Float32Array/);
    expect(() => dotRowsBf16(A, new Uint16Array(19), C, ok)).toThrow(/dotRowsBf16: B holds 19 values, needs n x k = 5 x 4/);
    expect(() => dotRowsBf16(A, new Uint8Array(new ArrayBuffer(42), 1, 40), C, ok)).toThrow(/dotRowsBf16: B must start at an even byte offset/);
    const shared = new Float32Array(40);
    expect(() => dotRowsF32(shared.subarray(0, 12), B, shared.subarray(10, 25), ok)).toThrow(/dotRowsF32: C overlaps A/);
    expect(() => dotRowsF32(A, shared.subarray(0, 20), shared.subarray(19, 34), ok)).toThrow(/dotRowsF32: C overlaps B/);
    // disjoint parts of one buffer are fine (scores written next to the keys they came from)
    expect(() => dotRowsF32(A, shared.subarray(0, 20), shared.subarray(20, 35), ok)).not.toThrow();
  });
});
