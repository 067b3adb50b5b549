import { bf16ToF32, f32ToBf16, gemvBf16 } from "@k3/dense";
import { describe, expect, it } from "vitest";
import { attend, attendExpanded, attendLatent, K3_MLA, KIMI_LINEAR_48B_MLA, MlaCache, MlaError, MlaLayer, nativeInfo, softmaxScale, type MlaConfig, type MlaWeights } from "../src/index.js";
import { bytesEqual, closeTo, expectBitIdentical, f32, fixtureExists, get, manifestTol, readFixture, relErr, uniform, type FixtureTensor } from "@k3/test-utils";
import { mlaExpandedF64, newExpandedCache, type MlaVariant } from "./reference.js";

const TINY = { hidden: 128, numHeads: 4, kvLoraRank: 32, qkNope: 24, qkRope: 8, vHead: 16, normEps: 1e-6 };
const FORMS = [
  { file: "mla_layer_k3.safetensors", config: { ...TINY, qLoraRank: 64, outputGate: true } as MlaConfig },
  { file: "mla_layer_48b.safetensors", config: { ...TINY, qLoraRank: null, outputGate: false } as MlaConfig },
];

function weightsOf(m: Map<string, FixtureTensor>): MlaWeights {
  const w: Record<string, unknown> = {};
  for (const [name, t] of m) if (name.startsWith("w.")) w[name.slice(2)] = { dtype: "F32", shape: t.shape, data: f32(m, name) };
  return w as unknown as MlaWeights;
}

function rawWeights(m: Map<string, FixtureTensor>): Record<string, ArrayLike<number>> {
  const w: Record<string, ArrayLike<number>> = {};
  for (const [name, t] of m) if (name.startsWith("w.")) w[name.slice(2)] = t.data;
  return w;
}

/** Expanded per-head K [S][H][n+r] (k_pe copied into every head) and V [S][H][dv] from separate arrays. */
function expandKeys(kNope: Float32Array, kPe: Float32Array, S: number, H: number, n: number, r: number): Float32Array {
  const K = new Float32Array(S * H * (n + r));
  for (let s = 0; s < S; s++)
    for (let h = 0; h < H; h++) {
      K.set(kNope.subarray((s * H + h) * n, (s * H + h + 1) * n), (s * H + h) * (n + r));
      K.set(kPe.subarray(s * r, (s + 1) * r), (s * H + h) * (n + r) + n);
    }
  return K;
}

function joinQ(qNope: Float32Array, qPe: Float32Array, T: number, H: number, n: number, r: number): Float32Array {
  const q = new Float32Array(T * H * (n + r));
  for (let i = 0; i < T * H; i++) {
    q.set(qNope.subarray(i * n, (i + 1) * n), i * (n + r));
    q.set(qPe.subarray(i * r, (i + 1) * r), i * (n + r) + n);
  }
  return q;
}

describe("loading", () => {
  it("loads the prebuilt binary unless source mode is asked for", () => {
    expect(nativeInfo().origin).toBe(process.env.K3_SOURCE_BUILD ? "source" : "prebuilt");
  });
});

