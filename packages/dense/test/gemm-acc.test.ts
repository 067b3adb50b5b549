import { describe, expect, it } from "vitest";
import { bf16ToF32, gemmAccBf16, gemmAccF32 } from "../src/index.js";
import * as dense from "../src/index.js";
// @k3/test-utils depends on @k3/dense (a cycle in turbo's graph), so these dependency-free modules are imported by path.
import { bytesEqual } from "../../test-utils/src/compare.js";
import { uniform } from "../../test-utils/src/random.js";
import { testedSimdLevels } from "../../test-utils/src/settings.js";
import { at, fmaf, label, operands as productOperands, productCases, type ProductCase } from "./products.js";

const available = testedSimdLevels(dense);

// ---------------------------------------------------------------- shapes

type Case = ProductCase;

const edgeShapes: Array<[number, number, number]> = [
  [1, 1, 1], [1, 70, 1], [70, 1, 70], [4, 16, 1], [5, 17, 65], [3, 64, 64], [4, 33, 7], [8, 48, 129], [13, 70, 70], [70, 70, 70],
];
const cases = () => productCases(edgeShapes, "n", 977);
const operands = (c: Case, seed: number) => productOperands(c, "n", seed);

/** The exact fmaf chain of the documented order, element by element. */
function reference(c: Case, A: Float32Array, B: Float32Array, C0: Float32Array): Float32Array {
  const C = C0.slice();
  for (let i = 0; i < c.m; i++)
    for (let j = 0; j < c.n; j++) {
      let acc = C[i * c.ldc + j];
      for (let p = 0; p < c.k; p++) acc = fmaf(A[i * c.lda + p], B[p * c.ldb + j], acc);
      C[i * c.ldc + j] = acc;
    }
  return C;
}

describe("fmaf (test helper)", () => {
  it("rounds once where a separate multiply and add would not", () => {
    // (1 + 2^-12)^2 = 1 + 2^-11 + 2^-24: the 2^-24 is lost by fround(a*b) but kept by fma
    const a = 1 + 2 ** -12;
    expect(fmaf(a, a, -1)).toBe(2 ** -11 + 2 ** -24);
    expect(Math.fround(Math.fround(a * a) - 1)).toBe(2 ** -11);
    // a float32 tie broken by the low part: 1 + 2^-24 (tie) + 2^-60 rounds up
    expect(fmaf(1 + 2 ** -23, 2 ** -37, 1 + 2 ** -24 - 2 ** -37)).toBe(1 + 2 ** -23);
    expect(fmaf(2, 3, 1)).toBe(7);
  });
});

