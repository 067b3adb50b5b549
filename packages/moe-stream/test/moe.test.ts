import { mkdtempSync, rmSync, statfsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { bestSimdLevel, K3_SITU_BETAS, Linear, setSimdLevel, setThreadCount, simdLevel, threadCount, type SimdLevel } from "@k3/dense";
import { openCheckpointIndex } from "../src/store/checkpoint.js";
import { CancelledError, ExpertReadError } from "../src/errors.js";
import { denseExpertCompute, mxfp4ExpertCompute } from "../src/moe/expert-compute.js";
import { ExpertStore } from "../src/store/expert-store.js";
import { MoeLayer } from "../src/moe/moe-layer.js";
import { Router } from "../src/moe/router.js";
import { loadFixture, worstRatio, type Fixture } from "./fixtures.js";
import { writeRawCheckpoint, type RawTensor } from "./make-checkpoint.js";

const dirs: string[] = [];
afterAll(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));

const LAYER = 1;
const P = `language_model.model.layers.${LAYER}.block_sparse_moe.`;

/** Puts the fixture's experts into a one-shard checkpoint in the released layout. */
function expertCheckpoint(fx: Fixture): string {
  const dir = mkdtempSync(join(tmpdir(), "k3-moe-"));
  dirs.push(dir);
  const tensors: RawTensor[] = [];
  for (const name of fx.names().filter((n) => n.startsWith("experts.")).sort()) {
    const a = fx.get(name);
    const dtype = a instanceof Float32Array ? "F32" : a instanceof Uint16Array ? "BF16" : "U8";
    tensors.push({ name: P + name, dtype, shape: fx.shape(name), data: new Uint8Array(a.buffer, a.byteOffset, a.byteLength) });
  }
  writeRawCheckpoint(dir, tensors);
  return dir;
}

const f32m = (fx: Fixture, n: string) => {
  const a = fx.f32(n);
  return new Linear(n, a, fx.shape(n)[0], fx.shape(n)[1]);
};

function layer48b(opts: { slotsPerLayer?: number; ioSlots?: number; countProcReads?: boolean } = {}) {
  const fx = loadFixture("moe_48b.safetensors");
  const ckpt = openCheckpointIndex(expertCheckpoint(fx));
  const store = ExpertStore.open({ experts: ckpt.experts(LAYER), ioSlots: opts.ioSlots ?? 4, slotsPerLayer: opts.slotsPerLayer ?? 0, readers: 4 });
  const [E, D] = fx.shape("gate.weight");
  const router = new Router({ numExperts: E, topK: 2, routedScalingFactor: 2.446 }, f32m(fx, "gate.weight"), fx.f32("gate.e_score_correction_bias"));
  const moe = new MoeLayer({
    layer: LAYER,
    hidden: D,
    router,
    experts: store,
    compute: denseExpertCompute({ inDim: D, interDim: fx.shape("experts.0.w1.weight")[0], activation: "silu" }),
    shared: { gate: f32m(fx, "shared_experts.gate_proj.weight"), up: f32m(fx, "shared_experts.up_proj.weight"), down: f32m(fx, "shared_experts.down_proj.weight") },
    activation: "silu",
    countProcReads: opts.countProcReads ?? true,
  });
  return { fx, store, moe, D, x: fx.f32("x"), T: fx.shape("x")[0] };
}

