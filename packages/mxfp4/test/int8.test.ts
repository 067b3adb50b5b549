import { describe, expect, it } from "vitest";
import { bestSimdLevel, setSimdLevel, setThreadCount } from "@k3/dense";
import * as dense from "@k3/dense";
import { hasVnni, matmulInt8, matvec, matvecInt8, type Mxfp4Matrix } from "../src/index.js";
import { testedSimdLevels, bytesEqual, uniform } from "@k3/test-utils";
import { elementF64, fmaf, randomMatrix } from "./helpers.js";

const available = testedSimdLevels(dense);

const LUT2 = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

function roundHalfEven(v: number): number {
  const r = Math.round(v);
  return Math.abs(v % 1) === 0.5 && r % 2 !== 0 ? r - 1 : r;
}

/** The int8 path's documented order, in JS. */
function referenceInt8(m: Mxfp4Matrix, x: Float32Array): Float32Array {
  const nBlocks = m.cols / 32;
  const groups = Math.ceil(nBlocks / 4);
  const q = new Int32Array(groups * 128);
  const d = new Float32Array(groups * 4);
  for (let b = 0; b < nBlocks; b++) {
    let amax = 0;
    for (let i = 0; i < 32; i++) amax = Math.max(amax, Math.abs(x[32 * b + i]));
    d[b] = Math.fround(amax / 127);
    if (amax === 0) continue;
    for (let i = 0; i < 32; i++) q[32 * b + i] = roundHalfEven(Math.fround(x[32 * b + i] / d[b]));
  }
  const y = new Float32Array(m.rows);
  for (let r = 0; r < m.rows; r++) {
    const lane = new Array<number>(16).fill(0);
    for (let g = 0; g < groups; g++)
      for (let l = 0; l < 16; l++) {
        const b = 4 * g + (l >> 2);
        let dot = 0;
        let factor = 0;
        if (b < nBlocks) {
          for (let t = 4 * l; t < 4 * l + 4; t++) {
            const byte = m.packed[r * (m.cols / 2) + 64 * g + t];
            const k = 64 * g + t; // byte index within the row -> elements 2k, 2k+1
            dot += LUT2[byte & 15] * q[2 * k] + LUT2[byte >> 4] * q[2 * k + 1];
          }
          factor = Math.fround(d[b] * 2 ** (m.scales[r * nBlocks + b] - 128));
        }
        lane[l] = fmaf(dot, factor, lane[l]);
      }
    for (let h = 8; h >= 1; h >>= 1) for (let i = 0; i < h; i++) lane[i] = Math.fround(lane[i] + lane[i + h]);
    y[r] = lane[0];
  }
  return y;
}

describe("int8-activation path", () => {
  it(`reports VNNI (${hasVnni()}) and follows the documented order bit for bit`, () => {
    for (const cols of [32, 96, 128, 160, 512]) {
      const m = randomMatrix(9, cols, cols, 100, 140);
      const x = uniform(cols, -2, 2, cols + 1);
      const expected = referenceInt8(m, x);
      for (const level of available) {
        setSimdLevel(level);
        setThreadCount(2);
        expect(bytesEqual(matvecInt8(m, x, new Float32Array(9)), expected), `${level} cols ${cols}`).toBe(true);
      }
    }
  });

  it("is bit-identical across levels, thread counts and batch sizes", () => {
    const m = randomMatrix(37, 3584 / 4, 3);
    const X = uniform(5 * m.cols, -1, 1, 4);
    setSimdLevel("scalar");
    setThreadCount(1);
    const expected = matmulInt8(m, X, new Float32Array(5 * 37), 5);
    for (const level of available)
      for (const threads of [1, 2, 3]) {
        setSimdLevel(level);
        setThreadCount(threads);
        expect(bytesEqual(matmulInt8(m, X, new Float32Array(5 * 37), 5), expected), `${level} x${threads}`).toBe(true);
        expect(bytesEqual(matvecInt8(m, X.subarray(2 * m.cols, 3 * m.cols), new Float32Array(37)), expected.subarray(2 * 37, 3 * 37))).toBe(true);
      }
  });

  it("batched kernels (n >= 2) follow the documented order: short last group, odd rows and batches, every level and thread count", () => {
    for (const cols of [160, 1024]) {
      const m = randomMatrix(39, cols, cols + 7, 100, 140);
      const batch = 11;
      const X = uniform(batch * cols, -2, 2, cols + 8);
      const expected = new Float32Array(batch * 39);
      for (let b = 0; b < batch; b++) expected.set(referenceInt8(m, X.subarray(b * cols, (b + 1) * cols)), b * 39);
      for (const level of available)
        for (const threads of [1, 2, 3])
          for (const n of [2, 3, 4, 7, 11]) {
            setSimdLevel(level);
            setThreadCount(threads);
            const Y = matmulInt8(m, X.subarray(0, n * cols), new Float32Array(n * 39), n);
            expect(bytesEqual(Y, expected.subarray(0, n * 39)), `${level} x${threads} cols ${cols} batch ${n}`).toBe(true);
          }
    }
  });

  it("stays within 1% of sum|w x| of the fp32 path (activation rounding), typically ~1e-3", () => {
    const m = randomMatrix(64, 3584, 5);
    const x = uniform(3584, -1, 1, 6);
    setSimdLevel(bestSimdLevel());
    const exact = matvec(m, x, new Float32Array(64));
    const approx = matvecInt8(m, x, new Float32Array(64));
    let worst = 0;
    let mean = 0;
    for (let r = 0; r < 64; r++) {
      let magnitude = 0;
      for (let k = 0; k < 3584; k++) magnitude += Math.abs(elementF64(m, r, k) * x[k]);
      const e = Math.abs(approx[r] - exact[r]) / magnitude;
      worst = Math.max(worst, e);
      mean += e / 64;
    }
    console.log(`int8 path error / sum|w x|: mean ${mean.toExponential(2)}, worst ${worst.toExponential(2)}`);
    expect(worst).toBeLessThan(1e-2);
    expect(worst).toBeGreaterThan(0); // it is an approximation: a zero error would mean the test is not running it
  });

  it("propagates a non-finite activation as NaN and treats an all-zero block as zero", () => {
    const m = randomMatrix(3, 64, 7);
    const x = new Float32Array(64);
    expect(Array.from(matvecInt8(m, x, new Float32Array(3)))).toEqual([0, 0, 0]);
    x[40] = Infinity;
    expect(matvecInt8(m, x, new Float32Array(3)).every(Number.isNaN)).toBe(true);
  });
});