describe("attention core at K3's real head shapes (invariant 5: scale 192^-1/2, shared unrotated k_pe)", () => {
  const file = "mla_core_k3.safetensors";
  it.skipIf(!fixtureExists(file))("expanded form matches the reference; 128^-1/2 and 576^-1/2 are rejected", () => {
    const m = readFixture(file);
    const tol = manifestTol(file);
    const T = 4, H = 96, n = 128, r = 64, dv = 128;
    expect(softmaxScale(K3_MLA)).toBeCloseTo(get(m, "scale").data[0], 12);
    const q = joinQ(f32(m, "q_nope"), f32(m, "q_pe"), T, H, n, r);
    const K = expandKeys(f32(m, "k_nope"), f32(m, "k_pe"), T, H, n, r);
    const shape = { tokens: T, heads: H, dq: n + r, dv, qPos0: 0 };
    const o = attendExpanded(q, shape, K, f32(m, "v"), softmaxScale(K3_MLA));
    expect(closeTo(o, get(m, "o").data, tol).detail).toBe("ok");
    for (const wrong of [1 / Math.sqrt(128), 1 / Math.sqrt(576)]) expect(closeTo(attendExpanded(q, shape, K, f32(m, "v"), wrong), get(m, "o").data, tol).ok).toBe(false);
  });

  it.skipIf(!fixtureExists(file))("kv_lora 512 latent case: absorbed (over the 576-value cache) and expanded both match", () => {
    const m = readFixture(file);
    const tol = manifestTol(file);
    const T = 4, H = 2, n = 128, r = 64, dv = 128, L = 512;
    const kvbT = get(m, "latent.kv_b_proj");
    expect(kvbT.dtype).toBe("BF16");
    const kvbBits = kvbT.bits!;
    const c = f32(m, "latent.c"), kPe = f32(m, "latent.k_pe"), qNope = f32(m, "latent.q_nope"), qPe = f32(m, "latent.q_pe");
    const scale = 1 / Math.sqrt(n + r);
    // absorbed: q~ = W_UK^T q_nope, attend over [c | k_pe], o = W_UV o~
    const cache = new MlaCache({ ...K3_MLA, numHeads: H }, T);
    const rows = new Float32Array(T * (L + r));
    for (let t = 0; t < T; t++) {
      rows.set(c.subarray(t * L, (t + 1) * L), t * (L + r));
      rows.set(kPe.subarray(t * r, (t + 1) * r), t * (L + r) + L);
    }
    cache.append(rows);
    const W = bf16ToF32(kvbBits);
    const qAbs = new Float32Array(T * H * (L + r));
    for (let t = 0; t < T; t++)
      for (let h = 0; h < H; h++) {
        for (let col = 0; col < L; col++) {
          let s = 0;
          for (let row = 0; row < n; row++) s += W[(h * 256 + row) * L + col] * qNope[(t * H + h) * n + row];
          qAbs[(t * H + h) * (L + r) + col] = s;
        }
        qAbs.set(qPe.subarray((t * H + h) * r, (t * H + h + 1) * r), (t * H + h) * (L + r) + L);
      }
    const lat = attendLatent(qAbs, T, H, cache, 0, scale);
    const oAbs = new Float32Array(T * H * dv);
    for (let t = 0; t < T; t++)
      for (let h = 0; h < H; h++)
        gemvBf16(kvbBits.subarray((h * 256 + 128) * L), lat.subarray((t * H + h) * L, (t * H + h + 1) * L), oAbs.subarray((t * H + h) * dv, (t * H + h + 1) * dv), { rows: dv, cols: L });
    expect(closeTo(oAbs, get(m, "latent.o").data, tol).detail).toBe("ok");
    // expanded: k_nope = W_UK c, v = W_UV c per head
    const kNope = new Float32Array(T * H * n), v = new Float32Array(T * H * dv);
    for (let t = 0; t < T; t++)
      for (let h = 0; h < H; h++) {
        gemvBf16(kvbBits.subarray(h * 256 * L), c.subarray(t * L, (t + 1) * L), kNope.subarray((t * H + h) * n, (t * H + h + 1) * n), { rows: n, cols: L });
        gemvBf16(kvbBits.subarray((h * 256 + 128) * L), c.subarray(t * L, (t + 1) * L), v.subarray((t * H + h) * dv, (t * H + h + 1) * dv), { rows: dv, cols: L });
      }
    const oExp = attendExpanded(joinQ(qNope, qPe, T, H, n, r), { tokens: T, heads: H, dq: n + r, dv, qPos0: 0 }, expandKeys(kNope, kPe, T, H, n, r), v, scale);
    expect(closeTo(oExp, get(m, "latent.o").data, tol).detail).toBe("ok");
  });

  it("scores do not depend on absolute position: shuffling earlier keys leaves the last query's output unchanged", () => {
    const H = 3, L = 64, r = 16, S = 150;
    const cfg = { ...K3_MLA, numHeads: H, kvLoraRank: L, qkRope: r };
    const rows = uniform(S * (L + r), -1, 1, 4);
    const q = uniform(H * (L + r), -1, 1, 5);
    const a = new MlaCache(cfg, S), b = new MlaCache(cfg, S);
    a.append(rows);
    const perm = Array.from({ length: S - 1 }, (_, i) => (i * 37) % (S - 1));
    const shuffled = new Float32Array(rows.length);
    perm.forEach((p, i) => shuffled.set(rows.subarray(p * (L + r), (p + 1) * (L + r)), i * (L + r)));
    shuffled.set(rows.subarray((S - 1) * (L + r)), (S - 1) * (L + r));
    b.append(shuffled);
    const oa = attendLatent(q, 1, H, a, S - 1, 0.1), ob = attendLatent(q, 1, H, b, S - 1, 0.1);
    expect(relErr(ob, oa)).toBeLessThan(1e-6);
    // and a query whose own row is a copy of an earlier one gives the same output at any position
    const two = new MlaCache(cfg, 4);
    const r0 = rows.subarray(0, L + r);
    const rowsTwo = new Float32Array(4 * (L + r));
    rowsTwo.set(r0, 0);
    rowsTwo.set(r0, L + r);
    rowsTwo.set(r0, 2 * (L + r));
    rowsTwo.set(r0, 3 * (L + r));
    two.append(rowsTwo);
    const outs = [0, 1, 2, 3].map((p) => attendLatent(q, 1, H, two, p, 0.1));
    for (const o of outs) expect(relErr(o, outs[0])).toBeLessThan(1e-6);
  });
});