describe("MoeLayer, Kimi-Linear-48B plain MoE (bf16 experts, SiLU-GLU, x routed_scaling_factor)", () => {
  it("matches the PyTorch reference (moe_48b)", async () => {
    const { fx, store, moe, x, T } = layer48b();
    try {
      const y = await moe.forward(x, T);
      expect(worstRatio(y, fx.f64("out"))).toBeLessThanOrEqual(1);
      const s = moe.lastStats!;
      // Chunk-union: one read per unique expert, not per selection.
      expect(s.selections).toBe(T * 2);
      expect(store.stats().reads).toBe(s.uniqueExperts);
      expect(s.uniqueExperts).toBeLessThan(s.selections);
      // The device bytes show up in /proc/self/io read_bytes too (other threads may add more), unless
      // the scratch dir is a tmpfs (no block device under it).
      if (statfsSync(tmpdir()).type !== 0x01021994) expect(s.procReadBytes).toBeGreaterThanOrEqual(s.bytesRequested);
      expect(s.procReadBytes).not.toBeNull();
      expect(s.deviceBytes).toBeGreaterThanOrEqual(s.bytesRequested);
      expect(s.ioWaitShare).toBeGreaterThanOrEqual(0);
      expect(s.ioWaitShare).toBeLessThanOrEqual(1);
    } finally {
      store.close();
    }
  });

  it("a chunk gives the same bits as token-by-token, with or without a warm cache", async () => {
    const { store, moe, x, T, D } = layer48b({ slotsPerLayer: 8 });
    try {
      const chunk = await moe.forward(x, T);
      for (let t = 0; t < T; t++) {
        const one = await moe.forward(x.slice(t * D, (t + 1) * D), 1);
        expect(Buffer.from(one.buffer).equals(Buffer.from(chunk.buffer, t * D * 4, D * 4))).toBe(true);
      }
      expect(store.stats().residentHits).toBeGreaterThan(0);
    } finally {
      store.close();
    }
  });

  it("lookahead prefetch: predicted experts arrive as prefetch hits (not resident hits), same output", async () => {
    const { fx, store, moe, x, T, D } = layer48b({ ioSlots: 8, countProcReads: false });
    try {
      const want = await moe.forward(x.slice(D, 2 * D), 1);
      const before = store.stats();
      const next = MoeLayer.predict(moe, x.slice(D, 2 * D), 1);
      await moe.forward(x.slice(0, D), 1, { prefetch: next });
      expect(moe.lastStats!.prefetchIssued).toBe(store.stats().prefetchIssued - before.prefetchIssued);
      expect(moe.lastStats!.procReadBytes).toBeNull(); // not asked for
      const got = await moe.forward(x.slice(D, 2 * D), 1);
      const s = store.stats();
      expect(s.prefetchIssued - before.prefetchIssued).toBeGreaterThan(0);
      expect(moe.lastStats!.prefetchHits).toBeGreaterThan(0);
      expect(s.residentHits).toBe(0);
      expect(Buffer.from(got.buffer).equals(Buffer.from(want.buffer))).toBe(true);
      void fx;
      void T;
    } finally {
      store.close();
    }
  });

  it("cancelled: the forward rejects with a CancelledError between expert groups, gives every slot back, and the store stays usable", async () => {
    const { fx, store, moe, x, T } = layer48b({ ioSlots: 2 });
    try {
      // asked before routing, before the routed experts, then after each group: true at the third question = after the first group
      let asked = 0;
      const out = new Float32Array(T * fx.shape("x")[1]).fill(7);
      const err = await moe.forward(x, T, { out, cancelled: () => ++asked >= 3 }).then(() => null, (e: unknown) => e);
      expect(asked).toBe(3);
      expect(err).toBeInstanceOf(CancelledError);
      expect((err as CancelledError).code).toBe("cancelled");
      expect((err as Error).message).toMatch(/^layer 1: cancelled after [1-9]\d* of \d+ experts/);
      expect(out.every((v) => v === 7)).toBe(true); // no output written
      // a cancel on the first question stops before anything is read; on the second, once the shared experts are done
      await expect(moe.forward(x, T, { cancelled: () => true })).rejects.toThrow(/^layer 1: cancelled before routing$/);
      asked = 0;
      await expect(moe.forward(x, T, { cancelled: () => ++asked >= 2 })).rejects.toThrow(/^layer 1: cancelled before the routed experts$/);
      await new Promise((r) => setTimeout(r, 20));
      // with 2 I/O slots, a slot left held would stall this forward: it completes, with the reference output
      const y = await moe.forward(x, T, { cancelled: () => false });
      expect(worstRatio(y, fx.f64("out"))).toBeLessThanOrEqual(1);
    } finally {
      store.close();
    }
  });

  it("cancelEvery: a group of cached experts runs in parts with a question before each, with the bits of one call", async () => {
    const { store, moe, x, T } = layer48b({ slotsPerLayer: 64 });
    try {
      const want = await moe.forward(x, T); // reads every expert; the forwards below find them all cached
      const unique = moe.lastStats!.uniqueExperts;
      expect(unique).toBeGreaterThanOrEqual(3);
      let asked = 0;
      const parts = await moe.forward(x, T, { cancelled: () => (asked++, false), cancelEvery: 1 }); // one expert per part
      expect(moe.lastStats!.residentHits).toBe(unique);
      expect(asked).toBe(unique + 1); // before routing and before the routed experts, then before every part but the first (one group: nothing after it)
      expect(Buffer.from(parts.buffer).equals(Buffer.from(want.buffer))).toBe(true);
      // the fourth question (before the third part) says stop: two experts ran, no output written
      asked = 0;
      const out = new Float32Array(parts.length).fill(7);
      const err = await moe.forward(x, T, { out, cancelled: () => ++asked >= 4, cancelEvery: 1 }).then(() => null, (e: unknown) => e);
      expect(err).toBeInstanceOf(CancelledError);
      expect((err as Error).message).toBe(`layer 1: cancelled after 2 of ${unique} experts`);
      expect(out.every((v) => v === 7)).toBe(true);
      // the default leaves these small experts in one part: the two questions before them only
      asked = 0;
      await moe.forward(x, T, { cancelled: () => (asked++, false) });
      expect(asked).toBe(2);
      for (const bad of [0, -1, Number.NaN, Infinity])
        await expect(moe.forward(x, T, { cancelled: () => false, cancelEvery: bad })).rejects.toThrow(`layer 1: cancelEvery ${bad}: expected a positive number`);
    } finally {
      store.close();
    }
  });

  it("cancelled: the shared experts of a chunk over 64 tokens run in 64-token pieces with a question between them, same bits", async () => {
    const { store, moe, x, T, D } = layer48b({ slotsPerLayer: 64 });
    try {
      const T2 = 150; // the fixture's tokens repeated: three shared pieces (64 + 64 + 22)
      const x2 = new Float32Array(T2 * D);
      for (let t = 0; t < T2; t++) x2.set(x.subarray((t % T) * D, (t % T + 1) * D), t * D);
      const want = await moe.forward(x2, T2); // no cancel asked: one shared call
      let asked = 0;
      const got = await moe.forward(x2, T2, { cancelled: () => (asked++, false) });
      expect(Buffer.from(got.buffer).equals(Buffer.from(want.buffer))).toBe(true);
      expect(asked).toBeGreaterThanOrEqual(4); // before routing, twice in the shared experts, before the routed ones
      asked = 0;
      await expect(moe.forward(x2, T2, { cancelled: () => ++asked >= 2 })).rejects.toThrow(/^layer 1: cancelled in the shared experts$/);
      // the slots of the experts it had asked for came back: every later forward still completes
      const again = await moe.forward(x2, T2, { cancelled: () => false });
      expect(Buffer.from(again.buffer).equals(Buffer.from(want.buffer))).toBe(true);
    } finally {
      store.close();
    }
  });

  it("a read error mid-forward rejects (no output) and leaves the store usable", async () => {
    const { fx, store, moe, x, T } = layer48b({ ioSlots: 2 });
    try {
      store.injectFault(1, "eio");
      await expect(moe.forward(x, T)).rejects.toBeInstanceOf(ExpertReadError);
      await new Promise((r) => setTimeout(r, 20));
      const y = await moe.forward(x, T);
      expect(worstRatio(y, fx.f64("out"))).toBeLessThanOrEqual(1);
    } finally {
      store.close();
    }
  });
});

