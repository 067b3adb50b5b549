import { describe, expect, it } from "vitest";
import {
  bestSimdLevel,
  bf16ToF32,
  f32ToBf16,
  gemvBf16,
  nativeInfo,
  setSimdLevel,
  setThreadCount,
  type SimdLevel,
} from "../src/index.js";
import * as dense from "../src/index.js";
// @k3/test-utils depends on @k3/dense (a cycle in turbo's graph), so these dependency-free modules are imported by path.
import { bytesEqual } from "../../test-utils/src/compare.js";
import { uniform } from "../../test-utils/src/random.js";
import { testedSimdLevels } from "../../test-utils/src/settings.js";

const available = testedSimdLevels(dense);

function referenceGemv(w: Float32Array, x: Float32Array, rows: number, cols: number, ld: number): Float64Array {
  const y = new Float64Array(rows);
  for (let r = 0; r < rows; r++) {
    let s = 0;
    for (let k = 0; k < cols; k++) s += w[r * ld + k] * x[k];
    y[r] = s;
  }
  return y;
}

function run(level: SimdLevel, threads: number, w: Uint16Array, x: Float32Array, rows: number, cols: number, ld: number) {
  setSimdLevel(level);
  setThreadCount(threads);
  return gemvBf16(w, x, new Float32Array(rows), { rows, cols, ld });
}

describe("loading", () => {
  it("loads the prebuilt binary unless source mode is asked for", () => {
    const info = nativeInfo();
    expect(info.origin).toBe(process.env.K3_SOURCE_BUILD ? "source" : "prebuilt");
    expect(info.file).toMatch(/k3_dense\.node$/);
  });

  it("refuses an unknown SIMD level by name", () => {
    expect(() => setSimdLevel("sse9" as SimdLevel)).toThrow(/unknown level 'sse9'/);
  });
});

describe("bf16 conversion", () => {
  it("rounds to nearest even and keeps NaN", () => {
    const v = new Float32Array([1, 1 + 2 ** -8, 1 + 3 * 2 ** -8, -2.5, NaN, Infinity]);
    const back = bf16ToF32(f32ToBf16(v));
    expect(Array.from(back.slice(0, 4))).toEqual([1, 1, 1 + 2 ** -6, -2.5]);
    expect(Number.isNaN(back[4])).toBe(true);
    expect(back[5]).toBe(Infinity);
  });
});

