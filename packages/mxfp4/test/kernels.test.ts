import { describe, expect, it } from "vitest";
import { bestSimdLevel, type SimdLevel } from "@k3/dense";
import * as dense from "@k3/dense";
import {
  dequantize,
  matmul,
  matmulSplit,
  matvec,
  splitActivations,
  type Mxfp4Matrix,
} from "../src/index.js";
import { testedSimdLevels, settingsSetter, bytesEqual, uniform } from "@k3/test-utils";
import { elementF64, randomMatrix, referenceMatvec } from "./helpers.js";

const available = testedSimdLevels(dense);
const at = settingsSetter(dense);

describe("matvec", () => {
  it("reproduces the documented order bit for bit (JS reimplementation from the spec)", () => {
    const m = randomMatrix(13, 96, 1, 100, 150);
    const x = uniform(96, -3, 3, 2);
    const expected = referenceMatvec(m, x);
    for (const level of available) {
      at(level, 2);
      expect(bytesEqual(matvec(m, x, new Float32Array(13)), expected), level).toBe(true);
    }
  });

  it("is within the fp32 error bound of a float64 dequantize-then-multiply", () => {
    const m = randomMatrix(37, 3584 / 4, 3);
    const x = uniform(m.cols, -1, 1, 4);
    at(bestSimdLevel(), 2);
    const y = matvec(m, x, new Float32Array(m.rows));
    for (let r = 0; r < m.rows; r++) {
      let exact = 0, absSum = 0;
      for (let k = 0; k < m.cols; k++) {
        const p = elementF64(m, r, k) * x[k];
        exact += p;
        absSum += Math.abs(p);
      }
      // each lane adds cols/32 terms, then a 5-level tree: (cols/32 + 5) roundings of at most 2^-24
      expect(Math.abs(y[r] - exact)).toBeLessThanOrEqual(absSum * (m.cols / 32 + 5) * 2 ** -24);
    }
  });

  const shapes: Array<[number, number]> = [
    [1, 32],
    [3, 64],
    [4, 32],
    [5, 96],
    [9, 160],
    [130, 512],
    [67, 3584],
  ];
  it.each(shapes)("is bit-identical at every SIMD level and thread count (%i x %i)", (rows, cols) => {
    const m = randomMatrix(rows, cols, rows * 7 + cols, 0, 254);
    const x = uniform(cols, -2, 2, 5);
    at("scalar", 1);
    const expected = matvec(m, x, new Float32Array(rows));
    for (const level of available)
      for (const threads of [1, 2, 3]) {
        at(level, threads);
        expect(bytesEqual(matvec(m, x, new Float32Array(rows)), expected), `${level} x${threads}`).toBe(true);
      }
  });

  it("equals dequantize() followed by the same-order f32 products (every code, scales 0..254)", () => {
    const m = randomMatrix(16, 64, 9, 0, 254);
    const W = dequantize(m);
    const x = uniform(64, -1, 1, 10);
    for (let r = 0; r < 16; r++)
      for (let k = 0; k < 64; k++) {
        const e = Math.fround(elementF64(m, r, k));
        expect(Object.is(W[r * 64 + k], e), `w[${r}][${k}]`).toBe(true);
      }
    at(bestSimdLevel(), 2);
    expect(bytesEqual(matvec(m, x, new Float32Array(16)), referenceMatvec(m, x))).toBe(true);
  });

  it("applies scale 0 as 2^-127 exactly (f32 subnormal, never flushed)", () => {
    const m: Mxfp4Matrix = { packed: new Uint8Array(16).fill(0x11), scales: new Uint8Array([0]), rows: 1, cols: 32 };
    expect(Array.from(dequantize(m))).toEqual(new Array(32).fill(0.5 * 2 ** -127));
    const x = new Float32Array(32).fill(1);
    for (const level of available) {
      at(level, 1);
      // 32 * 2^-128 = 2^-123: exact, from subnormal weights
      expect(matvec(m, x, new Float32Array(1))[0], level).toBe(2 ** -123);
    }
  });

  it("keeps -0 weights and zero rows exactly like the scalar reference", () => {
    const m: Mxfp4Matrix = { packed: new Uint8Array(32).fill(0x88), scales: new Uint8Array([127, 127]), rows: 2, cols: 32 };
    const x = new Float32Array(32).fill(1);
    at("scalar", 1);
    const expected = matvec(m, x, new Float32Array(2));
    for (const level of available) {
      at(level, 2);
      const y = matvec(m, x, new Float32Array(2));
      expect(Object.is(y[0], expected[0]) && Object.is(y[1], expected[1]), level).toBe(true);
    }
  });
});