describe.each(FORMS)("MlaLayer against $file", ({ file, config }) => {
  const present = fixtureExists(file);
  it.skipIf(!present)("absorbed layer matches the expanded reference: out, latent, k_pe, decode continuation, shifted rows", () => {
    const m = readFixture(file);
    const tol = manifestTol(file);
    expect(softmaxScale(config)).toBeCloseTo(get(m, "scale").data[0], 12);
    const layer = new MlaLayer(weightsOf(m), config);
    layer.trace = true;
    const cache = layer.newCache(16);
    const out = layer.forward(f32(m, "x"), cache);
    expect(closeTo(out, get(m, "out").data, tol).detail).toBe("ok");
    expect(closeTo(layer.lastTrace!.c, get(m, "dbg.c").data, tol).detail).toBe("ok");
    expect(closeTo(layer.lastTrace!.kPe, get(m, "dbg.k_pe").data, tol).detail).toBe("ok");
    const out2 = layer.forward(f32(m, "x2"), cache);
    expect(closeTo(out2, get(m, "out2").data, tol).detail).toBe("ok");
    expect(cache.length).toBe(8);
    const shifted = layer.forward(f32(m, "shift.x"), layer.newCache(6));
    expect(closeTo(shifted, get(m, "shift.out").data, tol).detail).toBe("ok");
  });

  it.skipIf(!present)("the TS expanded reference matches, and every wrong variant of invariant 5 is rejected", () => {
    const m = readFixture(file);
    const tol = manifestTol(file);
    const W = rawWeights(m);
    const x = get(m, "x").data, sx = get(m, "shift.x").data;
    const good = mlaExpandedF64(x, 6, W, config, newExpandedCache());
    expect(closeTo(good, get(m, "out").data, tol).detail).toBe("ok");
    const variants: MlaVariant[] = ["rope", "scale_nope_only", "kv_b_swapped", "norm_all_576"];
    for (const variant of variants) {
      const bad = mlaExpandedF64(x, 6, W, config, newExpandedCache(), variant);
      const badShift = mlaExpandedF64(sx, 6, W, config, newExpandedCache(), variant);
      const rejected = !closeTo(bad, get(m, "out").data, tol).ok || !closeTo(badShift, get(m, "shift.out").data, tol).ok;
      expect(rejected, variant).toBe(true);
    }
  });

  it.skipIf(!present)("bf16 cache storage: half the bytes per position, error measured", () => {
    const m = readFixture(file);
    const layer = new MlaLayer(weightsOf(m), config);
    const c32 = layer.newCache(8), c16 = layer.newCache(8, { dtype: "bf16" });
    expect(c32.bytesPerPosition).toBe((32 + 8) * 4);
    expect(c16.bytesPerPosition).toBe((32 + 8) * 2);
    const a = layer.forward(f32(m, "x"), c32), b = layer.forward(f32(m, "x"), c16);
    const err = relErr(b, a);
    console.log(`${file}: bf16 latent cache vs f32, rel err ${err.toExponential(2)}`);
    expect(err).toBeGreaterThan(0);
    expect(err).toBeLessThan(1e-2);
  });
});