describe("MoeLayer onExpertError: \"drop\" (the reference engine's drop-and-exit-4 behaviour)", () => {
  it("a failed read drops exactly that expert: output = the mix without its term, others unchanged and not renormalised", async () => {
    const { store, moe, x, T, D } = layer48b({ ioSlots: 8 });
    const dropper = new MoeLayer({ ...moe.opts, onExpertError: "drop" });
    try {
      // Token 0 alone; fail its first-submitted read (the store submits misses in disk order).
      const x0 = x.slice(0, D);
      const full = await dropper.forward(x0, 1);
      const routed = Array.from(dropper.lastStats!.routing.ids);
      expect(dropper.lastStats!.dropped).toEqual([]);
      store.injectFault(0, "eio");
      const y = await dropper.forward(x0, 1);
      const dropped = dropper.lastStats!.dropped;
      expect(dropped.length).toBe(1);
      expect(dropped[0].layer).toBe(LAYER);
      expect(routed).toContain(dropped[0].expert);
      expect(dropped[0].tokens).toBe(1);
      expect(dropped[0].reason).toMatch(new RegExp(`layer ${LAYER} expert ${dropped[0].expert}`));
      expect(Buffer.from(y.buffer).equals(Buffer.from(full.buffer))).toBe(false);
      // The store stays usable and the next forward (no fault) gives the full output again, bit for bit.
      await new Promise((r) => setTimeout(r, 20));
      const again = await dropper.forward(x0, 1);
      expect(dropper.lastStats!.dropped).toEqual([]);
      expect(Buffer.from(again.buffer).equals(Buffer.from(full.buffer))).toBe(true);
      void T;
    } finally {
      store.close();
    }
  });

  it("the dropped output equals the output computed with that expert's weight set to zero", async () => {
    const { store, moe, x, D } = layer48b({ ioSlots: 8 });
    const dropper = new MoeLayer({ ...moe.opts, onExpertError: "drop" });
    try {
      const x0 = x.slice(0, D);
      store.injectFault(0, "short");
      const y = await dropper.forward(x0, 1);
      const [d] = dropper.lastStats!.dropped;
      expect(d.reason).toMatch(/short|bytes/i);
      // Same routing, the dropped expert's weight forced to 0: a router wrapper that zeroes it.
      const router = moe.opts.router;
      const zeroing = Object.create(router) as typeof router;
      zeroing.route = (xx: Float32Array, TT: number) => {
        const r = router.route(xx, TT);
        const w = new Float32Array(r.weights);
        for (let i = 0; i < r.ids.length; i++) if (r.ids[i] === d.expert) w[i] = 0;
        return { ...r, weights: w };
      };
      await new Promise((r) => setTimeout(r, 20));
      const want = await new MoeLayer({ ...moe.opts, router: zeroing }).forward(x0, 1);
      expect(Buffer.from(y.buffer).equals(Buffer.from(want.buffer))).toBe(true);
    } finally {
      store.close();
    }
  });

  it("\"fail\" (the default) still rejects, and errors that are not about the expert's bytes reject under \"drop\" too", async () => {
    const { store, moe, x, T } = layer48b({ ioSlots: 8 });
    try {
      store.injectFault(0, "eio");
      await expect(moe.forward(x, T)).rejects.toBeInstanceOf(ExpertReadError);
      await new Promise((r) => setTimeout(r, 20));
      const broken = new MoeLayer({
        ...moe.opts,
        onExpertError: "drop",
        // Both paths: the per-expert run() and the batched runMany().
        compute: { ...moe.opts.compute, run: () => { throw new TypeError("a bug, not a bad expert"); }, runMany: () => { throw new TypeError("a bug, not a bad expert"); } },
      });
      await expect(broken.forward(x, T)).rejects.toThrow(/a bug, not a bad expert/);
      // ... and the store is still usable after both.
      await new Promise((r) => setTimeout(r, 20));
      await expect(moe.forward(x, T)).resolves.toBeInstanceOf(Float32Array);
    } finally {
      store.close();
    }
  });
});

