/**
 * The native batched experts (denseExperts / ExpertCompute.runMany), the native shared expert and
 * the native weighted sum against the TS path they replace (matmul, applyGlu, matmul per expert;
 * the fround loop), bit for bit, at every SIMD level and 1-3 threads.
 */
import { afterEach, describe, expect, it } from "vitest";
import { bestSimdLevel, setSimdLevel, setThreadCount, simdLevel, threadCount, type SimdLevel } from "@k3/dense";
import type { ExpertLocation } from "../src/checkpoint.js";
import { denseMatrix, matmul } from "../src/dense-weight.js";
import { applyGlu, denseExpertCompute, type GluActivation } from "../src/expert-compute.js";
import type { ExpertHandle } from "../src/expert-store.js";
import { MoeLayer, type ExpertProvider } from "../src/moe-layer.js";
import { native } from "../src/native.js";
import { Router } from "../src/router.js";

const level0 = simdLevel();
const threads0 = threadCount();
afterEach(() => {
  setSimdLevel(level0);
  setThreadCount(threads0);
});
const levels = (): SimdLevel[] => {
  const all: SimdLevel[] = ["scalar", "avx2", "avx512"];
  return all.slice(0, all.indexOf(bestSimdLevel()) + 1);
};

let seed = 7;
const rnd = () => ((seed = (seed * 1103515245 + 12345) >>> 0) / 2 ** 32) - 0.5;
const f32 = (n: number, s = 1) => Float32Array.from({ length: n }, () => rnd() * s);
const toBf16 = (f: Float32Array) => new Uint8Array(Uint16Array.from(new Uint32Array(f.buffer), (b) => b >>> 16).buffer);

/** One expert's bytes (w1, w2, w3 in checkpoint order) and its location. */
function expert(id: number, inDim: number, inter: number, dtype: "BF16" | "F32"): { bytes: Uint8Array; location: ExpertLocation } {
  const w = (n: number) => {
    const f = f32(n, 0.2);
    return dtype === "BF16" ? toBf16(f) : new Uint8Array(f.buffer);
  };
  const [w1, w2, w3] = [w(inter * inDim), w(inDim * inter), w(inter * inDim)];
  const bytes = new Uint8Array(w1.length + w2.length + w3.length);
  bytes.set(w1, 0);
  bytes.set(w2, w1.length);
  bytes.set(w3, w1.length + w2.length);
  const t = (offset: number, byteLength: number, shape: number[]) => ({ offset, byteLength, dtype, shape });
  return {
    bytes,
    location: { layer: 1, id, file: "mem", offset: 0, byteLength: bytes.length, tensors: { "w1.weight": t(0, w1.length, [inter, inDim]), "w2.weight": t(w1.length, w2.length, [inDim, inter]), "w3.weight": t(w1.length + w2.length, w3.length, [inter, inDim]) } },
  };
}

describe("denseExpertCompute.runMany (native, two dispatches) = run() per expert", () => {
  for (const dtype of ["BF16", "F32"] as const)
    for (const activation of ["silu", "situ"] as GluActivation[])
      it(`${dtype} ${activation}: experts serving 1, 3 and 2 rows, scattered rows, every level and thread count`, () => {
        // inter 200 and in 1030: several tasks per expert with a ragged last block.
        const inDim = 1030;
        const inter = 200;
        const compute = denseExpertCompute({ inDim, interDim: inter, activation, situBetas: { beta: 1.5, linearBeta: 3 } });
        const ex = [expert(0, inDim, inter, dtype), expert(1, inDim, inter, dtype), expert(2, inDim, inter, dtype)];
        const counts = [1, 3, 2];
        const X = f32(5 * inDim, 4);
        const xRow = Int32Array.from([4, 0, 2, 4, 1, 3]);
        const yRow = Int32Array.from([6, 0, 3, 1, 5, 2]);
        // Reference: each expert's rows gathered, run(), scattered.
        const ref = new Float32Array(7 * inDim).fill(NaN);
        let r0 = 0;
        ex.forEach((e, i) => {
          const n = counts[i];
          const Xe = new Float32Array(n * inDim);
          for (let b = 0; b < n; b++) Xe.set(X.subarray(xRow[r0 + b] * inDim, (xRow[r0 + b] + 1) * inDim), b * inDim);
          const Ye = new Float32Array(n * inDim);
          compute.run(e.bytes, e.location, Xe, n, Ye);
          for (let b = 0; b < n; b++) ref.set(Ye.subarray(b * inDim, (b + 1) * inDim), yRow[r0 + b] * inDim);
          r0 += n;
        });
        expect(ref.slice(4 * inDim, 5 * inDim).every(Number.isNaN)).toBe(true); // row 4 is never written
        for (const level of levels())
          for (const threads of [1, 2, 3]) {
            setSimdLevel(level);
            setThreadCount(threads);
            const Y = new Float32Array(7 * inDim).fill(NaN);
            compute.runMany!(ex.map((e, i) => ({ ...e, rows: counts[i] })), X, xRow, Y, yRow);
            expect(Buffer.from(Y.buffer).equals(Buffer.from(ref.buffer)), `${level} x ${threads}`).toBe(true);
          }
      });

  it("refuses a wrong matrix size and a row index outside x or y", () => {
    const bf = new Uint8Array(2 * 8 * 32);
    const w2 = new Uint8Array(2 * 32 * 8);
    const args = (xRow: number, yRow: number, w1 = bf) =>
      native.moeExperts([w1, bf, w2], Int32Array.of(1), 32, 8, 32, true, 0, 4, 25, new Float32Array(64), Int32Array.of(xRow), new Float32Array(64), Int32Array.of(yRow), new Float32Array(1000));
    expect(() => args(0, 1)).not.toThrow();
    expect(() => args(2, 0)).toThrow(/xRow/);
    expect(() => args(0, 2)).toThrow(/yRow/);
    expect(() => args(0, 0, new Uint8Array(10))).toThrow(/bytes, expected/);
  });
});