/** Random weights at real MLA head dims (nope 128, rope 64, v 128, kv_lora 512), few heads. */
function randomLayer(config: MlaConfig, seed: number): { weights: MlaWeights; raw: Record<string, Float32Array> } {
  const { hidden: D, numHeads: H, qkNope: n, qkRope: r, vHead: v, kvLoraRank: L } = config;
  const shapes: Record<string, number[]> = {
    kv_a_proj_with_mqa: [L + r, D], kv_a_layernorm: [L], kv_b_proj: [H * (n + v), L], o_proj: [D, H * v],
  };
  if (config.qLoraRank === null) shapes.q_proj = [H * (n + r), D];
  else Object.assign(shapes, { q_a_proj: [config.qLoraRank, D], q_a_layernorm: [config.qLoraRank], q_b_proj: [H * (n + r), config.qLoraRank] });
  if (config.outputGate) shapes.g_proj = [H * v, D];
  const raw: Record<string, Float32Array> = {};
  const weights: Record<string, unknown> = {};
  let s = seed;
  for (const [name, shape] of Object.entries(shapes)) {
    const count = shape.reduce((a, b) => a * b, 1);
    const scale = shape.length === 1 ? 0 : 1 / Math.sqrt(shape[1]);
    raw[name] = shape.length === 1 ? uniform(count, 0.5, 1.5, s++) : uniform(count, -2 * scale, 2 * scale, s++);
    weights[name] = { dtype: "F32", shape, data: raw[name] };
  }
  return { weights: weights as unknown as MlaWeights, raw };
}

describe("absorbed equals expanded; incremental equals full (real head dims)", () => {
  const cfgs: Array<[string, MlaConfig]> = [
    ["K3 (q_lora, gate)", { ...K3_MLA, hidden: 256, numHeads: 4, qLoraRank: 96 }],
    ["48B (q_proj)", { ...KIMI_LINEAR_48B_MLA, hidden: 256, numHeads: 3 }],
  ];
  it.each(cfgs)("%s: absorbed layer vs the float64 expanded reference over 90 tokens (prefill 70 + decode 20)", (_l, config) => {
    const { weights, raw } = randomLayer(config, 100);
    const layer = new MlaLayer(weights, config);
    const T = 90, D = config.hidden;
    const x = uniform(T * D, -1, 1, 7);
    const cache = layer.newCache(T);
    const got = new Float32Array(T * D);
    got.set(layer.forward(x.subarray(0, 70 * D), cache));
    for (let t = 70; t < T; t++) got.set(layer.forward(x.subarray(t * D, (t + 1) * D), cache), t * D);
    const ref = mlaExpandedF64(x, T, raw, config, newExpandedCache());
    const err = relErr(got, ref);
    expect(err).toBeLessThan(1e-5);
  });

  it.each(cfgs)("%s: token-by-token decode is bit-identical to one prefill call", (_l, config) => {
    const { weights } = randomLayer(config, 200);
    const layer = new MlaLayer(weights, config);
    const T = 70, D = config.hidden;
    const x = uniform(T * D, -1, 1, 8);
    const full = layer.forward(x, layer.newCache(T));
    const cache = layer.newCache(T);
    const inc = new Float32Array(T * D);
    for (let t = 0; t < T; t++) inc.set(layer.forward(x.subarray(t * D, (t + 1) * D), cache), t * D);
    expect(bytesEqual(inc, full)).toBe(true);
  });
});

