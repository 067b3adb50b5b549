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
import { floorReport, floorSeconds, REPORT_KINDS, type RunReport } from "../src/report.js";
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
    const chunks = Math.ceil(V / headChunkRowsFor(V));
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
      packTrunk(TINY_K3, trunkDir);
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
  it("is max(touched / memory ceiling, read / disk ceiling) per token", () => {
    expect(floorSeconds(20e9, 1e9, { memGbps: 10, diskGbps: 1 })).toBe(2);
    expect(floorSeconds(5e9, 3e9, { memGbps: 10, diskGbps: 1 })).toBe(3);
  });

  it("the report's floor block from the counters", async () => {
    const e = await Engine.load(TINY_K3, { mem: bigBox, preset: "laptop" });
    await e.complete(meta.prompt_ids.slice(0, 9), { maxTokens: 4, stopIds: [] });
    const c = e.model.counters;
    e.close();
    const ceil = { memGbps: 0.001, diskGbps: 0.0001 };
    const f = floorReport(c, ceil);
    let touched = 0;
    let read = 0;
    for (const k of REPORT_KINDS) {
      touched += c.perKind[k].decode.bytesTouched;
      read += c.perKind[k].decode.bytesRead;
    }
    expect(f.decode_floor_s_per_token).toBeCloseTo(Math.max(touched / 1e6, read / 1e5) / c.phaseTokens.decode, 12);
    expect(f.decode_s_per_token).toBeCloseTo(c.decodeSeconds / 3, 12);
    expect(f.decode_ratio).toBeCloseTo(f.decode_s_per_token / f.decode_floor_s_per_token, 12);
    expect(f.prefill_s_per_token).toBeCloseTo(c.prefillSeconds / 9, 12);
    expect(Object.keys(f).sort()).toEqual(["decode_floor_s_per_token", "decode_ratio", "decode_s_per_token", "disk_ceiling_gbps", "mem_ceiling_gbps", "prefill_floor_s_per_token", "prefill_s_per_token"]);
  });

  it("k3 run --floor measures both ceilings in the run and prints the per-kind table; without it the floor is null", async () => {
    const dir = mkdtempSync(join(tmpdir(), "k3-floor-"));
    try {
      const on = await captureCli(["run", "--model", TINY_K3, "--ids", "1,2,3,4", "--max-tokens", "3", "--threads", "1", "--floor", "--json", join(dir, "on.json")]);
      expect(on.code).toBe(0);
      const r = JSON.parse(readFileSync(join(dir, "on.json"), "utf8")) as RunReport;
      expect(r.floor!.mem_ceiling_gbps).toBeGreaterThan(0.5);
      expect(r.floor!.disk_ceiling_gbps).toBeGreaterThan(0);
      expect(r.floor!.decode_ratio).toBeGreaterThan(0);
      expect(on.stderr).toMatch(/per kind, decode \(2 tokens; per token\); ceilings: memory/);
      expect(on.stderr).toMatch(/ceilings \(measured now\)/);
      const off = await captureCli(["run", "--model", TINY_K3, "--ids", "1,2,3,4", "--max-tokens", "3", "--threads", "1", "--json", join(dir, "off.json")]);
      expect(off.code).toBe(0);
      expect(JSON.parse(readFileSync(join(dir, "off.json"), "utf8")).floor).toBeNull();
      expect(off.stderr).toMatch(/no floor \(run with --floor/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