describe("gemvBf16", () => {
  const shapes: Array<[number, number, number]> = [
    [1, 1, 1],
    [3, 7, 7],
    [5, 16, 16],
    [9, 17, 20],
    [37, 100, 128],
    [130, 513, 513],
    [64, 3584, 3584],
    // AVX-512 tiles: 16 + 16 + 8 + 4 + 1 rows with a masked column tail; 4 KiB-multiple row strides
    // (1 thread: skewed 16-row tiles when cols >= 1024, else 8-row tiles; 2+ threads:
    // 8-row tiles); the prefetch moves to the next tile near each row's end
    [45, 1000, 1003],
    [29, 2048, 2048],
    [35, 1056, 2048],
    [16, 1024, 4096],
    [21, 1040, 2048],
    [48, 7168, 7168],
    // AVX2 tiles: 8 + 4 + 2 + 1 rows, column tails of 11, 8 and 8 after the whole 16s (cols < 16: the tail alone)
    [15, 75, 80],
    [7, 40, 40],
    [6, 8, 8],
    // AVX2 spread tiles: tasks of 64 / 51 / 11 rows (tile rows n/8 apart, then a 4/2/1-row tail)
    [203, 75, 80],
    // AVX2 rows of >= 16 KiB: consecutive 8-row tiles
    [29, 100, 8200],
  ];

  it.each(shapes)("matches a float64 reference (%i x %i, ld %i)", (rows, cols, ld) => {
    const w = f32ToBf16(uniform(rows * ld, -1, 1, 11));
    const x = uniform(cols, -1, 1, 12);
    const y = run(bestSimdLevel(), 2, w, x, rows, cols, ld);
    const ref = referenceGemv(bf16ToF32(w), x, rows, cols, ld);
    const wf = bf16ToF32(w);
    for (let r = 0; r < rows; r++) {
      // fp32 accumulation error bound: cols * eps * sum |w x|
      let absSum = 0;
      for (let k = 0; k < cols; k++) absSum += Math.abs(wf[r * ld + k] * x[k]);
      expect(Math.abs(y[r] - ref[r])).toBeLessThanOrEqual(absSum * cols * 1.2e-7 + 1e-30);
    }
  });

  it.each(shapes)("is bit-identical at every SIMD level and thread count (%i x %i, ld %i)", (rows, cols, ld) => {
    const w = f32ToBf16(uniform(rows * ld, -1, 1, 21));
    const x = uniform(cols, -1, 1, 22);
    const expected = run("scalar", 1, w, x, rows, cols, ld);
    for (const level of available)
      for (const threads of [1, 2, 3]) {
        const y = run(level, threads, w, x, rows, cols, ld);
        expect(bytesEqual(y, expected), `${level} x${threads}`).toBe(true);
      }
  });

  it("is bit-identical where the AVX2 spread tiles are capped at 4 MiB apart (a task of 2112 rows of 16000 bytes: blocks of 8 x 262 rows, then 8 x 2)", () => {
    const rows = 8448, cols = 24, ld = 8000; // 135 MB of weights; only the first 24 columns of each row are read
    const w = new Uint16Array(rows * ld);
    const block = f32ToBf16(uniform(1 << 16, -1, 1, 41));
    for (let i = 0; i < w.length; i += block.length) w.set(block.subarray(0, Math.min(block.length, w.length - i)), i);
    const x = uniform(cols, -1, 1, 42);
    const expected = run("scalar", 1, w, x, rows, cols, ld);
    for (const level of available)
      for (const threads of [1, 2]) expect(bytesEqual(run(level, threads, w, x, rows, cols, ld), expected), `${level} x${threads}`).toBe(true);
  });

  it("is bit-identical for every start offset within a 64-byte line (4 KiB-multiple stride: the skewed, line-aligned tiles)", () => {
    const rows = 21, cols = 1100, ld = 2048;
    const base = f32ToBf16(uniform(rows * ld + 64, -1, 1, 31));
    // x inside a bigger array of non-zero values: a masked lane that read past either end would change the sum
    const x = uniform(cols + 64, -1, 1, 32).subarray(32, 32 + cols);
    for (let off = 0; off < 32; off += 3) {
      const w = base.subarray(off, off + rows * ld);
      const expected = run("scalar", 1, w, x, rows, cols, ld);
      for (const level of available)
        for (const threads of [1, 2]) expect(bytesEqual(run(level, threads, w, x, rows, cols, ld), expected), `offset ${off} ${level} x${threads}`).toBe(true);
    }
  });

  it("keeps -0 sums and infinities exactly like the scalar reference in the tail lanes", () => {
    const rows = 2, cols = 19;
    const wf = new Float32Array(rows * cols).fill(-0);
    wf[cols + 18] = 1;
    const x = new Float32Array(cols).fill(1);
    x[18] = Infinity;
    const w = f32ToBf16(wf);
    const expected = run("scalar", 1, w, x, rows, cols, cols);
    for (const level of available) {
      const y = run(level, 2, w, x, rows, cols, cols);
      expect(Object.is(y[0], expected[0]) && Object.is(y[1], expected[1]), level).toBe(true);
    }
  });

  it("validates shapes before touching memory", () => {
    const w = new Uint16Array(10);
    const x = new Float32Array(5);
    expect(() => gemvBf16(w, x, new Float32Array(2), { rows: 3, cols: 5 })).toThrow(/y is shorter than rows/);
    expect(() => gemvBf16(w, x, new Float32Array(3), { rows: 3, cols: 5 })).toThrow(/fewer than rows x cols/);
    expect(() => gemvBf16(w, new Float32Array(4), new Float32Array(2), { rows: 2, cols: 5 })).toThrow(/x is shorter/);
    expect(() => gemvBf16(w, x, new Float32Array(2), { rows: 2, cols: 5, ld: 4 })).toThrow(/ld must be >= cols/);
    expect(() => gemvBf16(w, x, new Float32Array(2), { rows: -1, cols: 5 })).toThrow(/non-negative integer/);
    const odd = new Uint8Array(new ArrayBuffer(42), 1, 40);
    expect(() => gemvBf16(odd, x, new Float32Array(2), { rows: 2, cols: 5 })).toThrow(/even byte offset/);
    expect(() => gemvBf16(w, new Float64Array(5) as unknown as Float32Array, new Float32Array(2), { rows: 2, cols: 5 })).toThrow(
      /must be a Float32Array/,
    );
  });
});
