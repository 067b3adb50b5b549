import { describe, expect, it } from "vitest";
import {
  bestSimdLevel,
  bf16ToF32,
  f32ToBf16,
  gemmBf16,
  gemmF32,
  gemvBf16,
  gemvF32,
} from "../src/index.js";
import * as dense from "../src/index.js";
// @k3/test-utils depends on @k3/dense (a cycle in turbo's graph), so these dependency-free modules are imported by path.
import { bytesEqual } from "../../test-utils/src/compare.js";
import { uniform } from "../../test-utils/src/random.js";
import { testedSimdLevels } from "../../test-utils/src/settings.js";
import { at } from "./products.js";

const available = testedSimdLevels(dense);

const shapes: Array<[number, number, number]> = [
  [1, 1, 1],
  [3, 7, 9],
  [5, 16, 16],
  [9, 17, 20],
  [37, 100, 128],
  [130, 513, 513],
];

describe("gemvF32", () => {
  it.each(shapes)("matches a float64 reference (%i x %i, ld %i)", (rows, cols, ld) => {
    const w = uniform(rows * ld, -1, 1, 31);
    const x = uniform(cols, -1, 1, 32);
    at(bestSimdLevel(), 2);
    const y = gemvF32(w, x, new Float32Array(rows), { rows, cols, ld });
    for (let r = 0; r < rows; r++) {
      let ref = 0, absSum = 0;
      for (let k = 0; k < cols; k++) {
        ref += w[r * ld + k] * x[k];
        absSum += Math.abs(w[r * ld + k] * x[k]);
      }
      // fp32 accumulation bound: a few eps per add along a 16-lane tree of cols/16 + 4 adds
      expect(Math.abs(y[r] - ref)).toBeLessThanOrEqual(absSum * (cols / 16 + 5) * 1.2e-7 + 1e-30);
    }
  });

  it.each(shapes)("is bit-identical at every SIMD level and thread count (%i x %i, ld %i)", (rows, cols, ld) => {
    const w = uniform(rows * ld, -1, 1, 41);
    const x = uniform(cols, -1, 1, 42);
    at("scalar", 1);
    const expected = gemvF32(w, x, new Float32Array(rows), { rows, cols, ld });
    for (const level of available)
      for (const threads of [1, 2, 3]) {
        at(level, threads);
        expect(bytesEqual(gemvF32(w, x, new Float32Array(rows), { rows, cols, ld }), expected), `${level} x${threads}`).toBe(true);
      }
  });

  it("gives the same bits as gemvBf16 on bf16-representable weights", () => {
    const rows = 21, cols = 77;
    const wb = f32ToBf16(uniform(rows * cols, -1, 1, 51));
    const wf = bf16ToF32(wb);
    const x = uniform(cols, -1, 1, 52);
    for (const level of available) {
      at(level, 2);
      const a = gemvF32(wf, x, new Float32Array(rows), { rows, cols });
      const b = gemvBf16(wb, x, new Float32Array(rows), { rows, cols });
      expect(bytesEqual(a, b), level).toBe(true);
    }
  });

  it("validates shapes before touching memory", () => {
    const w = new Float32Array(10);
    const x = new Float32Array(5);
    expect(() => gemvF32(new Float32Array(15), x, new Float32Array(2), { rows: 3, cols: 5 })).toThrow(/gemvF32: y is shorter than rows/);
    expect(() => gemvF32(w, x, new Float32Array(3), { rows: 3, cols: 5 })).toThrow(/fewer than rows x cols f32/);
    expect(() => gemvF32(w, new Float32Array(4), new Float32Array(2), { rows: 2, cols: 5 })).toThrow(/x is shorter/);
    expect(() => gemvF32(w, x, new Float32Array(2), { rows: 2, cols: 5, ld: 4 })).toThrow(/ld must be >= cols/);
    expect(() => gemvF32(new Uint16Array(10) as unknown as Float32Array, x, new Float32Array(2), { rows: 2, cols: 5 })).toThrow(
      /argument 'w' must be a Float32Array/,
    );
  });
});

