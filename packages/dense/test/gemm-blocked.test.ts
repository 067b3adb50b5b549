// The blocked batched GEMM (prefill, batch >= 2: native/src/gemm_blocked_*.c) and the opt-in rounded
// bf16 GEMM (gemm_rounded*.c). The blocked kernels must give the scalar reference's bits at every SIMD
// level and thread count, across K blocks (1024 values), row blocks (64), and every micro-kernel tail
// (rows % 4 or % 2, batch % 6 or % 3, cols % 16).
import { describe, expect, it } from "vitest";
import * as dense from "../src/index.js";
import {
  bf16ToF32,
  f32ToBf16,
  gemmBf16,
  gemmBf16Rounded,
  gemmF32,
  roundedGemmUsesDpbf16,
} from "../src/index.js";
// @k3/test-utils depends on @k3/dense (a cycle in turbo's graph), so these dependency-free modules are imported by path.
import { bytesEqual } from "../../test-utils/src/compare.js";
import { uniform } from "../../test-utils/src/random.js";
import { testedSimdLevels } from "../../test-utils/src/settings.js";
import { at } from "./products.js";

const available = testedSimdLevels(dense);

// rows, cols, ld, batch: K blocks (cols > 1024, > 2048), row blocks (rows > 64), every tail, and batches
// over the 64-row pieces a kernel call takes (gemm.c BATCH_PIECE: 150 = 64 + 64 + 22, 129 = 64 + 64 + 1).
const cases: Array<[number, number, number, number]> = [
  [13, 1100, 1103, 150],
  [66, 2100, 2100, 129],
  [5, 1025, 1025, 2],
  [67, 2065, 2070, 7],
  [130, 1040, 1040, 13],
  [9, 3100, 3101, 16],
  [70, 300, 300, 33],
  [4, 2048, 2048, 64],
  [3, 17, 17, 6],
];

describe("blocked gemm (batch >= 2)", () => {
  it.each(cases)("gives the scalar reference's bits at every level and thread count (%i x %i ld %i, batch %i)", (rows, cols, ld, batch) => {
    const wf = uniform(rows * ld, -1, 1, 91);
    const wb = f32ToBf16(wf);
    const wr = bf16ToF32(wb);
    const X = uniform(batch * cols, -2, 2, 92);
    at("scalar", 1);
    const refB = gemmBf16(wb, X, new Float32Array(batch * rows), { rows, cols, ld, batch });
    const refF = gemmF32(wr, X, new Float32Array(batch * rows), { rows, cols, ld, batch });
    expect(bytesEqual(refB, refF), "bf16 and its f32 widening agree at scalar").toBe(true);
    for (const level of available)
      for (const threads of [1, 2, 3]) {
        at(level, threads);
        const yb = gemmBf16(wb, X, new Float32Array(batch * rows), { rows, cols, ld, batch });
        const yf = gemmF32(wr, X, new Float32Array(batch * rows), { rows, cols, ld, batch });
        expect(bytesEqual(yb, refB), `bf16 ${level} x${threads}`).toBe(true);
        expect(bytesEqual(yf, refF), `f32 ${level} x${threads}`).toBe(true);
      }
  });

  it("widens every finite bf16 bit pattern exactly (the one-op vpermw widening), in full vectors and the tail", () => {
    // 65536 patterns minus the NaNs (their payloads are not part of the contract): +-0, subnormals,
    // the largest finite values and +-inf, each weight once, against activations of mixed sign and
    // size; cols % 16 = 11 puts some patterns in the masked tail.
    const rows = 61, cols = 1075, batch = 9;
    const wb = new Uint16Array(rows * cols);
    for (let i = 0; i < wb.length; i++) {
      let b = (i * 40503) & 0xffff;
      if (i < (rows - 2) * cols) b &= 0xbfff; // |w| < 2 (finite sums) except in the last two rows
      wb[i] = (b & 0x7f80) === 0x7f80 && (b & 0x7f) !== 0 ? b & 0xff80 : b; // NaN -> inf of its sign
    }
    const X = uniform(batch * cols, -2, 2, 93).map((v, i) => (i % 7 === 0 ? v * 1e-30 : v));
    at("scalar", 1);
    const ref = gemmBf16(wb, X, new Float32Array(batch * rows), { rows, cols, batch });
    expect(ref.subarray(0, rows - 2).every(Number.isFinite)).toBe(true);
    const canon = (y: Float32Array) => y.map((v) => (Number.isNaN(v) ? NaN : v)); // inf - inf makes NaN
    for (const level of available)
      for (const threads of [1, 2]) {
        at(level, threads);
        const y = gemmBf16(wb, X, new Float32Array(batch * rows), { rows, cols, batch });
        expect(bytesEqual(canon(y), canon(ref)), `${level} x${threads}`).toBe(true);
      }
  });

  it("keeps -0, inf and NaN exactly across K blocks and in the tail lanes", () => {
    const rows = 6, cols = 1024 + 19, batch = 7;
    const wf = new Float32Array(rows * cols).fill(-0);
    wf[cols + 1030] = 1;
    wf[3 * cols + 5] = Infinity;
    const X = new Float32Array(batch * cols).fill(1);
    X[1040] = Infinity;
    X[2 * cols + 1042] = -0;
    X[4 * cols + 7] = NaN;
    at("scalar", 1);
    const expected = gemmF32(wf, X, new Float32Array(batch * rows), { rows, cols, batch });
    const expectedB = gemmBf16(f32ToBf16(wf), X, new Float32Array(batch * rows), { rows, cols, batch });
    for (const level of available) {
      at(level, 2);
      const y = gemmF32(wf, X, new Float32Array(batch * rows), { rows, cols, batch });
      const yb = gemmBf16(f32ToBf16(wf), X, new Float32Array(batch * rows), { rows, cols, batch });
      for (let i = 0; i < y.length; i++) {
        expect(Object.is(y[i], expected[i]), `f32 ${level} ${i}: ${y[i]} vs ${expected[i]}`).toBe(true);
        expect(Object.is(yb[i], expectedB[i]), `bf16 ${level} ${i}`).toBe(true);
      }
    }
    expect(expected.some(Number.isNaN) && expected.some((v) => v === Infinity), "the case reaches NaN and inf outputs").toBe(true);
  });
});