describe("matvec at every SIMD level this CPU has", () => {
  const all: SimdLevel[] = ["scalar", "avx2", "avx512"];
  it.each(all)("%s: bit-identical to the reference across widths, expert shapes and thread counts", (level) => {
    if (!available.includes(level)) {
      // printed, not silent: this CPU cannot run the level, so its bit-identity is checked on another machine
      console.log(`[skipped: SIMD level ${level} not available on this CPU (best is ${bestSimdLevel()})]`);
      return;
    }
    // widths alternate so the AVX2 kernel's per-thread permuted activation copy is regrown and reused;
    // row counts odd (a 1-row tail after the 2-row tiles) and past the 8-row prefetch distance
    const shapes: Array<[number, number]> = [[7, 7168], [2049, 32], [33, 2048], [5, 224], [35, 7168], [1, 64], [19, 3584]];
    for (const [rows, cols] of shapes) {
      const m = randomMatrix(rows, cols, rows + cols, 0, 254);
      const x = uniform(cols, -2, 2, cols);
      const expected = referenceMatvec(m, x);
      for (const threads of [1, 2, 3]) {
        at(level, threads);
        expect(bytesEqual(matvec(m, x, new Float32Array(rows)), expected), `${level} x${threads} ${rows}x${cols}`).toBe(true);
      }
    }
  });

  it("K3 expert shapes 2048x7168 and 7168x2048 match the scalar kernel bit for bit at 1 and 2 threads", () => {
    for (const [rows, cols] of [[2048, 7168], [7168, 2048]] as Array<[number, number]>) {
      const m = randomMatrix(rows, cols, rows, 110, 135);
      const x = uniform(cols, -1, 1, cols + 1);
      at("scalar", 1);
      const expected = matvec(m, x, new Float32Array(rows));
      for (const level of available)
        for (const threads of [1, 2]) {
          at(level, threads);
          expect(bytesEqual(matvec(m, x, new Float32Array(rows)), expected), `${level} x${threads} ${rows}x${cols}`).toBe(true);
        }
    }
  });
});