describe("gemmBf16 / gemmF32", () => {
  const cases: Array<[number, number, number, number]> = [
    [1, 1, 1, 1],
    [7, 33, 40, 3],
    [13, 100, 100, 5],
    [66, 257, 260, 9],
    [19, 48, 48, 33],
  ];

  it.each(cases)("Y[b] is bit-identical to gemv of X[b] at every level and thread count (%i x %i ld %i, batch %i)", (rows, cols, ld, batch) => {
    const wf = uniform(rows * ld, -1, 1, 61);
    const wb = f32ToBf16(wf);
    const X = uniform(batch * cols, -2, 2, 62);
    at("scalar", 1);
    const refBf16 = new Float32Array(batch * rows);
    const refF32 = new Float32Array(batch * rows);
    for (let b = 0; b < batch; b++) {
      const xb = X.subarray(b * cols, (b + 1) * cols);
      refBf16.set(gemvBf16(wb, xb, new Float32Array(rows), { rows, cols, ld }), b * rows);
      refF32.set(gemvF32(wf, xb, new Float32Array(rows), { rows, cols, ld }), b * rows);
    }
    for (const level of available)
      for (const threads of [1, 2, 3]) {
        at(level, threads);
        const yb = gemmBf16(wb, X, new Float32Array(batch * rows), { rows, cols, ld, batch });
        const yf = gemmF32(wf, X, new Float32Array(batch * rows), { rows, cols, ld, batch });
        expect(bytesEqual(yb, refBf16), `bf16 ${level} x${threads}`).toBe(true);
        expect(bytesEqual(yf, refF32), `f32 ${level} x${threads}`).toBe(true);
      }
  });

  it("every batch size 1..33 matches gemv (K3-like width, avx512 tiles and remainders)", () => {
    const rows = 23, cols = 3584 / 8;
    const wb = f32ToBf16(uniform(rows * cols, -1, 1, 71));
    const X = uniform(33 * cols, -1, 1, 72);
    at(bestSimdLevel(), 2);
    const ref = new Float32Array(33 * rows);
    for (let b = 0; b < 33; b++) ref.set(gemvBf16(wb, X.subarray(b * cols, (b + 1) * cols), new Float32Array(rows), { rows, cols }), b * rows);
    for (let batch = 1; batch <= 33; batch++) {
      const y = gemmBf16(wb, X.subarray(0, batch * cols), new Float32Array(batch * rows), { rows, cols, batch });
      expect(bytesEqual(y, ref.subarray(0, batch * rows)), `batch ${batch}`).toBe(true);
    }
  });

  it("keeps -0 and infinities of the tail lanes exactly like the scalar reference", () => {
    const rows = 2, cols = 19, batch = 3;
    const wf = new Float32Array(rows * cols).fill(-0);
    wf[cols + 18] = 1;
    const X = new Float32Array(batch * cols).fill(1);
    X[18] = Infinity;
    X[cols + 5] = -0;
    at("scalar", 1);
    const expected = gemmF32(wf, X, new Float32Array(batch * rows), { rows, cols, batch });
    for (const level of available) {
      at(level, 2);
      const y = gemmF32(wf, X, new Float32Array(batch * rows), { rows, cols, batch });
      for (let i = 0; i < y.length; i++) expect(Object.is(y[i], expected[i]), `${level} ${i}`).toBe(true);
    }
  });

  it("validates shapes before touching memory", () => {
    const w = new Uint16Array(12);
    expect(() => gemmBf16(w, new Float32Array(7), new Float32Array(6), { rows: 3, cols: 4, batch: 2 })).toThrow(
      /gemmBf16: X holds fewer than batch x cols/,
    );
    expect(() => gemmBf16(w, new Float32Array(8), new Float32Array(5), { rows: 3, cols: 4, batch: 2 })).toThrow(
      /Y holds fewer than batch x rows/,
    );
    expect(() => gemmBf16(w, new Float32Array(8), new Float32Array(8), { rows: 4, cols: 4, batch: 2 })).toThrow(
      /fewer than rows x cols bf16/,
    );
    expect(() => gemmF32(new Float32Array(12), new Float32Array(8), new Float32Array(6), { rows: 3, cols: 4, batch: 2.5 })).toThrow(
      /'batch' must be a non-negative integer/,
    );
    const odd = new Uint8Array(new ArrayBuffer(26), 1, 24);
    expect(() => gemmBf16(odd, new Float32Array(8), new Float32Array(6), { rows: 3, cols: 4, batch: 2 })).toThrow(/even byte offset/);
  });
});