describe("gemmBf16Rounded (opt-in, activations rounded to bf16)", () => {
  const roundX = (X: Float32Array) => bf16ToF32(f32ToBf16(X));

  it.each(cases)("is bit-identical across thread counts at every level (%i x %i ld %i, batch %i)", (rows, cols, ld, batch) => {
    const wb = f32ToBf16(uniform(rows * ld, -1, 1, 93));
    const X = uniform(batch * cols, -2, 2, 94);
    for (const level of available) {
      at(level, 1);
      const ref = gemmBf16Rounded(wb, X, new Float32Array(batch * rows), { rows, cols, ld, batch });
      for (const threads of [2, 3]) {
        at(level, threads);
        const y = gemmBf16Rounded(wb, X, new Float32Array(batch * rows), { rows, cols, ld, batch });
        expect(bytesEqual(y, ref), `${level} x${threads}`).toBe(true);
      }
    }
  });

  it("without vdpbf16ps it is the exact gemm of the bf16-rounded activations", () => {
    const rows = 37, cols = 1100, batch = 9;
    const wb = f32ToBf16(uniform(rows * cols, -1, 1, 95));
    const X = uniform(batch * cols, -3, 3, 96);
    for (const level of available) {
      at(level, 2);
      if (roundedGemmUsesDpbf16()) continue;
      const y = gemmBf16Rounded(wb, X, new Float32Array(batch * rows), { rows, cols, batch });
      const e = gemmBf16(wb, roundX(X), new Float32Array(batch * rows), { rows, cols, batch });
      expect(bytesEqual(y, e), level).toBe(true);
    }
    at("scalar", 1);
    expect(roundedGemmUsesDpbf16()).toBe(false);
  });

  it("stays within the bf16 rounding bound of the exact path, and is not the exact path", () => {
    // |rounded - exact| <= sum_k |w_k x_k| (2^-8 + 2 (cols / 16 + 5) 2^-24): X's rounding (<= 2^-9 relative
    // per element) plus both paths' fp32 accumulation (any order). Rel-L2 stays near 2^-9 / sqrt(3).
    for (const [rows, cols, batch] of [[64, 7168, 8], [48, 3584, 32], [40, 12288, 4]] as const) {
      const wf = uniform(rows * cols, -1, 1, 97);
      const wb = f32ToBf16(wf);
      const w = bf16ToF32(wb);
      const X = uniform(batch * cols, -1, 1, 98);
      for (const level of available) {
        at(level, 2);
        const y = gemmBf16Rounded(wb, X, new Float32Array(batch * rows), { rows, cols, batch });
        const e = gemmBf16(wb, X, new Float32Array(batch * rows), { rows, cols, batch });
        let err2 = 0, ref2 = 0, differs = false;
        for (let b = 0; b < batch; b++)
          for (let r = 0; r < rows; r++) {
            let abs = 0;
            for (let k = 0; k < cols; k++) abs += Math.abs(w[r * cols + k] * X[b * cols + k]);
            const i = b * rows + r, d = y[i] - e[i];
            expect(Math.abs(d), `${level} ${rows}x${cols} b${b} r${r}`).toBeLessThanOrEqual(abs * (2 ** -8 + 2 * (cols / 16 + 5) * 2 ** -24));
            err2 += d * d;
            ref2 += e[i] * e[i];
            if (d !== 0) differs = true;
          }
        expect(Math.sqrt(err2 / ref2), `${level} rel-L2`).toBeLessThan(4e-3);
        expect(differs, `${level}: rounding X must change some output`).toBe(true);
      }
    }
  });

  it("validates its arguments, naming the wrong one", () => {
    const w = new Uint16Array(12);
    expect(() => gemmBf16Rounded(w, new Float32Array(7), new Float32Array(6), { rows: 3, cols: 4, batch: 2 })).toThrow(
      /gemmBf16Rounded: X holds fewer than batch x cols/,
    );
    expect(() => gemmBf16Rounded(w, new Float32Array(8), new Float32Array(5), { rows: 3, cols: 4, batch: 2 })).toThrow(
      /gemmBf16Rounded: Y holds fewer than batch x rows/,
    );
    expect(() => gemmBf16Rounded(w, new Float32Array(8), new Float32Array(8), { rows: 4, cols: 4, batch: 2 })).toThrow(
      /gemmBf16Rounded: .*fewer than rows x cols bf16/,
    );
    expect(() => gemmBf16Rounded(w, new Float32Array(8), new Float32Array(6), { rows: 3, cols: 4, batch: 2, ld: 3 })).toThrow(/ld must be >= cols/);
    const odd = new Uint8Array(new ArrayBuffer(26), 1, 24);
    expect(() => gemmBf16Rounded(odd, new Float32Array(8), new Float32Array(6), { rows: 3, cols: 4, batch: 2 })).toThrow(/even byte offset/);
    expect(() => gemmBf16Rounded(w, new Float32Array(8), new Float32Array(6), { rows: 3, cols: 4, batch: -1 })).toThrow(/'batch' must be a non-negative integer/);
  });
});
