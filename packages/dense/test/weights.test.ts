// Weight views (Linear, vectorF32, bf16ToF32) and the GLU MLP: the views multiply through the GEMV
// and GEMM kernels unchanged (same bits), the one bf16 widen reads any view, and GluMlp is the
// composition down(φ(gate x, up x)) with the bounds it is given.
import { describe, expect, it } from "vitest";
import { applyGlu, bf16ToF32, f32ToBf16, gemmBf16, gemvBf16, gemvF32, GluMlp, K3_SITU_BETAS, Linear, rowsOf, situGlu, vectorF32 } from "../src/index.js";
import { bytesEqual } from "../../test-utils/src/compare.js";
import { uniform } from "../../test-utils/src/random.js";

describe("bf16ToF32", () => {
  it("widens a Uint16Array and the bytes of one at any offset to the same exact values", () => {
    const bits = f32ToBf16(uniform(37, -3, 3, 1));
    const want = bf16ToF32(bits);
    for (let i = 0; i < 37; i++) expect(new Uint32Array(want.buffer)[i]).toBe((bits[i] << 16) >>> 0);
    const odd = new Uint8Array(2 * 37 + 1);
    odd.set(new Uint8Array(bits.buffer), 1);
    expect(bytesEqual(bf16ToF32(odd.subarray(1)), want)).toBe(true);
    const out = new Float32Array(40).fill(7);
    expect(bf16ToF32(new Uint8Array(bits.buffer), out)).toHaveLength(37);
    expect(bytesEqual(out.subarray(0, 37), want)).toBe(true);
    expect(out[37]).toBe(7);
    expect(() => bf16ToF32(new Uint8Array(3))).toThrow(/3 bytes are not a whole number of bf16 values/);
  });
});

describe("Linear", () => {
  const rows = 19, cols = 45;
  const w = uniform(rows * cols, -1, 1, 2);
  const wb = f32ToBf16(w);
  const X = uniform(5 * cols, -2, 2, 3);

  it("apply runs gemv for one token and gemm for T, bit-identical to the kernels, f32 and bf16", () => {
    const f = new Linear("w", w, rows, cols);
    const b = new Linear("w", { dtype: "BF16", shape: [rows, cols], data: new Uint8Array(wb.buffer) }, rows, cols);
    expect([f.dtype, b.dtype, f.bytes, b.bytes]).toEqual(["F32", "BF16", rows * cols * 4, rows * cols * 2]);
    const x = X.subarray(0, cols);
    expect(bytesEqual(f.apply(x, 1), gemvF32(w, x, new Float32Array(rows), { rows, cols }))).toBe(true);
    expect(bytesEqual(b.apply(x, 1), gemvBf16(wb, x, new Float32Array(rows), { rows, cols }))).toBe(true);
    expect(bytesEqual(b.apply(X, 5), gemmBf16(wb, X, new Float32Array(5 * rows), { rows, cols, batch: 5 }))).toBe(true);
  });

  it("copies a misaligned tensor once and multiplies it the same", () => {
    const bytes = new Uint8Array(w.byteLength + 1);
    bytes.set(new Uint8Array(w.buffer), 1);
    const l = new Linear("w", { dtype: "F32", data: bytes.subarray(1) }, rows, cols);
    expect(bytesEqual(l.raw, w)).toBe(true);
    expect(bytesEqual(l.apply(X, 5), new Linear("w", w, rows, cols).apply(X, 5))).toBe(true);
  });

  it("names the weight and what was expected, through the caller's error factory", () => {
    class MyError extends Error {}
    const fail = (m: string) => new MyError(m);
    expect(() => new Linear("q_proj", undefined, rows, cols, fail)).toThrow(MyError);
    expect(() => new Linear("q_proj", { dtype: "F16", data: new Uint8Array(8) }, 2, 2)).toThrow(/weight 'q_proj' has dtype F16; expected F32 or BF16/);
    expect(() => new Linear("q_proj", { dtype: "F32", shape: [cols, rows], data: w }, rows, cols)).toThrow(/weight 'q_proj' has shape \[45, 19\], expected \[19, 45\]/);
    expect(() => new Linear("q_proj", w.subarray(1), rows, cols)).toThrow(/has 854 values, expected 855/);
    expect(vectorF32("norm", { dtype: "BF16", shape: [1, 4], data: f32ToBf16(new Float32Array([1, 2, 3, 4])) }, [4])).toEqual(new Float32Array([1, 2, 3, 4]));
    expect(rowsOf("a", w, cols)).toBe(rows);
  });
});

describe("GluMlp", () => {
  const inDim = 24, hidden = 40, T = 3;
  const gate = new Linear("gate", uniform(hidden * inDim, -1, 1, 4), hidden, inDim);
  const up = new Linear("up", f32ToBf16(uniform(hidden * inDim, -1, 1, 5)), hidden, inDim);
  const down = new Linear("down", uniform(inDim * hidden, -0.5, 0.5, 6), inDim, hidden);
  const x = uniform(T * inDim, -3, 3, 7);
  const composed = (beta: number, linearBeta: number) => {
    const g = gate.apply(x, T), u = up.apply(x, T);
    return down.apply(situGlu(g, u, g, beta, linearBeta), T);
  };

  it("is down(φ(gate x, up x)) with the bounds it is given", () => {
    const mlp = new GluMlp(gate, up, down, "situ", { beta: 1.5, linearBeta: 3 });
    expect([mlp.inDim, mlp.hidden, mlp.outDim, mlp.bytes]).toEqual([inDim, hidden, inDim, gate.bytes + up.bytes + down.bytes]);
    const custom = mlp.forward(x, T, new Float32Array(T * inDim));
    expect(bytesEqual(custom, composed(1.5, 3))).toBe(true);
    const k3 = new GluMlp(gate, up, down, "situ", K3_SITU_BETAS).forward(x, T, new Float32Array(T * inDim));
    expect(bytesEqual(k3, composed(4, 25))).toBe(true);
    expect(bytesEqual(custom, k3)).toBe(false); // the bounds matter for these inputs
  });

  it("SiLU-GLU ignores the bounds; mismatched shapes are refused", () => {
    const a = new GluMlp(gate, up, down, "silu", K3_SITU_BETAS).forward(x, T, new Float32Array(T * inDim));
    const b = new GluMlp(gate, up, down, "silu", { beta: 1, linearBeta: 1 }).forward(x, T, new Float32Array(T * inDim));
    expect(bytesEqual(a, b)).toBe(true);
    const g = gate.apply(x, T), u = up.apply(x, T);
    expect(bytesEqual(a, down.apply(applyGlu("silu", g, u, g, K3_SITU_BETAS), T))).toBe(true);
    expect(() => new GluMlp(gate, down, down, "situ", K3_SITU_BETAS)).toThrow(/do not chain/);
  });
});
