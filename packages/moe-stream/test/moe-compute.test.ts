/**
 * The native batched experts (denseExperts / ExpertCompute.runMany, bf16/f32 and MXFP4), the native
 * shared expert and the native weighted sum against the TS path they replace (Linear.apply, applyGlu,
 * Linear.apply per expert; the fround loop), bit for bit, at every SIMD level and 1-3 threads.
 */
import { afterEach, describe, expect, it } from "vitest";
import { applyGlu, bestSimdLevel, K3_SITU_BETAS, Linear, rmsNorm, setSimdLevel, setThreadCount, simdLevel, threadCount, type GluActivation, type SimdLevel } from "@k3/dense";
import { quantize } from "@k3/mxfp4";
import type { ExpertLocation } from "../src/store/checkpoint.js";
import { denseExpertCompute, mxfp4ExpertCompute, type ExpertCompute } from "../src/moe/expert-compute.js";
import type { ExpertHandle } from "../src/store/expert-store.js";
import { MoeLayer, type ExpertProvider } from "../src/moe/moe-layer.js";
import { native } from "../src/native.js";
import { Router } from "../src/moe/router.js";

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

/** Experts served from memory, every request resolved at once (no store). */
function residentProvider(ex: { bytes: Uint8Array; location: ExpertLocation }[]): ExpertProvider {
  return {
    request(layer, ids) {
      const hs = Array.from(ids, (id): ExpertHandle => ({ layer, id, ...ex[id], source: "resident", readId: id, release() {} }));
      return { handles: hs.map((h) => Promise.resolve(h)), async *completed() { yield* hs; } };
    },
  };
}

/** A random bf16 Linear of r x c (values within ±0.15). */
const mat = (r: number, c: number, n: string) => new Linear(n, { dtype: "BF16", data: toBf16(f32(r * c, 0.3)) }, r, c);

/** ref += the shared experts' GLU MLP of x (T rows), the TS path: Linear.apply and applyGlu. */
function addShared(ref: Float32Array, shared: { gate: Linear; up: Linear; down: Linear }, activation: GluActivation, x: Float32Array, T: number): void {
  const g = shared.gate.apply(x, T, new Float32Array(T * shared.gate.rows));
  const u = shared.up.apply(x, T, new Float32Array(T * shared.up.rows));
  applyGlu(activation, g, u, g, K3_SITU_BETAS);
  const s = shared.down.apply(g, T, new Float32Array(T * shared.down.rows));
  for (let i = 0; i < ref.length; i++) ref[i] = Math.fround(ref[i] + s[i]);
}

/** layer.forward(x, T) equals ref bit for bit at every SIMD level and 1-3 threads (`check` after each run). */
async function expectLayerBits(layer: MoeLayer, x: Float32Array, T: number, ref: Float32Array, check: () => void = () => {}): Promise<void> {
  for (const level of levels())
    for (const threads of [1, 2, 3]) {
      setSimdLevel(level);
      setThreadCount(threads);
      const out = await layer.forward(x, T);
      check();
      expect(Buffer.from(out.buffer, out.byteOffset, out.byteLength).equals(Buffer.from(ref.buffer)), `${level} x ${threads}`).toBe(true);
    }
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
        const ref = perExpert(compute, ex, counts, X, xRow, yRow, 7);
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
    const provider = residentProvider(ex);
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
    addShared(ref, shared, "silu", x, T);
    await expectLayerBits(layer, x, T, ref);
  });
});

/** One MXFP4 expert (w1, w2, w3 packed then scale, checkpoint order) and its location. */
function mxExpert(id: number, inDim: number, inter: number): { bytes: Uint8Array; location: ExpertLocation } {
  const parts: Array<[string, Uint8Array, number[]]> = [];
  for (const [w, rows, cols] of [["w1", inter, inDim], ["w2", inDim, inter], ["w3", inter, inDim]] as const) {
    const m = quantize(f32(rows * cols, 0.4), rows, cols);
    parts.push([`${w}.weight_packed`, m.packed, [rows, cols / 2]], [`${w}.weight_scale`, m.scales, [rows, cols / 32]]);
  }
  const bytes = new Uint8Array(parts.reduce((n, [, b]) => n + b.length, 0));
  const tensors: ExpertLocation["tensors"] = {};
  let at = 0;
  for (const [name, b, shape] of parts) {
    bytes.set(b, at);
    tensors[name] = { offset: at, byteLength: b.length, dtype: "U8", shape };
    at += b.length;
  }
  return { bytes, location: { layer: 1, id, file: "mem", offset: 0, byteLength: bytes.length, tensors } };
}

/** run() per expert on its gathered rows, scattered to yRow (NaN where nothing is written). */
function perExpert(compute: ExpertCompute, ex: ReturnType<typeof mxExpert>[], counts: number[], X: Float32Array, xRow: Int32Array, yRow: Int32Array, yRows: number): Float32Array {
  const { inDim } = compute;
  const ref = new Float32Array(yRows * inDim).fill(NaN);
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
  return ref;
}

