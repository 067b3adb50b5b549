/**
 * The run report's per layer kind figures (report.per_kind) and floor (report.floor): bytes
 * touched are the checkpoint's own tensor sizes counted independently here from the safetensors
 * headers, bytes read add up to the report's total in every mode, the floor is the stated formula,
 * and lm_head over several rows (one batched GEMM) gives the bits of one GEMV per row.
 */
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setThreadCount } from "@k3/dense";
import { afterAll, describe, expect, it } from "vitest";
import { Engine } from "../src/engine.js";
import { isMoeLayer, readConfig } from "../src/config.js";
import { GB, headChunkRowsFor } from "../src/presets.js";
import { floorFromFigures, floorReport, kindFloorSeconds, phaseFloorSeconds, readsBySource, REPORT_KINDS, type Ceilings, type FloorCeilings, type FloorInput, type RunReport } from "../src/report.js";
import { afterPlans, ceilingGbps, DISK_SOURCES, KIND_SOURCE, uniformCeilings } from "../src/floor.js";
import { captureCli, TINY_K3 } from "./helpers.js";

const bigBox = { totalBytes: 256 * GB, availableBytes: 250 * GB };
const meta = JSON.parse(readFileSync(join(TINY_K3, "expected.json"), "utf8"));
const cfg = readConfig(TINY_K3);
const P = cfg.tensorPrefix;
const D = cfg.hiddenSize;
const V = cfg.vocabSize;

/** Tensor byte sizes from the shards' headers (not from the engine's code). */
function tensorBytes(): Map<string, number> {
  const index = JSON.parse(readFileSync(join(TINY_K3, "model.safetensors.index.json"), "utf8"));
  const out = new Map<string, number>();
  for (const file of new Set(Object.values(index.weight_map) as string[])) {
    const buf = readFileSync(join(TINY_K3, file));
    const n = Number(buf.readBigUInt64LE(0));
    const header = JSON.parse(buf.subarray(8, 8 + n).toString("utf8"));
    for (const [name, t] of Object.entries(header) as [string, { data_offsets: [number, number] }][]) {
      if (name !== "__metadata__") out.set(name, t.data_offsets[1] - t.data_offsets[0]);
    }
  }
  return out;
}
const sizes = tensorBytes();
const sum = (pred: (name: string) => boolean) => [...sizes].filter(([n]) => pred(n)).reduce((a, [, b]) => a + b, 0);
const layerOf = (n: string) => Number(/model\.layers\.(\d+)\./.exec(n)?.[1] ?? -1);
const kdaLayers = [...Array(cfg.numLayers).keys()].filter((l) => cfg.layerKinds[l] === "kda");
const mlaLayers = [...Array(cfg.numLayers).keys()].filter((l) => cfg.layerKinds[l] === "mla");
const moeLayers = [...Array(cfg.numLayers).keys()].filter((l) => isMoeLayer(cfg, l));
const denseLayers = [...Array(cfg.numLayers).keys()].filter((l) => !isMoeLayer(cfg, l));
const kdaBytes = sum((n) => kdaLayers.includes(layerOf(n)) && n.includes(".self_attn.")) + kdaLayers.length * cfg.kda.numHeads * cfg.kda.headDim * cfg.kda.headDim * 4;
const mlaWeights = sum((n) => mlaLayers.includes(layerOf(n)) && n.includes(".self_attn."));
const denseBytes = sum((n) => denseLayers.includes(layerOf(n)) && n.includes(".mlp.") && n.endsWith("_proj.weight"));
const moeTrunkBytes = sum((n) => moeLayers.includes(layerOf(n)) && n.includes(".block_sparse_moe.") && !n.includes(".experts.") && n.endsWith(".weight") && !n.endsWith("routed_expert_norm.weight"));
const expertBytes = sum((n) => layerOf(n) === moeLayers[0] && n.includes(".experts.0."));

function totalRead(r: RunReport): number {
  return REPORT_KINDS.reduce((a, k) => a + r.per_kind[k].prefill.bytes_read + r.per_kind[k].decode.bytes_read, 0);
}

afterAll(() => setThreadCount(1));