describe("determinism", () => {
  it("attend (f32 and bf16 caches, absorbed and expanded) and the layer are bit-identical at every SIMD level and thread count", () => {
    const H = 6, L = 512, r = 64, S = 150;
    const cfg = { ...K3_MLA, numHeads: H };
    const rows = uniform(S * (L + r), -1, 1, 1);
    const q = uniform(20 * H * (L + r), -0.3, 0.3, 2);
    expectBitIdentical("latent", () => {
      const out: Float32Array[] = [];
      for (const dtype of ["f32", "bf16"] as const) {
        const c = new MlaCache(cfg, S, dtype);
        c.append(rows);
        out.push(attendLatent(q, 20, H, c, S - 20, 0.0722));
      }
      return out;
    });
    const n = 40, dv = 24, T = 9, Sx = 77;
    const qx = uniform(T * H * (n + 5), -1, 1, 3), K = uniform(Sx * H * (n + 5), -1, 1, 4), V = uniform(Sx * H * dv, -1, 1, 5);
    expectBitIdentical("expanded", () => [
      attendExpanded(qx, { tokens: T, heads: H, dq: n + 5, dv, qPos0: Sx - T }, K, V, 0.13),
      attendExpanded(qx, { tokens: T, heads: H, dq: n + 5, dv, qPos0: Sx - T }, f32ToBf16(K), f32ToBf16(V), 0.13),
    ]);
    const config: MlaConfig = { ...K3_MLA, hidden: 192, numHeads: 3, qLoraRank: 64 };
    const layer = new MlaLayer(randomLayer(config, 300).weights, config);
    const x = uniform(70 * 192, -1, 1, 9);
    expectBitIdentical("layer", () => [layer.forward(x, layer.newCache(70)), layer.forward(x, layer.newCache(70, { dtype: "bf16" }))]);
  });
});

describe("cache", () => {
  it("K3 cache: exactly 576 values per position (2304 B f32, 1152 B bf16); save/restore continues bit for bit", () => {
    const layerCfg: MlaConfig = { ...K3_MLA, hidden: 128, numHeads: 2, qLoraRank: 32 };
    expect(new MlaCache(K3_MLA, 4).width).toBe(576);
    expect(new MlaCache(K3_MLA, 4).bytesPerPosition).toBe(2304);
    expect(new MlaCache(K3_MLA, 4, "bf16").bytesPerPosition).toBe(1152);
    const layer = new MlaLayer(randomLayer(layerCfg, 400).weights, layerCfg);
    for (const dtype of ["f32", "bf16"] as const) {
      const cache = layer.newCache(20, { dtype });
      layer.forward(uniform(9 * 128, -1, 1, 1), cache);
      const bytes = cache.save();
      expect(bytes.length).toBe(64 + 9 * cache.bytesPerPosition);
      const restored = MlaCache.load(bytes, layerCfg, 20);
      const x2 = uniform(3 * 128, -1, 1, 2);
      expect(bytesEqual(layer.forward(x2, restored), layer.forward(x2, cache))).toBe(true);
      expect(restored.length).toBe(12);
    }
  });

  it("refuses overflow, wrong config, truncation and corruption with an MlaError naming the problem", () => {
    const cfg: MlaConfig = { ...K3_MLA, numHeads: 2, kvLoraRank: 8, qkRope: 4 };
    const c = new MlaCache(cfg, 3);
    c.append(uniform(2 * 12, -1, 1, 1));
    expect(() => c.append(new Float32Array(2 * 12))).toThrow(/cache full: 2 \+ 2 positions exceed the capacity of 3/);
    expect(() => c.append(new Float32Array(5))).toThrow(/not a multiple of the row width 12/);
    const bytes = c.save();
    expect(() => MlaCache.load(bytes, { ...cfg, kvLoraRank: 16 })).toThrow(/saved with kvLoraRank=8, config has 16/);
    expect(() => MlaCache.load(bytes.subarray(0, bytes.length - 4), cfg)).toThrow(/truncated or padded/);
    const bad = bytes.slice();
    bad[70] ^= 1;
    expect(() => MlaCache.load(bad, cfg)).toThrow(/checksum mismatch/);
    expect(() => MlaCache.load(bytes, cfg, 1)).toThrow(/capacity 1 is smaller than the 2 saved positions/);
    try {
      MlaCache.load(bytes.subarray(0, 5), cfg);
    } catch (e) {
      expect(e).toBeInstanceOf(MlaError);
      expect((e as MlaError).code).toBe("cache");
    }
    c.truncate(1);
    expect(c.length).toBe(1);
  });
});

