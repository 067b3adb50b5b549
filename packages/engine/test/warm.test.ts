/**
 * The expert-cache warm (EngineOptions.warm, `--warm`): "wait" fills the cache's empty slots
 * before load() returns (where it holds every routed expert, decode then reads nothing), "auto"
 * fills them in the background, "off" never; none of them changes a token. A partial cache is
 * filled up to its room, never past it; "auto" fills only a cache holding at least half of each
 * layer's experts.
 */
import { describe, expect, it } from "vitest";
import { Engine, type EngineOptions } from "../src/engine.js";
import { isMoeLayer, readConfig } from "../src/config.js";
import { GB } from "../src/presets.js";
import { UsageError } from "../src/errors.js";
import { captureCli, TINY_K3 } from "./helpers.js";

const bigBox = { totalBytes: 256 * GB, availableBytes: 250 * GB };
const cfg = readConfig(TINY_K3);
const moeLayers = cfg.layerKinds.map((_, l) => l).filter((l) => isMoeLayer(cfg, l)).length;
const prompt = [768, 100, 200, 300, 400, 500, 600, 700];

async function run(opts: EngineOptions) {
  const logs: string[] = [];
  const e = await Engine.load(TINY_K3, { mem: bigBox, preset: "laptop", threads: 1, ...opts, log: (l) => logs.push(l) });
  try {
    const warmAtLoad = e.warm?.result ?? null;
    const r = await e.complete(prompt, { maxTokens: 8, stopIds: [], temperature: 0 });
    return { ids: r.ids, report: r.report, logs, warmAtLoad, plan: e.plan };
  } finally {
    e.close();
  }
}

describe("expert cache warm", () => {
  it("wait: every expert is in the cache before the run; the run reads nothing and gives the same tokens as off", async () => {
    const off = await run({ warm: "off" });
    expect(off.plan.cacheSlotsPerLayer).toBeGreaterThanOrEqual(cfg.moe.numExperts); // the case a warm is for
    expect(off.report.warm).toBeNull();
    expect(off.report.bytes_read.experts).toBeGreaterThan(0);
    const wait = await run({ warm: "wait" });
    const total = moeLayers * cfg.moe.numExperts;
    expect(wait.warmAtLoad).toMatchObject({ experts: total, total, skipped: 0, failed: 0, cancelled: false });
    expect(wait.report.warm).toMatchObject({ mode: "wait", done: true, experts: total, total, failed: 0, cancelled: false });
    expect(wait.report.warm!.gbps).toBeGreaterThan(0);
    expect(wait.logs.some((l) => /^expert cache warm: \d+ experts \(.+\) in [\d.]+ s = [\d.]+ GB\/s$/.test(l))).toBe(true);
    // The warm's reads belong to the load, not to the run: no kind is charged with them.
    expect(wait.report.bytes_read.experts).toBe(0);
    expect(wait.report.per_kind.moe_experts.prefill.bytes_read).toBe(0);
    expect(wait.report.resident_hit_rate).toBe(1);
    expect(wait.report.plan_check!.mismatches).toEqual([]);
    expect(wait.ids).toEqual(off.ids);
  });

  it("auto: the warm runs in the background beside the run; same tokens, and the plan check still holds", async () => {
    const off = await run({ warm: "off" });
    const auto = await run({});
    expect(auto.report.warm?.mode).toBe("background");
    expect(auto.ids).toEqual(off.ids);
    expect(auto.report.plan_check!.mismatches).toEqual([]);
  });

  it("a partial cache is filled up to its room and no further; no cache: nothing to warm (wait says so)", async () => {
    const off = await run({ warm: "off" });
    const slotBytes = off.plan.parts.expertCache / (off.plan.cacheSlotsPerLayer * moeLayers);
    const part = await run({ warm: "wait", budgets: { cacheBytes: Math.floor(slotBytes * moeLayers * 5.5) } });
    expect(part.plan.cacheSlotsPerLayer).toBe(5);
    expect(part.warmAtLoad).toMatchObject({ experts: 5 * moeLayers, failed: 0 });
    expect(part.logs.some((l) => l.startsWith(`expert cache warm: ${5 * moeLayers} experts (5 of ${cfg.moe.numExperts} per MoE layer`))).toBe(true);
    expect(part.ids).toEqual(off.ids);
    // auto warms in the background only a cache holding at least half of each layer's experts.
    const below = await run({ budgets: { cacheBytes: Math.floor(slotBytes * moeLayers * 5.5) } });
    expect(below.report.warm).toBeNull();
    const half = Math.ceil(cfg.moe.numExperts / 2);
    const above = await run({ budgets: { cacheBytes: Math.floor(slotBytes * moeLayers * (half + 0.5)) } });
    expect(above.plan.cacheSlotsPerLayer).toBe(half);
    expect(above.report.warm?.mode).toBe("background");
    expect(above.ids).toEqual(off.ids);
    const none = await run({ warm: "wait", budgets: { cacheBytes: 0 } });
    expect(none.plan.cacheSlotsPerLayer).toBe(0);
    expect(none.report.warm).toBeNull();
    expect(none.logs).toContain("expert cache warm: nothing to warm: the plan has no expert cache (0 slots per MoE layer)");
  });

  it("refuses an unknown mode, in the API and the CLI", async () => {
    await expect(Engine.load(TINY_K3, { warm: "eager" as "auto" })).rejects.toThrow(UsageError);
    await expect(Engine.load(TINY_K3, { warm: "eager" as "auto" })).rejects.toThrow("--warm eager: expected auto, wait or off");
    const r = await captureCli(["run", "--model", TINY_K3, "--warm", "eager", "--prompt", "hi"]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/--warm eager: expected auto, wait or off/);
  });

  it("k3 run --warm wait prints the warm and exits 0", async () => {
    const r = await captureCli(["run", "--model", TINY_K3, "--preset", "laptop", "--warm", "wait", "--ids", "768,100", "--max-tokens", "3", "--threads", "1"]);
    expect(r.code).toBe(0);
    expect(r.stderr).toMatch(/expert cache warm: \d+ experts/);
    expect(r.stderr).toMatch(/expert cache warm \(wait\): \d+ of \d+ experts, .+ in [\d.]+ s = [\d.]+ GB\/s/);
  });
});