describe("per-kind figures on tiny-k3", async () => {
  setThreadCount(1);
  const prompt = meta.prompt_ids.slice(0, 9);
  const gen = 5;

  it("resident trunk: bytes touched are the tensors' sizes, once per chunk (prefill) or token (decode)", async () => {
    const e = await Engine.load(TINY_K3, { mem: bigBox, preset: "laptop", prefetch: false });
    const r = (await e.complete(prompt, { maxTokens: gen, stopIds: [] })).report;
    e.close();
    expect(Object.keys(r.per_kind).sort()).toEqual([...REPORT_KINDS].sort());
    const tokens = gen - 1; // the last sampled token is not fed
    for (const k of REPORT_KINDS) {
      expect(Object.keys(r.per_kind[k].prefill).sort()).toEqual(["bytes_read", "bytes_touched", "seconds"]);
      expect(Object.keys(r.per_kind[k].decode).sort()).toEqual(["bytes_read", "bytes_touched", "seconds", "tokens"]);
      expect(r.per_kind[k].decode.tokens).toBe(tokens);
      expect(r.per_kind[k].decode.seconds).toBeGreaterThanOrEqual(0);
    }
    const dec = (k: (typeof REPORT_KINDS)[number]) => r.per_kind[k].decode.bytes_touched;
    const pre = (k: (typeof REPORT_KINDS)[number]) => r.per_kind[k].prefill.bytes_touched;
    expect(dec("kda")).toBe(tokens * kdaBytes);
    expect(pre("kda")).toBe(kdaBytes); // one chunk of 9
    expect(dec("dense_mlp")).toBe(tokens * denseBytes);
    expect(pre("dense_mlp")).toBe(denseBytes);
    expect(dec("moe_trunk")).toBe(tokens * moeTrunkBytes);
    expect(dec("lm_head")).toBe(tokens * V * D * 2);
    expect(pre("lm_head")).toBe(V * D * 2); // the last row only
    expect(dec("embed")).toBe(tokens * D * 2);
    // MLA: weights plus the latent cache (kv_lora + rope floats per position so far).
    const width = cfg.mla.kvLoraRank + cfg.mla.qkRopeHeadDim;
    let cacheBytes = 0;
    for (let t = 0; t < tokens; t++) cacheBytes += mlaLayers.length * (prompt.length + t + 1) * width * 4;
    expect(dec("mla")).toBe(tokens * mlaWeights + cacheBytes);
    // Experts: one token routes to k distinct experts per MoE layer, each touched whole.
    expect(dec("moe_experts") % expertBytes).toBe(0);
    expect(dec("moe_experts")).toBe(tokens * moeLayers.length * cfg.moe.topK * expertBytes);
    expect(totalRead(r)).toBe(r.bytes_read.total);
    const seconds = REPORT_KINDS.reduce((a, k) => a + r.per_kind[k].decode.seconds, 0);
    expect(seconds).toBeGreaterThan(0);
    expect(seconds).toBeLessThanOrEqual(r.decode_seconds + 1e-6);
    expect(r.floor).toBeNull();
  });

  it("ultra (embed and lm_head streamed): their reads are charged to embed and lm_head", async () => {
    const e = await Engine.load(TINY_K3, { mem: bigBox, preset: "ultra" });
    const r = (await e.complete(prompt, { maxTokens: gen, stopIds: [] })).report;
    e.close();
    const tokens = gen - 1;
    // O_DIRECT reads move each read's 4 KiB-aligned superset: the bytes asked plus < 2 pages per read.
    const within = (got: number, asked: number, reads: number) => {
      expect(got).toBeGreaterThanOrEqual(asked);
      expect(got).toBeLessThan(asked + reads * 8192);
    };
    const chunks = Math.ceil(V / headChunkRowsFor(V, D * 2));
    within(r.per_kind.lm_head.decode.bytes_read, tokens * V * D * 2, tokens * chunks);
    within(r.per_kind.lm_head.prefill.bytes_read, V * D * 2, chunks);
    within(r.per_kind.embed.decode.bytes_read, tokens * D * 2, tokens);
    within(r.per_kind.embed.prefill.bytes_read, prompt.length * D * 2, prompt.length);
    expect(totalRead(r)).toBe(r.bytes_read.total);
  });

  it("streamed trunk: the ring's reads are split over the layer's kinds and add up to the total", async () => {
    const { packTrunk } = await import("@k3/moe-stream");
    const trunkDir = mkdtempSync(join(tmpdir(), "k3-perkind-"));
    try {
      await packTrunk(TINY_K3, trunkDir);
      const { censusOf } = await import("../src/census.js");
      const largest = Math.max(...censusOf(cfg).layerTrunkBytes);
      const e = await Engine.load(TINY_K3, { mem: bigBox, preset: "laptop", budgets: { trunkBytes: 6 * largest, ringSlots: 2 }, trunkDir });
      expect(e.plan.streamedLayers.length).toBeGreaterThan(0);
      const r = (await e.complete(prompt, { maxTokens: gen, stopIds: [] })).report;
      e.close();
      expect(r.bytes_read.trunk).toBeGreaterThan(0);
      expect(totalRead(r)).toBeCloseTo(r.bytes_read.total, 3);
      expect(r.per_kind.kda.decode.bytes_read + r.per_kind.mla.decode.bytes_read).toBeGreaterThan(0);
    } finally {
      rmSync(trunkDir, { recursive: true, force: true });
    }
  });

  it("lm_head over many rows (one batched GEMM) gives each row's one-token bits", async () => {
    const e = await Engine.load(TINY_K3, { mem: bigBox, preset: "laptop" });
    const ids = meta.prompt_ids.slice(0, 12);
    const all = await e.model.forward(ids, e.model.newState(), { allLogits: true, kdaCore: "recurrent" });
    const s = e.model.newState();
    for (let t = 0; t < ids.length; t++) {
      const one = await e.model.forward([ids[t]], s);
      expect(Buffer.from(all.buffer, t * V * 4, V * 4).equals(Buffer.from(one.buffer, one.byteOffset, V * 4))).toBe(true);
    }
    e.close();
  });
});