describe("matmul", () => {
  it("Y[b] is bit-identical to matvec(X[b]) for every batch 1..33, level and thread count", () => {
    const m = randomMatrix(23, 256, 11);
    const X = uniform(33 * 256, -1, 1, 12);
    at("scalar", 1);
    const rows = new Float32Array(33 * 23);
    for (let b = 0; b < 33; b++) rows.set(matvec(m, X.subarray(b * 256, (b + 1) * 256), new Float32Array(23)), b * 23);
    for (const level of available)
      for (const threads of [1, 2, 3])
        for (const batch of level === bestSimdLevel() && threads === 2 ? Array.from({ length: 33 }, (_, i) => i + 1) : [1, 2, 3, 5, 8, 33]) {
          at(level, threads);
          const Y = matmul(m, X.subarray(0, batch * 256), new Float32Array(batch * 23), batch);
          expect(bytesEqual(Y, rows.subarray(0, batch * 23)), `${level} x${threads} batch ${batch}`).toBe(true);
        }
  });

  it("the batched (prefill) kernels at n = 4..70 match matvec bit for bit: several row groups, column and batch chunk tails", () => {
    // 75 rows = whole 16-row groups + a 4-row group + 3 single rows per task split; 1056 columns = 33 blocks
    // (one full 32-block column chunk + a 1-block tail); batches past the 32-activation chunk
    const [r, c] = [75, 1056];
    const m = randomMatrix(r, c, 21);
    const X = uniform(70 * c, -1, 1, 22);
    at("scalar", 1);
    const rows = new Float32Array(70 * r);
    for (let b = 0; b < 70; b++) rows.set(matvec(m, X.subarray(b * c, (b + 1) * c), new Float32Array(r)), b * r);
    for (const level of available)
      for (const threads of [1, 2, 3])
        for (const batch of [4, 5, 6, 7, 9, 16, 31, 32, 33, 64, 70]) {
          at(level, threads);
          const Y = matmul(m, X.subarray(0, batch * c), new Float32Array(batch * r), batch);
          expect(bytesEqual(Y, rows.subarray(0, batch * r)), `${level} x${threads} batch ${batch}`).toBe(true);
        }
  });

  it("the batched kernels over several 32-row decoded panels match matvec bit for bit: panel, 4-row group and column chunk tails", () => {
    // 1 thread: one task of 148 rows = 4 whole 32-row panels + a 20-row panel (5 groups) + nothing left;
    // 2 and 3 threads: shorter tasks (panels of 4..32 rows). 2080 columns = 65 blocks (two 32-block
    // chunks + a 1-block tail); batches below, at and past the 64-activation chunk, every tile width.
    const [r, c] = [150, 2080];
    const m = randomMatrix(r, c, 31);
    const X = uniform(70 * c, -1, 1, 32);
    at("scalar", 1);
    const rows = new Float32Array(70 * r);
    for (let b = 0; b < 70; b++) rows.set(matvec(m, X.subarray(b * c, (b + 1) * c), new Float32Array(r)), b * r);
    for (const level of available)
      for (const threads of [1, 2, 3])
        for (const batch of [4, 6, 11, 16, 17, 63, 64, 65, 70]) {
          at(level, threads);
          const Y = matmul(m, X.subarray(0, batch * c), new Float32Array(batch * r), batch);
          expect(bytesEqual(Y, rows.subarray(0, batch * r)), `${level} x${threads} batch ${batch}`).toBe(true);
        }
  });

  it("matmulSplit on splitActivations output equals matmul", () => {
    const m = randomMatrix(10, 96, 13);
    const X = uniform(3 * 96, -1, 1, 14);
    const XS = splitActivations(X, 96, 3);
    // lane i holds element 2i (even) / 2i + 1 (odd) of each 32-block
    expect(Array.from(XS.subarray(0, 5))).toEqual([X[0], X[2], X[4], X[6], X[8]]);
    expect([XS[16], XS[17], XS[31], XS[32], XS[48]]).toEqual([X[1], X[3], X[31], X[32], X[33]]);
    at(bestSimdLevel(), 2);
    expect(bytesEqual(matmulSplit(m, XS, new Float32Array(30), 3), matmul(m, X, new Float32Array(30), 3))).toBe(true);
  });

  it("accepts views at any byte offset (zero-copy checkpoint slices)", () => {
    const m = randomMatrix(6, 64, 15);
    const raw = new Uint8Array(1 + m.packed.length + m.scales.length);
    raw.set(m.packed, 1);
    raw.set(m.scales, 1 + m.packed.length);
    const view: Mxfp4Matrix = {
      packed: raw.subarray(1, 1 + m.packed.length),
      scales: raw.subarray(1 + m.packed.length),
      rows: 6,
      cols: 64,
    };
    const x = uniform(64, -1, 1, 16);
    expect(bytesEqual(matvec(view, x, new Float32Array(6)), matvec(m, x, new Float32Array(6)))).toBe(true);
  });
});

describe("argument checks", () => {
  const m = randomMatrix(4, 64, 17);
  it("names what is wrong", () => {
    expect(() => matvec({ ...m, cols: 48 }, new Float32Array(48), new Float32Array(4))).toThrow(
      /matvec: cols \(48\) is not a multiple of 32/,
    );
    expect(() => matvec({ ...m, rows: 5 }, new Float32Array(64), new Float32Array(5))).toThrow(
      /matvec: packed has 128 bytes, expected rows x cols\/2 = 5 x 32 = 160/,
    );
    expect(() => matvec({ ...m, scales: m.scales.subarray(1) }, new Float32Array(64), new Float32Array(4))).toThrow(/scales has 7 bytes/);
    expect(() => matvec(m, new Float32Array(63), new Float32Array(4))).toThrow(/X has 63 values, needs batch x cols = 1 x 64/);
    expect(() => matvec(m, new Float32Array(64), new Float32Array(3))).toThrow(/Y has 3 values, needs batch x rows = 1 x 4/);
    expect(() => matmul(m, new Float32Array(64 * 2), new Float32Array(8), 3)).toThrow(/X has 128 values, needs batch x cols = 3 x 64/);
    expect(() => matmul(m, new Float32Array(64), new Float32Array(4), -1)).toThrow(/'batch' must be a non-negative integer/);
  });
});

describe("native tables", () => {
  it("exposes the k3_mxfp4_api table as an external for other addons", async () => {
    const { nativeApi } = await import("../src/index.js");
    const api = nativeApi();
    expect(typeof api).toBe("object");
    expect(api).not.toBeNull();
  });
});
