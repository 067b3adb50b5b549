import { f32ToBf16, setSimdLevel, setThreadCount, simdLevel, threadCount } from "@k3/dense";
import { describe, expect, it } from "vitest";
import { K3_KDA, KdaError, KdaLayer, KdaState, KIMI_LINEAR_48B_KDA, type KdaConfig, type KdaWeights } from "../src/index.js";
import { bytesEqual, closeTo, f32, fixtureExists, forEachSimdLevelAndThreads, get, manifestTol, readFixture, relErr, uniform, type FixtureTensor } from "@k3/test-utils";

const FORMS = [
  { file: "kda_layer_k3.safetensors", config: { ...K3_KDA, hidden: 128, numHeads: 4, headDim: 16 } as KdaConfig },
  { file: "kda_layer_48b.safetensors", config: { ...KIMI_LINEAR_48B_KDA, hidden: 128, numHeads: 4, headDim: 16 } as KdaConfig },
];

function weightsOf(m: Map<string, FixtureTensor>): KdaWeights {
  const w: Record<string, unknown> = {};
  for (const [name, t] of m) if (name.startsWith("w.")) w[name.slice(2)] = { dtype: "F32", shape: t.shape, data: f32(m, name) };
  return w as unknown as KdaWeights;
}

/** Same weights with every matrix in bf16 (as in the real checkpoints). */
function bf16Weights(w: KdaWeights): KdaWeights {
  const out: Record<string, unknown> = {};
  for (const [k, t] of Object.entries(w)) {
    const v = t as { shape: number[]; data: Float32Array };
    const matrix = k.endsWith("_proj");
    out[k] = matrix ? { dtype: "BF16", shape: v.shape, data: f32ToBf16(v.data) } : v;
  }
  return out as unknown as KdaWeights;
}