describe("floor", () => {
  const prompt = meta.prompt_ids.slice(0, 9);
  const gen = 5;
  const c: FloorCeilings = { memGbps: 10, sources: { experts: 1, trunk: 2, lm_head: 4 } };

  it("per kind: max(touched / memory ceiling, read / the ceiling of the kind's source)", () => {
    expect(kindFloorSeconds("kda", 20e9, 1e9, c)).toBe(2); // memory-bound (trunk read: 0.5 s)
    expect(kindFloorSeconds("kda", 1e9, 6e9, c)).toBe(3); // trunk at 2 GB/s
    expect(kindFloorSeconds("moe_experts", 5e9, 3e9, c)).toBe(3); // experts at 1 GB/s
    expect(kindFloorSeconds("lm_head", 0, 8e9, c)).toBe(2); // lm_head at 4 GB/s
    expect(kindFloorSeconds("embed", 0, 1, c)).toBe(Infinity); // read with no ceiling for its source
    expect(kindFloorSeconds("attn_res", 1e9, 0, c)).toBeCloseTo(0.1, 12);
    for (const k of REPORT_KINDS) expect(DISK_SOURCES.includes(KIND_SOURCE[k] as never) || KIND_SOURCE[k] === null).toBe(true);
  });

  it("per phase: max(sum touched / memory, sum over sources of read / that source's ceiling)", () => {
    const z = { bytes_touched: 0, bytes_read: 0 };
    const fig = { kda: { bytes_touched: 20e9, bytes_read: 1e9 }, mla: z, moe_experts: { bytes_touched: 5e9, bytes_read: 3e9 }, lm_head: { bytes_touched: 0, bytes_read: 2e9 } };
    // disk: 3/1 + 1/2 + 2/4 = 4 s > memory 25/10 = 2.5 s
    expect(phaseFloorSeconds(fig, c)).toBeCloseTo(4, 12);
    expect(readsBySource(fig)).toEqual({ experts: 3e9, trunk: 1e9, lm_head: 2e9, embed: 0 });
    expect(phaseFloorSeconds({ kda: { bytes_touched: 80e9, bytes_read: 1e9 } }, c)).toBe(8);
  });

  it("the ceiling is the higher of before and after; a run faster than it is flagged", () => {
    const perKind = Object.fromEntries(REPORT_KINDS.map((k) => [k, { prefill: { seconds: 0, bytes_touched: 0, bytes_read: 0 }, decode: { seconds: 0, bytes_touched: 0, bytes_read: 0 } }])) as FloorInput["perKind"];
    perKind.moe_experts.decode = { seconds: 1, bytes_touched: 1e9, bytes_read: 2e9 };
    perKind.kda.decode = { seconds: 0.5, bytes_touched: 10e9, bytes_read: 0 };
    const base = uniformCeilings(20, 1);
    const ceil: Ceilings = { ...base, sources: base.sources.filter((s) => s.source === "experts") };
    const x: FloorInput = { perKind, decodeTokens: 2, prefillTokens: 0, decodeSeconds: 1.5, prefillSeconds: 0 };
    // Experts at 1 GB/s: floor 2 s for 2 GB > the run's 1.5 s: flagged (the phase read 1.33 GB/s).
    const slow = floorFromFigures(x, ceil);
    expect(slow.decode_floor_s_per_token).toBeCloseTo(1, 12);
    expect(slow.decode_ratio).toBeCloseTo(0.75, 12);
    expect(slow.warnings.join("\n")).toMatch(/experts: the decode phase read 1.33 GB\/s .* above the source's ceiling 1.00/);
    expect(slow.warnings.join("\n")).toMatch(/decode ran at 0.75x its floor/);
    // The same reads measured at 4 GB/s after the run: the higher ceiling is used, nothing flagged.
    const after: Ceilings = { ...ceil, mem_after_gbps: 10, sources: ceil.sources.map((s) => ({ ...s, after_gbps: 4 })) };
    const ok = floorFromFigures(x, after);
    expect(ceilingGbps(after.sources[0])).toBe(4);
    expect(ok.mem_ceiling_gbps).toBe(20);
    expect(ok.sources[0].ceiling_gbps).toBe(4);
    expect(ok.sources[0].decode_bytes_read).toBe(2e9);
    // max(11 GB / 20 GB/s, 2 GB / 4 GB/s) = 0.55 s over 2 tokens
    expect(ok.decode_floor_s_per_token).toBeCloseTo(0.275, 12);
    expect(ok.disk_ceiling_gbps).toBeCloseTo(4, 12);
    expect(ok.warnings).toEqual([]);
    // A kind below its own floor is named, whatever the phase's ratio: memory-bound (kda at 0.25 s
    // for 10 GB at 20 GB/s) blames the memory ceiling; read-bound (experts at 0.25 s for 2 GB at 4
    // GB/s) says its reads ran during other kinds' time. The phase itself stays above its floor.
    const under = { ...perKind, kda: { ...perKind.kda, decode: { seconds: 0.25, bytes_touched: 10e9, bytes_read: 0 } }, moe_experts: { ...perKind.moe_experts, decode: { seconds: 0.25, bytes_touched: 1e9, bytes_read: 2e9 } } };
    const w = floorFromFigures({ ...x, perKind: under }, after);
    expect(w.decode_ratio!).toBeGreaterThan(1);
    expect(w.warnings).toHaveLength(2);
    expect(w.warnings[0]).toMatch(/^kda: decode 250\.0 ms is 0\.50x its own floor 500\.0 ms: the memory ceiling is too low$/);
    expect(w.warnings[1]).toMatch(/^moe_experts: decode 250\.0 ms is 0\.50x its own floor 500\.0 ms: its experts reads ran \(partly\) during other kinds' time/);
    // Reads from a source that has no ceiling are named.
    perKind.lm_head.decode = { seconds: 0.1, bytes_touched: 0, bytes_read: 5 };
    expect(floorFromFigures(x, after).warnings.join("\n")).toMatch(/lm_head: 5 bytes read with no ceiling/);
  });

  it("the report's floor block from the counters", async () => {
    const e = await Engine.load(TINY_K3, { mem: bigBox, preset: "laptop" });
    await e.complete(meta.prompt_ids.slice(0, 9), { maxTokens: 4, stopIds: [] });
    const cn = e.model.counters;
    e.close();
    const f = floorReport(cn, uniformCeilings(0.001, 0.0001));
    let touched = 0;
    let read = 0;
    for (const k of REPORT_KINDS) {
      touched += cn.perKind[k].decode.bytesTouched;
      read += cn.perKind[k].decode.bytesRead;
    }
    expect(f.decode_floor_s_per_token).toBeCloseTo(Math.max(touched / 1e6, read / 1e5) / cn.phaseTokens.decode, 12);
    expect(f.decode_s_per_token).toBeCloseTo(cn.decodeSeconds / 3, 12);
    expect(f.decode_ratio).toBeCloseTo(f.decode_s_per_token / f.decode_floor_s_per_token, 12);
    expect(f.prefill_s_per_token).toBeCloseTo(cn.prefillSeconds / 9, 12);
    expect(f.decode_tokens).toBe(3);
    expect(f.prefill_tokens).toBe(9);
  });

  /** Every ceiling's reads lie in the files and ranges the run reads, with its piece size, depth and O_DIRECT-ness. */
  function checkPlansMatchRun(e: Engine, r: RunReport): void {
    const live = e.model.ioPatterns();
    const plans = e.ceilingPlans;
    expect(plans.map((p) => p.source).sort()).toEqual(live.map((p) => p.source).sort());
    for (const p of plans) {
      const l = live.find((x) => x.source === p.source)!;
      const { reads: _r, what: _w, ...pattern } = p;
      expect({ ...pattern, files: [...pattern.files].sort() }).toEqual({ ...l, files: [...l.files].sort() });
      expect(p.reads.length).toBeGreaterThan(0);
      for (const rd of p.reads) {
        expect(l.files).toContain(rd.file);
        expect(rd.length).toBeGreaterThan(0);
        expect(rd.length).toBeLessThanOrEqual(l.pieceBytes || l.requestBytes);
      }
    }
    // Every source the run read from has its ceiling in the report, and no warning names a missing one.
    const reads = { ...readsBySource(Object.fromEntries(REPORT_KINDS.map((k) => [k, r.per_kind[k].decode])) as never) };
    const pre = readsBySource(Object.fromEntries(REPORT_KINDS.map((k) => [k, r.per_kind[k].prefill])) as never);
    for (const s of DISK_SOURCES) if (reads[s] + pre[s] > 0) expect(r.floor!.sources.map((x) => x.source)).toContain(s);
    expect(r.floor!.warnings.filter((w) => /no ceiling/.test(w))).toEqual([]);
  }

  it("the ceilings read what the run reads: resident trunk (experts only)", async () => {
    const e = await Engine.load(TINY_K3, { mem: bigBox, preset: "laptop", floor: true });
    const r = e.floorAfterRun((await e.complete(prompt, { maxTokens: gen, stopIds: [] })).report);
    checkPlansMatchRun(e, r);
    e.close();
    expect(r.floor!.sources.map((s) => s.source)).toEqual(["experts"]);
    const index = (await import("@k3/moe-stream")).openCheckpointIndex(TINY_K3);
    const experts = [...Array(cfg.numLayers).keys()].filter((l) => isMoeLayer(cfg, l)).flatMap((l) => index.experts(l));
    for (const rd of e.ceilingPlans[0].reads) expect(experts.some((x) => x.file === rd.file && rd.offset >= x.offset && rd.offset + rd.length <= x.offset + x.byteLength)).toBe(true);
    expect(r.floor!.sources[0].after_gbps).toBeGreaterThan(0);
    expect(r.floor!.mem_after_gbps).toBeGreaterThan(0);
    // After the run the expert ceiling reads the experts the run was routed to (same pieces, depth, files).
    const routed = [...e.model.routedSeen!].map((k) => ({ layer: Math.floor(k / 65536), id: k % 65536 }));
    expect(routed.length).toBeGreaterThan(0);
    const after = afterPlans(e.floorSetup!, e.ceilingPlans, routed.map((x) => e.model.experts!.location(x.layer, x.id)))[0];
    expect(after.what).toMatch(/experts the run was routed to/);
    expect(r.floor!.sources[0].after_what).toBe(after.what);
    const { reads: _a, what: _b, ...pa } = after;
    const { reads: _c, what: _d, ...pb } = e.ceilingPlans[0];
    expect(pa).toEqual(pb);
    const used = routed.map((x) => e.model.experts!.location(x.layer, x.id));
    for (const rd of after.reads) expect(used.some((x) => x.file === rd.file && rd.offset >= x.offset && rd.offset + rd.length <= x.offset + x.byteLength)).toBe(true);
  });

  it("the ceilings read what the run reads: ultra (embed rows one at a time, lm_head chunks)", async () => {
    const e = await Engine.load(TINY_K3, { mem: bigBox, preset: "ultra", floor: true });
    const r = e.floorAfterRun((await e.complete(prompt, { maxTokens: gen, stopIds: [] })).report);
    checkPlansMatchRun(e, r);
    e.close();
    expect(r.floor!.sources.map((s) => s.source).sort()).toEqual(["embed", "experts", "lm_head"]);
    const index = (await import("@k3/moe-stream")).openCheckpointIndex(TINY_K3);
    const t = (n: string) => index.tensors.get(P + n)!;
    const head = t("lm_head.weight");
    const emb = t("model.embed_tokens.weight");
    const headReads = e.ceilingPlans.find((p) => p.source === "lm_head")!.reads;
    for (const rd of headReads) expect(rd.offset >= head.offset && rd.offset + rd.length <= head.offset + head.byteLength).toBe(true);
    // The whole head, in order, as each token reads it.
    expect(headReads.reduce((a, rd) => a + rd.length, 0)).toBe(head.byteLength);
    expect(headReads.every((rd, i) => i === 0 || rd.offset === headReads[i - 1].offset + headReads[i - 1].length)).toBe(true);
    const rows = e.ceilingPlans.find((p) => p.source === "embed")!;
    expect(rows.queueDepth).toBe(1);
    for (const rd of rows.reads) {
      expect(rd.length).toBe(D * 2);
      expect((rd.offset - emb.offset) % (D * 2)).toBe(0);
      expect(rd.offset + rd.length <= emb.offset + emb.byteLength).toBe(true);
    }
  });

  it("the ceilings read what the run reads: streamed trunk (the ring's chunks of its streamed layers)", async () => {
    const { packTrunk, readTrunkManifest } = await import("@k3/moe-stream");
    const trunkDir = mkdtempSync(join(tmpdir(), "k3-floor-trunk-"));
    try {
      await packTrunk(TINY_K3, trunkDir);
      const { censusOf } = await import("../src/census.js");
      const largest = Math.max(...censusOf(cfg).layerTrunkBytes);
      const e = await Engine.load(TINY_K3, { mem: bigBox, preset: "laptop", budgets: { trunkBytes: 6 * largest, ringSlots: 2 }, trunkDir, floor: true });
      const r = e.floorAfterRun((await e.complete(prompt, { maxTokens: gen, stopIds: [] })).report);
      checkPlansMatchRun(e, r);
      e.close();
      expect(r.floor!.sources.map((s) => s.source).sort()).toEqual(["experts", "trunk"]);
      const streamed = new Set(e.plan.streamedLayers);
      const groups = readTrunkManifest(trunkDir).groups.filter((g) => g.layer !== null && streamed.has(g.layer));
      for (const rd of e.ceilingPlans.find((p) => p.source === "trunk")!.reads) expect(groups.some((g) => rd.offset >= g.offset && rd.offset + rd.length <= g.offset + g.byteLength)).toBe(true);
    } finally {
      rmSync(trunkDir, { recursive: true, force: true });
    }
  });

  it("k3 run --floor measures the ceilings before and after the run and prints the per-kind table; without it the floor is null", async () => {
    const dir = mkdtempSync(join(tmpdir(), "k3-floor-"));
    try {
      const on = await captureCli(["run", "--model", TINY_K3, "--ids", "1,2,3,4", "--max-tokens", "3", "--threads", "1", "--floor", "--json", join(dir, "on.json")]);
      expect(on.code).toBe(0);
      const r = JSON.parse(readFileSync(join(dir, "on.json"), "utf8")) as RunReport;
      expect(r.floor!.mem_ceiling_gbps).toBeGreaterThan(0.5);
      expect(r.floor!.disk_ceiling_gbps).toBeGreaterThan(0);
      expect(r.floor!.decode_ratio).toBeGreaterThan(0);
      for (const s of r.floor!.sources) {
        expect(s.before_gbps).toBeGreaterThan(0);
        expect(s.after_gbps).toBeGreaterThan(0);
        expect(s.ceiling_gbps).toBe(Math.max(s.before_gbps, s.after_gbps!));
      }
      expect(Object.keys(r.floor!).sort()).toEqual([
        "after_note", "decode_floor_s_per_token", "decode_ratio", "decode_s_per_token", "decode_tokens", "disk_ceiling_gbps", "mem_after_gbps", "mem_before_gbps",
        "mem_ceiling_gbps", "prefill_floor_s_per_token", "prefill_s_per_token", "prefill_tokens", "sources", "warnings",
      ]);
      expect(on.stderr).toMatch(/per kind, decode \(2 tokens; per token\); ceilings: memory/);
      expect(on.stderr).toMatch(/ceilings \(measured now, before loading\)/);
      expect(on.stderr).toMatch(/ceilings \(GB\/s, before \/ after the run; the higher is used\)/);
      const off = await captureCli(["run", "--model", TINY_K3, "--ids", "1,2,3,4", "--max-tokens", "3", "--threads", "1", "--json", join(dir, "off.json")]);
      expect(off.code).toBe(0);
      expect(JSON.parse(readFileSync(join(dir, "off.json"), "utf8")).floor).toBeNull();
      expect(off.stderr).toMatch(/no floor \(run with --floor/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