describe("bad input", () => {
  it("the native core checks every layout bound and names it", () => {
    const q = new Float32Array(2 * 3 * 8);
    const keys = { data: new Float32Array(10 * 8), stride: 8, head: 0 };
    const shape = { tokens: 2, heads: 3, dq: 8, dv: 8, qPos0: 9 };
    expect(() => attend(q, shape, keys, keys, 0.1)).toThrow(/argument 'keys' has 80 values, the layout reaches 88/);
    expect(() => attend(q, { ...shape, qPos0: 0 }, keys, { data: new Float32Array(20), stride: 8, head: 8 }, 0.1)).toThrow(/argument 'values' has 20 values, the layout reaches 32 \(positions 2, heads 3, width 8\)/);
    expect(() => attend(q.subarray(1), { ...shape, qPos0: 0 }, keys, keys, 0.1)).toThrow(/q has 47 values, expected T\*H\*dq = 48/);
    expect(() => attend(q, { ...shape, qPos0: 0 }, { data: new Int8Array(80) as unknown as Float32Array, stride: 8, head: 0 }, keys, 0.1)).toThrow(/'keys' must be a Float32Array or Uint16Array/);
    expect(() => attend(q, { ...shape, qPos0: 0 }, keys, keys, Number.NaN)).toThrow(/scale must be finite/);
  });

  it("the layer names missing or misshapen weights and a bad config", () => {
    const config: MlaConfig = { ...K3_MLA, hidden: 128, numHeads: 2, qLoraRank: 32 };
    const { weights } = randomLayer(config, 500);
    expect(() => new MlaLayer({ ...weights, kv_b_proj: undefined } as unknown as MlaWeights, config)).toThrow(/missing weight 'kv_b_proj'/);
    // the weight views are @k3/dense's, but the error is still this package's own type
    expect(() => new MlaLayer({ ...weights, kv_b_proj: undefined } as unknown as MlaWeights, config)).toThrow(MlaError);
    expect(() => new MlaLayer({ ...weights, o_proj: { dtype: "F32", shape: [4], data: new Uint8Array(new ArrayBuffer(17), 1, 15) } }, config)).toThrow(/weight 'o_proj' \(F32\): 15 bytes are not a whole number/);
    expect(() => new MlaLayer({ ...weights, kv_a_proj_with_mqa: { dtype: "F32", shape: [575, 128], data: new Float32Array(575 * 128) } }, config)).toThrow(/'kv_a_proj_with_mqa' has shape \[575, 128\], expected \[576, 128\]/);
    expect(() => new MlaLayer({ ...weights, q_proj: weights.q_a_proj }, config)).toThrow(/q_proj given but config.qLoraRank is 32/);
    expect(() => new MlaLayer(weights, { ...config, outputGate: false })).toThrow(/g_proj given but config.outputGate is false/);
    expect(() => new MlaLayer(weights, { ...config, kvLoraRank: 0 })).toThrow(/config.kvLoraRank must be an integer/);
    const layer = new MlaLayer(weights, config);
    const cache = layer.newCache(2);
    expect(() => layer.forward(new Float32Array(3 * 128), cache)).toThrow(/cache full: 0 \+ 3 positions exceed the capacity of 2/);
    expect(() => layer.forward(new Float32Array(100), cache)).toThrow(/x has 100 values/);
  });
});

describe("absorption kernels", () => {
  it("check the kv_b size and the layouts before reading", async () => {
    const { native } = await import("../src/native.js");
    const q = new Float32Array(2 * 3 * 12), out = new Float32Array(2 * 3 * 16);
    expect(() => native.absorb(q, 2, 3, 36, 12, new Float32Array(3 * 20 * 16 - 1), 8, 12, 16, out, 48, 16)).toThrow(/'kvb' has 959 values, needs H\*\(n\+v\)\*L = 960/);
    expect(() => native.absorb(q, 2, 3, 36, 12, new Float32Array(960), 8, 12, 16, out.subarray(1), 48, 16)).toThrow(/'out' is shorter than its layout reaches \(96\)/);
    expect(() => native.project(q, 2, 3, 36, 12, new Float32Array(960), 8, 12, 16, out, 48, 16)).toThrow(/'in' is shorter than its layout reaches \(76\)/);
  });
});