function layerK3(opts: { slotsPerLayer?: number; situBetas?: { beta: number; linearBeta: number }; shared?: boolean } = {}) {
  const fx = loadFixture("moe_k3_latent.safetensors");
  const ckpt = openCheckpointIndex(expertCheckpoint(fx));
  const store = ExpertStore.open({ experts: ckpt.experts(LAYER), ioSlots: 5, slotsPerLayer: opts.slotsPerLayer ?? 0, readers: 4 });
  const [E, D] = fx.shape("gate.weight");
  const [latent] = fx.shape("routed_expert_down_proj.weight");
  const router = new Router({ numExperts: E, topK: 4, routedScalingFactor: 1.0 }, f32m(fx, "gate.weight"), fx.f32("gate.e_score_correction_bias"));
  const moe = new MoeLayer({
    layer: LAYER,
    hidden: D,
    router,
    experts: store,
    compute: mxfp4ExpertCompute({ inDim: latent, interDim: fx.shape("experts.0.w1.weight_packed")[0], situBetas: opts.situBetas ?? K3_SITU_BETAS }),
    latent: { down: f32m(fx, "routed_expert_down_proj.weight"), up: f32m(fx, "routed_expert_up_proj.weight"), norm: fx.f32("routed_expert_norm.weight"), eps: 1e-5 },
    shared: opts.shared === false ? undefined : { gate: f32m(fx, "shared_experts.gate_proj.weight"), up: f32m(fx, "shared_experts.up_proj.weight"), down: f32m(fx, "shared_experts.down_proj.weight") },
    activation: "situ",
    situBetas: opts.situBetas ?? K3_SITU_BETAS,
  });
  return { fx, store, moe, D, x: fx.f32("x"), T: fx.shape("x")[0] };
}