describe.each(FORMS)("KdaLayer against $file", ({ file, config }) => {
  const present = fixtureExists(file);
  it.skipIf(!present)("matches out1/state1 and the x2 continuation (out2/state2), with the intermediates", () => {
    const m = readFixture(file);
    const tol = manifestTol(file);
    for (const core of ["auto", "recurrent", "chunked"] as const) {
      const layer = new KdaLayer(weightsOf(m), config);
      layer.trace = true;
      const state = layer.newState();
      const out1 = layer.forward(f32(m, "x1"), state, { core });
      expect(closeTo(out1, get(m, "out1").data, tol).detail, `${core} out1`).toBe("ok");
      const tr = layer.lastTrace!;
      for (const [name, got] of [["q", tr.q], ["k", tr.k], ["v", tr.v], ["g", tr.g], ["beta", tr.beta], ["o_core", tr.oCore]] as const)
        expect(closeTo(got, get(m, `dbg1.${name}`).data, tol).detail, `${core} dbg1.${name}`).toBe("ok");
      expect(closeTo(state.convQ, get(m, "state1.conv_q").data, tol).detail).toBe("ok");
      expect(closeTo(state.convK, get(m, "state1.conv_k").data, tol).detail).toBe("ok");
      expect(closeTo(state.convV, get(m, "state1.conv_v").data, tol).detail).toBe("ok");
      expect(closeTo(state.S, get(m, "state1.S").data, tol).detail).toBe("ok");
      const out2 = layer.forward(f32(m, "x2"), state, { core });
      expect(closeTo(out2, get(m, "out2").data, tol).detail, `${core} out2`).toBe("ok");
      expect(closeTo(state.S, get(m, "state2.S").data, tol).detail).toBe("ok");
      expect(closeTo(state.convV, get(m, "state2.conv_v").data, tol).detail).toBe("ok");
      expect(state.tokens).toBe(8);
    }
  });

  it.skipIf(!present)("the fixture rejects the other gate family and a gate-before-norm output", () => {
    const m = readFixture(file);
    const tol = manifestTol(file);
    const other: KdaConfig = { ...config, gate: config.gate === "k3-lowerbound" ? "48b-softplus" : "k3-lowerbound" };
    const w = weightsOf(m);
    if (other.gate === "48b-softplus") w.A_log = { dtype: "F32", shape: [4], data: f32(m, "w.A_log").slice(0, 4) };
    const wrong = new KdaLayer(w, other);
    expect(closeTo(wrong.forward(f32(m, "x1"), wrong.newState()), get(m, "out1").data, tol).ok).toBe(false);
    // gate before the norm: y = RMSNorm(o * sigmoid(gate)) instead of RMSNorm(o) * sigmoid(gate)
    const layer = new KdaLayer(weightsOf(m), config);
    layer.trace = true;
    layer.forward(f32(m, "x1"), layer.newState());
    const o = layer.lastTrace!.oCore;
    const x = get(m, "x1").data;
    const W = (n: string) => get(m, `w.${n}`).data;
    const T = 5, D = 128, P = 64, dk = 16;
    const gate = new Float64Array(T * P);
    if (m.has("w.g_proj")) {
      for (let t = 0; t < T; t++) for (let r = 0; r < P; r++) { let s = 0; for (let c = 0; c < D; c++) s += W("g_proj")[r * D + c] * x[t * D + c]; gate[t * P + r] = s; }
    } else {
      const ga = W("g_a_proj"), gb = W("g_b_proj"), rank = ga.length / D;
      for (let t = 0; t < T; t++) {
        const a = new Float64Array(rank);
        for (let r = 0; r < rank; r++) { let s = 0; for (let c = 0; c < D; c++) s += ga[r * D + c] * x[t * D + c]; a[r] = s; }
        for (let r = 0; r < P; r++) { let s = 0; for (let c = 0; c < rank; c++) s += gb[r * rank + c] * a[c]; gate[t * P + r] = s; }
      }
    }
    const y = new Float64Array(T * P);
    for (let row = 0; row < T * 4; row++) {
      let ss = 0;
      const tmp = new Float64Array(dk);
      for (let d = 0; d < dk; d++) { tmp[d] = o[row * dk + d] / (1 + Math.exp(-gate[row * dk + d])); ss += tmp[d] ** 2; }
      const f = 1 / Math.sqrt(ss / dk + config.rmsNormEps);
      for (let d = 0; d < dk; d++) y[row * dk + d] = W("o_norm")[d] * tmp[d] * f;
    }
    const out = new Float64Array(T * D);
    for (let t = 0; t < T; t++) for (let r = 0; r < D; r++) { let s = 0; for (let c = 0; c < P; c++) s += W("o_proj")[r * P + c] * y[t * P + c]; out[t * D + r] = s; }
    expect(closeTo(out, get(m, "out1").data, tol).ok).toBe(false);
  });

  it.skipIf(!present)("bf16 weights (the checkpoint dtype) give the same layer within bf16 rounding", () => {
    const m = readFixture(file);
    const w = weightsOf(m);
    const a = new KdaLayer(w, config), b = new KdaLayer(bf16Weights(w), config);
    const ya = a.forward(f32(m, "x1"), a.newState()), yb = b.forward(f32(m, "x1"), b.newState());
    expect(relErr(yb, ya)).toBeLessThan(2e-2);
    expect(relErr(yb, ya)).toBeGreaterThan(0);
  });
});