describe("mxfp4ExpertCompute.runMany (native, two dispatches through @k3/mxfp4's table) = run() per expert", () => {
  // in 2048 / inter 1056 (1 MiB tasks, moe_mxfp4.c): gate/up tasks of 480, 480 and a ragged 96 rows
  // per expert, down tasks of 1856 and 192; 5 rows take @k3/mxfp4's batched (prefill) kernels, 1-3 its
  // matvec ones.
  const inDim = 2048;
  const inter = 1056;
  const ex = [mxExpert(0, inDim, inter), mxExpert(1, inDim, inter), mxExpert(2, inDim, inter), mxExpert(3, inDim, inter)];
  const counts = [1, 3, 2, 5];
  const X = f32(6 * inDim, 4);
  const xRow = Int32Array.from([4, 0, 2, 4, 1, 3, 5, 0, 1, 2, 3]);
  const yRow = Int32Array.from([6, 0, 3, 1, 5, 2, 7, 8, 9, 10, 11]);
  for (const activation of ["silu", "situ"] as GluActivation[])
    it(`${activation}: experts serving 1, 3, 2 and 5 rows, scattered rows, every level and thread count`, () => {
      const betas = { beta: 1.5, linearBeta: 3 };
      const batched = mxfp4ExpertCompute({ inDim, interDim: inter, activation, situBetas: betas });
      const plain = mxfp4ExpertCompute({ inDim, interDim: inter, activation, situBetas: betas, batched: false });
      expect(plain.runMany).toBeUndefined();
      const ref = perExpert(plain, ex, counts, X, xRow, yRow, 12);
      expect(ref.slice(4 * inDim, 5 * inDim).every(Number.isNaN)).toBe(true); // row 4 is never written
      expect(ref.filter(Number.isNaN).length).toBe(inDim);
      for (const level of levels())
        for (const threads of [1, 2, 3]) {
          setSimdLevel(level);
          setThreadCount(threads);
          const Y = new Float32Array(12 * inDim).fill(NaN);
          const failed = batched.runMany!(ex.map((e, i) => ({ ...e, rows: counts[i] })), X, xRow, Y, yRow);
          expect(failed ?? []).toEqual([]);
          expect(Buffer.from(Y.buffer).equals(Buffer.from(ref.buffer)), `${level} x ${threads}`).toBe(true);
        }
    });

  it("a 0xFF scale fails that expert only, with run()'s error (layer, expert, tensor); NaN input is no failure", () => {
    const compute = mxfp4ExpertCompute({ inDim, interDim: inter, situBetas: K3_SITU_BETAS });
    const plain = mxfp4ExpertCompute({ inDim, interDim: inter, situBetas: K3_SITU_BETAS, batched: false });
    // Expert 1: 0xFF in w3 (gate/up dispatch); expert 3: 0xFF in w2's last row (down dispatch, one element).
    const bad = ex.map((e) => ({ ...e, bytes: e.bytes.slice() }));
    const scale = (e: (typeof bad)[number], name: string, i: number) => (e.bytes[e.location.tensors[name].offset + i] = 0xff);
    scale(bad[1], "w3.weight_scale", 40);
    scale(bad[3], "w2.weight_scale", bad[3].location.tensors["w2.weight_scale"].byteLength - 1);
    const items = bad.map((e, i) => ({ ...e, rows: counts[i] }));
    const ref = perExpert(plain, [ex[0], ex[1], ex[2], ex[3]], counts, X, xRow, yRow, 12);
    const errorOf = (i: number) => {
      try {
        plain.run(bad[i].bytes, bad[i].location, X.subarray(0, inDim), 1, new Float32Array(inDim));
      } catch (err) {
        return err as Error;
      }
      throw new Error("run() accepted a 0xFF scale");
    };
    for (const level of levels())
      for (const threads of [1, 3]) {
        setSimdLevel(level);
        setThreadCount(threads);
        const Y = new Float32Array(12 * inDim).fill(NaN);
        const failed = compute.runMany!(items, X, xRow, Y, yRow) ?? [];
        expect(failed.map((f) => f.index)).toEqual([1, 3]);
        expect(failed[0].error.message).toMatch(/layer 1 expert 1 w3\.weight_scale: scale 0xFF/);
        expect(failed[1].error.message).toMatch(/layer 1 expert 3 w2\.weight_scale: scale 0xFF/);
        expect(failed.map((f) => f.error.message)).toEqual([errorOf(1).message, errorOf(3).message]);
        expect(failed.map((f) => f.error.constructor)).toEqual([errorOf(1).constructor, errorOf(3).constructor]);
        // The good experts' rows (0 and 2: batch rows 0 and 4, 5) are exact.
        for (const r of [0, 4, 5]) {
          const d = yRow[r] * inDim;
          expect(Buffer.from(Y.buffer, d * 4, inDim * 4).equals(Buffer.from(ref.buffer, d * 4, inDim * 4))).toBe(true);
        }
      }
    // A NaN in x flags its experts but their scales are fine: no failure, NaN output as run() gives.
    const Xn = X.slice();
    Xn[3 * inDim + 7] = NaN; // row 3: expert 2's second row
    const Y = new Float32Array(12 * inDim);
    expect(compute.runMany!(ex.map((e, i) => ({ ...e, rows: counts[i] })), Xn, xRow, Y, yRow) ?? []).toEqual([]);
    const refN = perExpert(plain, ex, counts, Xn, xRow, yRow, 12);
    expect(Y.subarray(2 * inDim, 3 * inDim).every(Number.isNaN)).toBe(true);
    expect(Buffer.from(Y.buffer, 0, 4 * inDim * 4).equals(Buffer.from(refN.buffer, 0, 4 * inDim * 4))).toBe(true);
  });

  it("refuses wrong matrix sizes, a block-unaligned width and row indices outside x or y", () => {
    const mats = (inD: number, int: number) => [int * inD / 2, int * inD / 32, int * inD / 2, int * inD / 32, inD * int / 2, inD * int / 32].map((n) => new Uint8Array(n));
    const call = (m: Uint8Array[], inD: number, int: number, xRow: number, yRow: number) =>
      native.moeExpertsMxfp4(m, Int32Array.of(1), inD, int, inD, 1, 4, 25, new Float32Array(2 * inD), Int32Array.of(xRow), new Float32Array(2 * inD), Int32Array.of(yRow), new Float32Array(10000), new Uint8Array(1));
    expect(call(mats(64, 32), 64, 32, 0, 1)).toBe(0);
    expect(() => call(mats(64, 32), 64, 32, 2, 0)).toThrow(/xRow/);
    expect(() => call(mats(64, 32), 64, 32, 0, 2)).toThrow(/yRow/);
    const short = mats(64, 32);
    short[3] = new Uint8Array(3);
    expect(() => call(short, 64, 32, 0, 0)).toThrow(/mats\[3\] has 3 bytes, expected 64/);
    expect(() => call(mats(48, 32), 48, 32, 0, 0)).toThrow(/multiples of 32/);
    expect(() => call(mats(64, 32).slice(0, 5), 64, 32, 0, 0)).toThrow(/6 views per expert/);
  });
});