describe("MoeLayer, K3 latent MoE (MXFP4 experts from disk, SiTU-GLU, latent RMSNorm once)", () => {
  it("matches the PyTorch reference (moe_k3_latent)", async () => {
    const { fx, store, moe, x, T } = layerK3();
    try {
      const y = await moe.forward(x, T);
      expect(worstRatio(y, fx.f64("out"))).toBeLessThanOrEqual(1);
      const want = fx.get("dbg.topk_idx") as BigInt64Array;
      const got = moe.lastStats!.routing.ids;
      for (let i = 0; i < T; i++)
        expect(new Set(Array.from(got.subarray(i * 4, i * 4 + 4)))).toEqual(new Set(Array.from(want.subarray(i * 4, i * 4 + 4), Number)));
      expect(store.stats().reads).toBe(moe.lastStats!.uniqueExperts);
    } finally {
      store.close();
    }
  });

  it("SiTU bounds other than 4 / 25 reach the routed and the shared experts and match the reference (moe_k3_latent situ.*)", async () => {
    // The config's activation_situ_beta / _linear_beta (here 1.5 / 3) in every GLU, against the
    // PyTorch reference with the same bounds; the routed part is the layer without shared experts.
    const fx = loadFixture("moe_k3_latent.safetensors");
    const [beta, linearBeta] = fx.f64("situ.betas");
    const want = fx.f64("situ.out");
    const wantShared = fx.f64("situ.dbg.shared_out");
    const wantRouted = want.map((v, i) => v - wantShared[i]);
    const k3Routed = fx.f64("out").map((v, i) => v - fx.f64("dbg.shared_out")[i]);
    const run = async (opts: { situBetas: { beta: number; linearBeta: number }; shared: boolean }) => {
      const { store, moe, x, T } = layerK3(opts);
      try {
        return await moe.forward(x, T);
      } finally {
        store.close();
      }
    };
    const betas = { beta, linearBeta };
    const all = await run({ situBetas: betas, shared: true });
    const routed = await run({ situBetas: betas, shared: false });
    const shared = all.map((v, i) => v - routed[i]);
    const figures = {
      all: worstRatio(all, want),
      routed: worstRatio(routed, wantRouted),
      shared: worstRatio(shared, wantShared),
      // How far the K3 default bounds are from these outputs (what ignoring the config gave).
      routedIfDefault: worstRatio(await run({ situBetas: K3_SITU_BETAS, shared: false }), wantRouted),
      routedDefaultVsK3Ref: worstRatio(await run({ situBetas: K3_SITU_BETAS, shared: false }), k3Routed),
      sharedIfDefault: worstRatio(fx.f64("dbg.shared_out"), wantShared),
    };
    expect([beta, linearBeta]).toEqual([1.5, 3]);
    expect(figures.all, JSON.stringify(figures)).toBeLessThanOrEqual(1);
    expect(figures.routed, JSON.stringify(figures)).toBeLessThanOrEqual(1);
    expect(figures.shared, JSON.stringify(figures)).toBeLessThanOrEqual(1);
    expect(figures.routedDefaultVsK3Ref, JSON.stringify(figures)).toBeLessThanOrEqual(1);
    // The bounds matter: the default 4 / 25 miss the reference by far more than the tolerance.
    expect(figures.routedIfDefault, JSON.stringify(figures)).toBeGreaterThan(100);
    expect(figures.sharedIfDefault, JSON.stringify(figures)).toBeGreaterThan(100);
  });

  it("chunk = token by token, bit for bit, cold and warm", async () => {
    const { store, moe, x, T, D } = layerK3({ slotsPerLayer: 16 });
    try {
      const chunk = await moe.forward(x, T);
      for (let t = 0; t < T; t++) {
        const one = await moe.forward(x.slice(t * D, (t + 1) * D), 1);
        expect(Buffer.from(one.buffer).equals(Buffer.from(chunk.buffer, t * D * 4, D * 4))).toBe(true);
      }
      const warm = await moe.forward(x, T);
      expect(moe.lastStats!.residentHits).toBe(moe.lastStats!.uniqueExperts);
      expect(Buffer.from(warm.buffer).equals(Buffer.from(chunk.buffer))).toBe(true);
    } finally {
      store.close();
    }
  });

  it("an expert with a NaN (0xFF) scale read from disk is refused, naming layer and expert", async () => {
    const fx = loadFixture("moe_k3_latent.safetensors");
    const bad = fx.get("experts.3.w2.weight_scale") as Uint8Array;
    bad[0] = 0xff;
    const { store, moe } = layerK3();
    const ckpt = openCheckpointIndex(expertCheckpoint({ ...fx, get: (n: string) => (n === "experts.3.w2.weight_scale" ? bad : fx.get(n)) }));
    const store2 = ExpertStore.open({ experts: ckpt.experts(LAYER), ioSlots: 5 });
    try {
      const moe2 = new MoeLayer({ ...moe.opts, experts: store2 });
      // Route every token to expert 3 by biasing it far above the rest.
      const bias = new Float32Array(moe.opts.router.bias!);
      bias[3] = 100;
      const router = new Router(moe.opts.router.cfg, moe.opts.router.weight, bias);
      await expect(new MoeLayer({ ...moe2.opts, router }).forward(fx.f32("x"), 4)).rejects.toThrow(/layer 1 expert 3 w2\.weight_scale/);
      // Under "drop" the same expert is left out (every token had picked it) and the rest still runs.
      const dropper = new MoeLayer({ ...moe2.opts, router, onExpertError: "drop" });
      const y = await dropper.forward(fx.f32("x"), 4);
      expect(dropper.lastStats!.dropped.map((d) => [d.expert, d.tokens])).toEqual([[3, 4]]);
      expect(dropper.lastStats!.dropped[0].reason).toMatch(/w2\.weight_scale: scale 0xFF/);
      expect(y.every(Number.isFinite)).toBe(true);
      // The dropped term is zero whatever the reused work buffers held: a run right after a full
      // forward (buffers holding expert 3's output) equals one on fresh buffers (a concurrent call's).
      const good = new MoeLayer({ ...moe.opts, router });
      const [, fresh] = await Promise.all([good.forward(fx.f32("x"), 4), dropper.forward(fx.f32("x"), 4)]);
      await good.forward(fx.f32("x"), 4);
      const dirty = await dropper.forward(fx.f32("x"), 4);
      expect(Buffer.from(dirty.buffer).equals(Buffer.from(fresh.buffer))).toBe(true);
      expect(Buffer.from(y.buffer).equals(Buffer.from(fresh.buffer))).toBe(true);
    } finally {
      store.close();
      store2.close();
    }
  });
});

describe("MoeLayer determinism", () => {
  it("K3 latent MoE output is bit-identical at every SIMD level and thread count", async () => {
    const levels: SimdLevel[] = ["scalar", "avx2", "avx512"];
    const available = levels.slice(0, levels.indexOf(bestSimdLevel()) + 1);
    const level0 = simdLevel();
    const threads0 = threadCount();
    const { store, moe, x, T } = layerK3();
    try {
      let ref: Buffer | null = null;
      for (const level of available)
        for (const threads of [1, 2, 3]) {
          setSimdLevel(level);
          setThreadCount(threads);
          const y = Buffer.from((await moe.forward(x, T)).buffer);
          if (!ref) ref = y;
          else expect(y.equals(ref), `${level} x ${threads} threads`).toBe(true);
        }
      expect(available.length).toBeGreaterThanOrEqual(1);
    } finally {
      setSimdLevel(level0);
      setThreadCount(threads0);
      store.close();
    }
  });
});