describe("incremental equals full", () => {
  const [k3] = FORMS;
  it.skipIf(!fixtureExists(k3.file))("token-by-token decode is bit-identical to one recurrent call, and within 1e-5 of the chunked prefill", () => {
    const m = readFixture(k3.file);
    const layer = new KdaLayer(weightsOf(m), k3.config);
    const T = 100, D = 128;
    const x = uniform(T * D, -1, 1, 3);
    const sFull = layer.newState();
    const full = layer.forward(x, sFull, { core: "recurrent" });
    const sChunk = layer.newState();
    const chunkedOut = layer.forward(x, sChunk, { core: "chunked", chunk: 16 });
    const sInc = layer.newState();
    const inc = new Float32Array(T * D);
    for (let t = 0; t < T; t++) inc.set(layer.forward(x.subarray(t * D, (t + 1) * D), sInc), t * D);
    expect(bytesEqual(inc, full)).toBe(true);
    expect(bytesEqual(sInc.S, sFull.S)).toBe(true);
    expect(relErr(chunkedOut, full)).toBeLessThan(1e-5);
    // a prefill split 37 + 63 equals one call
    const sSplit = layer.newState();
    const a = layer.forward(x.subarray(0, 37 * D), sSplit), b = layer.forward(x.subarray(37 * D), sSplit);
    const split = new Float32Array(T * D);
    split.set(a);
    split.set(b, a.length);
    expect(relErr(split, chunkedOut)).toBeLessThan(1e-5);
  });

  it.skipIf(!fixtureExists(k3.file))("one call over T tokens has the bits of its chunk-sized pieces in turn (T mod chunk = 1 included)", () => {
    for (const form of FORMS) {
      const m = readFixture(form.file);
      const layer = new KdaLayer(weightsOf(m), form.config);
      const D = 128;
      for (const [T, C] of [[129, 64], [130, 64], [200, 64], [65, 64], [33, 16], [48, 16]] as const) {
        const x = uniform(T * D, -1, 1, 11 + T);
        const sOne = layer.newState();
        const one = layer.forward(x, sOne, { chunk: C }).slice();
        const sPieces = layer.newState();
        const pieces = new Float32Array(T * D);
        for (let t0 = 0; t0 < T; t0 += C) {
          const t1 = Math.min(T, t0 + C);
          pieces.set(layer.forward(x.subarray(t0 * D, t1 * D), sPieces, { chunk: C }), t0 * D);
        }
        expect(bytesEqual(one, pieces), `${form.file} T=${T} chunk=${C}`).toBe(true);
        expect(bytesEqual(sOne.S, sPieces.S), `${form.file} T=${T} chunk=${C} state`).toBe(true);
        expect(bytesEqual(sOne.convV, sPieces.convV)).toBe(true);
      }
    }
  });

  it.skipIf(!fixtureExists(k3.file))("is bit-identical at every SIMD level and thread count", () => {
    const m = readFixture(k3.file);
    const layer = new KdaLayer(weightsOf(m), k3.config);
    const x = uniform(70 * 128, -1, 1, 9);
    const level0 = simdLevel();
    const threads0 = threadCount();
    setSimdLevel("scalar");
    setThreadCount(1);
    const s0 = layer.newState();
    const ref = layer.forward(x, s0);
    setSimdLevel(level0);
    setThreadCount(threads0);
    forEachSimdLevelAndThreads((level, threads) => {
      const s = layer.newState();
      expect(bytesEqual(layer.forward(x, s), ref), `${level} x${threads}`).toBe(true);
      expect(bytesEqual(s.S, s0.S)).toBe(true);
    });
  });
});