describe("gemmAccF32 / gemmAccBf16", () => {
  const all = cases();

  it("scalar equals the exact fmaf chain, f32 and bf16 B", () => {
    at("scalar", 1);
    for (const [ci, c] of all.entries()) {
      const { A, Bf, B16, C0 } = operands(c, 100 + ci);
      const want = reference(c, A, Bf, C0);
      expect(bytesEqual(gemmAccF32(A, Bf, C0.slice(), c), want), `f32 ${label(c)}`).toBe(true);
      const want16 = reference(c, A, bf16ToF32(B16), C0);
      expect(bytesEqual(gemmAccBf16(A, B16, C0.slice(), c), want16), `bf16 ${label(c)}`).toBe(true);
    }
  });

  it("is bit-identical to scalar at every SIMD level and thread count (m, n, k in 1..70, strides != widths)", () => {
    let compared = 0;
    for (const [ci, c] of all.entries()) {
      const { A, Bf, B16, C0 } = operands(c, 300 + ci);
      at("scalar", 1);
      const want = gemmAccF32(A, Bf, C0.slice(), c);
      const want16 = gemmAccBf16(A, B16, C0.slice(), c);
      for (const level of available)
        for (const threads of [1, 3]) {
          at(level, threads);
          expect(bytesEqual(gemmAccF32(A, Bf, C0.slice(), c), want), `f32 ${level} x${threads} ${label(c)}`).toBe(true);
          expect(bytesEqual(gemmAccBf16(A, B16, C0.slice(), c), want16), `bf16 ${level} x${threads} ${label(c)}`).toBe(true);
          compared += 2;
        }
    }
    expect(compared).toBe(all.length * available.length * 2 * 2);
  });

  it("bf16 B gives the bits of f32 B holding the same (widened) values", () => {
    const c: Case = { m: 9, n: 37, k: 21, lda: 23, ldb: 40, ldc: 38 };
    const { A, B16, C0 } = operands(c, 501);
    for (const level of available) {
      at(level, 1);
      expect(bytesEqual(gemmAccBf16(A, B16, C0.slice(), c), gemmAccF32(A, bf16ToF32(B16), C0.slice(), c)), level).toBe(true);
    }
  });

  it("keeps NaN, inf and signed zeros per element, identically at every level", () => {
    const c: Case = { m: 6, n: 35, k: 19, lda: 19, ldb: 36, ldc: 35 };
    const { A, Bf, C0 } = operands(c, 601);
    A[2] = NaN;
    A[c.lda + 4] = Infinity;
    Bf[3 * c.ldb + 17] = -Infinity;
    Bf[5 * c.ldb + 33] = NaN;
    C0[2 * c.ldc + 1] = -0;
    // row 3 of A is +0 and column 5 of B negative: every product is -0, so C's -0 must stay -0
    A.fill(0, 3 * c.lda, 3 * c.lda + c.k);
    for (let p = 0; p < c.k; p++) Bf[p * c.ldb + 5] = -Math.abs(Bf[p * c.ldb + 5]) - 0.5;
    C0[3 * c.ldc + 5] = -0;
    at("scalar", 1);
    const want = gemmAccF32(A, Bf, C0.slice(), c);
    expect(Object.is(want[3 * c.ldc + 5], -0)).toBe(true);
    expect(Number.isNaN(want[0])).toBe(true);
    for (const level of available) {
      at(level, 1);
      const got = gemmAccF32(A, Bf, C0.slice(), c);
      for (let i = 0; i < got.length; i++) expect(Object.is(got[i], want[i]), `${level} ${i}`).toBe(true);
    }
  });

  it("k = 0, m = 0 or n = 0 leave C as it was", () => {
    const C = uniform(12, -1, 1, 7);
    const before = C.slice();
    gemmAccF32(new Float32Array(0), new Float32Array(0), C, { m: 3, n: 4, k: 0 });
    gemmAccF32(new Float32Array(4), new Float32Array(0), C, { m: 0, n: 0, k: 4 });
    gemmAccBf16(new Float32Array(4), new Uint16Array(0), C, { m: 1, n: 0, k: 4 });
    expect(bytesEqual(C, before)).toBe(true);
  });

  it("accepts B and C in one buffer when their spans are disjoint (KDA's forward substitution)", () => {
    const n = 24, rows = 10, b0 = 6;
    const R = uniform(rows * n, -1, 1, 8);
    const M = uniform((rows - b0) * b0, -1, 1, 9);
    const shape = { m: rows - b0, n, k: b0 };
    at("scalar", 1);
    const want = gemmAccF32(M, R.slice(0, b0 * n), R.slice(b0 * n), shape);
    for (const level of available) {
      at(level, 1);
      const R2 = R.slice();
      gemmAccF32(M, R2.subarray(0, b0 * n), R2.subarray(b0 * n), shape);
      expect(bytesEqual(R2.subarray(b0 * n), want), level).toBe(true);
      expect(bytesEqual(R2.subarray(0, b0 * n), R.subarray(0, b0 * n)), level).toBe(true);
    }
  });

  it("validates shapes, strides and overlap before touching memory", () => {
    const A = new Float32Array(12), B = new Float32Array(20), C = new Float32Array(15);
    const ok = { m: 3, n: 5, k: 4 };
    expect(() => gemmAccF32(A, B, C, ok)).not.toThrow();
    expect(() => gemmAccF32(A.subarray(1), B, C, ok)).toThrow(/gemmAccF32: A holds 11 values, needs m x k = 3 x 4 with row stride lda = 4/);
    expect(() => gemmAccF32(A, B.subarray(1), C, ok)).toThrow(/gemmAccF32: B holds 19 values, needs k x n = 4 x 5 with row stride ldb = 5/);
    expect(() => gemmAccF32(A, B, C.subarray(1), ok)).toThrow(/gemmAccF32: C holds 14 values, needs m x n = 3 x 5/);
    expect(() => gemmAccF32(A, B, C, { ...ok, lda: 3 })).toThrow(/lda \(3\) must be >= k \(4\)/);
    expect(() => gemmAccF32(A, B, C, { ...ok, ldb: 4 })).toThrow(/ldb \(4\) must be >= n \(5\)/);
    expect(() => gemmAccF32(A, B, C, { ...ok, ldc: 6 })).toThrow(/C holds 15 values, needs m x n = 3 x 5 with row stride ldc = 6/);
    expect(() => gemmAccF32(A, B, C, { ...ok, m: 1.5 })).toThrow(/'m' must be a non-negative integer/);
    expect(() => gemmAccF32(A, new Uint16Array(20) as unknown as Float32Array, C, ok)).toThrow(/argument 'B' must be a Float32Array/);
    expect(() => gemmAccBf16(A, new Uint16Array(19), C, ok)).toThrow(/gemmAccBf16: B holds 19 values, needs k x n = 4 x 5/);
    expect(() => gemmAccBf16(A, new Uint8Array(new ArrayBuffer(42), 1, 40), C, ok)).toThrow(/even byte offset/);
    const shared = new Float32Array(40);
    expect(() => gemmAccF32(shared.subarray(0, 12), B, shared.subarray(10, 25), ok)).toThrow(/C overlaps A/);
    expect(() => gemmAccF32(A, shared.subarray(0, 20), shared.subarray(19, 34), ok)).toThrow(/C overlaps B/);
  });
});