describe("MoeLayer (K3 shape: latent, MXFP4 experts, SiTU, bf16 shared): batched path = TS reference composition", () => {
  it("router, latent down, runMany, mix, latent norm + up and shared give the reference's bits at every level and thread count", async () => {
    const D = 128;
    const L = 96; // latent (expert width)
    const I = 64;
    const E = 12;
    const K = 4;
    const T = 3;
    const ex = Array.from({ length: E }, (_, id) => mxExpert(id, L, I));
    const provider = residentProvider(ex);
    const router = new Router({ numExperts: E, topK: K, routedScalingFactor: 1.0 }, mat(E, D, "gate"), f32(E, 0.1));
    const shared = { gate: mat(2 * I, D, "sg"), up: mat(2 * I, D, "su"), down: mat(D, 2 * I, "sd") };
    const latent = { down: mat(L, D, "down"), up: mat(D, L, "up"), norm: f32(L, 2), eps: 1e-5 };
    const compute = mxfp4ExpertCompute({ inDim: L, interDim: I, situBetas: K3_SITU_BETAS });
    expect(compute.runMany).toBeDefined();
    const layer = new MoeLayer({ layer: 1, hidden: D, router, experts: provider, compute, shared, latent, activation: "situ", situBetas: K3_SITU_BETAS });
    const x = f32(T * D, 2);
    // The TS reference: router, u = W↓ x, run() per (token, rank), fround mix, RMSNorm, W↑, + shared.
    const plain = mxfp4ExpertCompute({ inDim: L, interDim: I, situBetas: K3_SITU_BETAS, batched: false });
    const routing = router.route(x, T);
    const u = latent.down.apply(x, T, new Float32Array(T * L));
    const r = new Float32Array(T * L);
    const y = new Float32Array(L);
    for (let t = 0; t < T; t++)
      for (let j = 0; j < K; j++) {
        const e = ex[routing.ids[t * K + j]];
        plain.run(e.bytes, e.location, u.subarray(t * L, (t + 1) * L), 1, y);
        for (let d = 0; d < L; d++) r[t * L + d] = Math.fround(r[t * L + d] + Math.fround(routing.weights[t * K + j] * y[d]));
      }
    rmsNorm(r, latent.norm, latent.eps, r, L);
    const ref = latent.up.apply(r, T, new Float32Array(T * D));
    addShared(ref, shared, "situ", x, T);
    await expectLayerBits(layer, x, T, ref, () => expect(layer.lastStats!.uniqueExperts).toBeGreaterThan(K));
  });
});