describe("state save / restore", () => {
  const [k3] = FORMS;
  it.skipIf(!fixtureExists(k3.file))("a restored state continues bit for bit (fp32 and bf16)", () => {
    const m = readFixture(k3.file);
    const layer = new KdaLayer(weightsOf(m), k3.config);
    for (const dtype of ["f32", "bf16"] as const) {
      const s = layer.newState(dtype);
      layer.forward(uniform(9 * 128, -1, 1, 1), s);
      const bytes = s.save();
      const restored = KdaState.load(bytes, k3.config);
      expect(restored.dtype).toBe(dtype);
      expect(restored.tokens).toBe(9);
      expect(bytesEqual(restored.save(), bytes)).toBe(true);
      const x2 = uniform(4 * 128, -1, 1, 2);
      expect(bytesEqual(layer.forward(x2, restored), layer.forward(x2, s))).toBe(true);
      expect(bytesEqual(restored.S, s.S)).toBe(true);
    }
  });

  it("copyFrom restores a checkpoint in place (speculative rollback) and refuses another shape or dtype", () => {
    const cfg: KdaConfig = { ...K3_KDA, hidden: 32, numHeads: 2, headDim: 8 };
    const s = new KdaState(cfg);
    s.S[3] = 1.5;
    s.convK[1] = -2;
    s.tokens = 7;
    const checkpoint = new KdaState(cfg).copyFrom(s);
    const before = s.save();
    s.S[3] = 9;
    s.convK[1] = 0;
    s.tokens = 11;
    const S = s.S;
    expect(s.copyFrom(checkpoint)).toBe(s);
    expect(s.S).toBe(S); // the same memory, overwritten
    expect(bytesEqual(s.save(), before)).toBe(true);
    expect(() => s.copyFrom(new KdaState(cfg, "bf16"))).toThrow(/copyFrom: a bf16 state/);
    expect(() => s.copyFrom(new KdaState({ ...cfg, numHeads: 3 }))).toThrow(/does not fit/);
  });

  it("refuses a wrong config, truncation, corruption and garbage with a KdaError naming the problem", () => {
    const cfg: KdaConfig = { ...K3_KDA, hidden: 32, numHeads: 2, headDim: 8 };
    const s = new KdaState(cfg);
    s.S[3] = 1.5;
    const bytes = s.save();
    expect(() => KdaState.load(bytes, { ...cfg, numHeads: 3 })).toThrow(/saved with numHeads=2, config has 3/);
    expect(() => KdaState.load(bytes, { ...cfg, gate: "48b-softplus" })).toThrow(/saved with gate=0, config has 1/);
    expect(() => KdaState.load(bytes.subarray(0, bytes.length - 1), cfg)).toThrow(/truncated or padded/);
    expect(() => KdaState.load(bytes.subarray(0, 10), cfg)).toThrow(/shorter than the 64-byte header/);
    const bad = bytes.slice();
    bad[bad.length - 5] ^= 0x40;
    expect(() => KdaState.load(bad, cfg)).toThrow(/checksum mismatch/);
    const magic = bytes.slice();
    magic[0] = 0x41;
    expect(() => KdaState.load(magic, cfg)).toThrow(/bad magic/);
    try {
      KdaState.load(magic, cfg);
    } catch (e) {
      expect(e).toBeInstanceOf(KdaError);
      expect((e as KdaError).code).toBe("state");
    }
  });
});

describe("bad weights and config", () => {
  const [k3] = FORMS;
  it.skipIf(!fixtureExists(k3.file))("names the tensor and the expected shape", () => {
    const m = readFixture(k3.file);
    const w = weightsOf(m);
    expect(() => new KdaLayer({ ...w, q_proj: { dtype: "F32", shape: [64, 127], data: new Float32Array(64 * 127) } }, k3.config)).toThrow(/weight 'q_proj' has shape \[64, 127\], expected \[64, 128\]/);
    expect(() => new KdaLayer({ ...w, o_proj: undefined } as unknown as KdaWeights, k3.config)).toThrow(/missing weight 'o_proj'/);
    expect(() => new KdaLayer({ ...w, A_log: new Float32Array([1, 2, 3, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9]) }, k3.config)).toThrow(/K3 padding entry 15 is 9/);
    expect(() => new KdaLayer({ ...w, g_a_proj: w.g_proj, g_b_proj: w.g_proj }, k3.config)).toThrow(/both g_proj/);
    expect(() => new KdaLayer({ ...w, dt_bias: { dtype: "I8", data: new Int8Array(64) } }, k3.config)).toThrow(/'dt_bias' has dtype I8/);
    expect(() => new KdaLayer(w, { ...k3.config, gate: "sigmoid" as never })).toThrow(/config.gate must be/);
    expect(() => new KdaLayer(w, { ...k3.config, numHeads: 0 })).toThrow(/config.numHeads must be an integer/);
    const layer = new KdaLayer(w, k3.config);
    expect(() => layer.forward(new Float32Array(100), layer.newState())).toThrow(/x has 100 values, expected a positive multiple of hidden = 128/);
    expect(() => layer.forward(new Float32Array(128), new KdaState({ ...k3.config, numHeads: 2, headDim: 32 }))).toThrow(/state is for numHeads=2/);
  });
});