describe("moeMix (native weighted sum) = the fround loop in router order", () => {
  it("matches bit for bit, -0 terms and large/small weights included", () => {
    const T = 3;
    const k = 5;
    const dim = 37;
    const slots = f32(T * k * dim, 100);
    for (let i = 0; i < dim; i++) slots[i] = -0;
    const w = f32(T * k, 3);
    w[1] = 1e-30;
    const out = new Float32Array(T * dim).fill(NaN);
    native.moeMix(slots, w, T, k, dim, out, null);
    const ref = new Float32Array(T * dim);
    for (let t = 0; t < T; t++)
      for (let j = 0; j < k; j++)
        for (let d = 0; d < dim; d++) ref[t * dim + d] = Math.fround(ref[t * dim + d] + Math.fround(w[t * k + j] * slots[(t * k + j) * dim + d]));
    expect(Buffer.from(out.buffer).equals(Buffer.from(ref.buffer))).toBe(true);
    // With the shared term: added after the sum, each element rounded (the TS fround add).
    const add = f32(T * dim, 50);
    native.moeMix(slots, w, T, k, dim, out, add);
    for (let i = 0; i < ref.length; i++) ref[i] = Math.fround(ref[i] + add[i]);
    expect(Buffer.from(out.buffer).equals(Buffer.from(ref.buffer))).toBe(true);
    const a2 = out.slice();
    native.moeAdd(a2, add, a2.length);
    expect(Array.from(a2)).toEqual(Array.from(out, (v, i) => Math.fround(v + add[i])));
  });
});

describe("MoeLayer (48B shape, bf16, resident experts): native path = TS reference composition", () => {
  it("router, batched experts, shared expert and mix give the TS reference's bits at every level and thread count", async () => {
    const D = 96;
    const I = 40;
    const E = 12;
    const K = 4;
    const T = 3;
    const ex = Array.from({ length: E }, (_, id) => expert(id, D, I, "BF16"));
    const provider: ExpertProvider = {
      request(layer, ids) {
        const hs = Array.from(ids, (id): ExpertHandle => ({ layer, id, ...ex[id], source: "resident", readId: id, release() {} }));
        return { handles: hs.map((h) => Promise.resolve(h)), async *completed() { yield* hs; } };
      },
    };
    const mat = (r: number, c: number, n: string) => denseMatrix(toBf16(f32(r * c, 0.3)), "BF16", [r, c], n);
    const router = new Router({ numExperts: E, topK: K, routedScalingFactor: 2.446 }, mat(E, D, "gate"), f32(E, 0.1));
    const shared = { gate: mat(I, D, "sg"), up: mat(I, D, "su"), down: mat(D, I, "sd") };
    const compute = denseExpertCompute({ inDim: D, interDim: I, activation: "silu" });
    const layer = new MoeLayer({ layer: 1, hidden: D, router, experts: provider, compute, shared, activation: "silu" });
    const x = f32(T * D, 2);
    // The TS reference: router, run() per (token, rank), fround mix, matmul/applyGlu/matmul shared.
    const routing = router.route(x, T);
    const ref = new Float32Array(T * D);
    const y = new Float32Array(D);
    for (let t = 0; t < T; t++)
      for (let j = 0; j < K; j++) {
        const e = ex[routing.ids[t * K + j]];
        compute.run(e.bytes, e.location, x.subarray(t * D, (t + 1) * D), 1, y);
        for (let d = 0; d < D; d++) ref[t * D + d] = Math.fround(ref[t * D + d] + Math.fround(routing.weights[t * K + j] * y[d]));
      }
    const g = matmul(shared.gate, x, T, new Float32Array(T * I));
    const u = matmul(shared.up, x, T, new Float32Array(T * I));
    applyGlu("silu", g, u, g);
    const s = matmul(shared.down, g, T, new Float32Array(T * D));
    for (let i = 0; i < ref.length; i++) ref[i] = Math.fround(ref[i] + s[i]);
    for (const level of levels())
      for (const threads of [1, 2, 3]) {
        setSimdLevel(level);
        setThreadCount(threads);
        const out = await layer.forward(x, T);
        expect(Buffer.from(out.buffer, out.byteOffset, out.byteLength).equals(Buffer.from(ref.buffer)), `${level} x ${threads}`).toBe(true);
      }
  });
});
