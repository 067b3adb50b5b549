import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { describe, expect, it } from "vitest";
import { censusOf } from "../src/census.js";
import { parseConfig, readConfig, withLayers } from "../src/config.js";
import { ALIGN_SLACK, allLogitsChunkSize, autoChunkSize, readMemInfo, budgetsFor, checkContextFits, checkPlanFits, formatPlan, GB, headChunkRowsFor, headReadSlotBytes, planMemory, ringSlotBytesFor, presetForMemory, PRESET_NAMES } from "../src/presets.js";
import { publishedK3Config as rawK3, TINY_K3 } from "./helpers.js";

const census = censusOf(readConfig(TINY_K3));
const bigBox = { totalBytes: 256 * GB, availableBytes: 250 * GB };

describe("presets and plan", () => {
  it("maps MemAvailable to a preset like doctor", () => {
    expect(presetForMemory(8 * GB)).toBe("ultra");
    expect(presetForMemory(16 * GB)).toBe("laptop");
    expect(presetForMemory(40 * GB)).toBe("desktop");
    expect(presetForMemory(100 * GB)).toBe("workstation");
    expect(presetForMemory(200 * GB)).toBe("server");
  });

  it("pins everything for the tiny model at every preset", () => {
    for (const p of PRESET_NAMES) {
      const plan = planMemory(census, budgetsFor(p, census, bigBox), p, bigBox);
      expect(plan.pinnedLayers.length).toBe(13);
      expect(plan.ringSlots).toBe(0);
      expect(formatPlan(plan, 13)).toContain("all 13 layers pinned");
    }
  });

  it("streams the largest layers' complement under a tight trunk budget", () => {
    const largest = Math.max(...census.layerTrunkBytes);
    // Ring slots are what the TrunkStreamer allocates: the largest layer rounded up to whole read pieces (4 KiB here).
    const slot = ringSlotBytesFor(largest);
    expect(slot).toBe(Math.ceil(largest / 4096) * 4096);
    const budgets = { trunkBytes: 2 * slot + 3 * largest, cacheBytes: 0, kvBytes: 1e6, ringSlots: 2, streamEmbedHead: true };
    expect(budgets.trunkBytes).toBeLessThan(census.trunkBytes);
    const plan = planMemory(census, budgets, "custom", bigBox, { packedTrunk: true });
    expect(plan.ringSlots).toBe(2);
    expect(plan.trunkMode).toBe("streamed");
    expect(plan.pinnedLayers.length).toBe(3);
    expect(plan.parts.trunkRing).toBe(2 * slot);
    expect(plan.pinnedLayers.length + plan.streamedLayers.length).toBe(13);
    expect(plan.expectedBytesPerToken).toBeGreaterThan(census.expertBytesPerToken);
    expect(formatPlan(plan, 13)).toMatch(/ring 2 x .* \(async prefetch\)/);
  });

  it("refuses a plan that does not fit with both numbers", () => {
    const small = { totalBytes: 1 * GB, availableBytes: 0.2 * GB };
    const plan = planMemory(census, budgetsFor("laptop", census, small), "laptop", small);
    expect(() => checkPlanFits(plan)).toThrow(/needs .* but only 190.00 MB is usable/);
  });

  it("takes the memory cgroup limit (v2 memory.max, v1 memory.limit_in_bytes) into the available figure and refuses above it", () => {
    // A fake /proc + /sys tree: the host shows 64 GiB available; the container's cgroup allows
    // 1 GiB + 200 MiB (1 GiB already charged), set on the parent of the process's cgroup.
    const root = mkdtempSync(join(tmpdir(), "k3-cgroup-"));
    const put = (f: string, text: string) => {
      mkdirSync(dirname(join(root, f)), { recursive: true });
      writeFileSync(join(root, f), text);
    };
    try {
      put("proc/meminfo", `MemTotal:       ${128 * 2 ** 20} kB\nMemFree:        1 kB\nMemAvailable:   ${64 * 2 ** 20} kB\n`);
      put("proc/self/cgroup", "0::/box/app\n");
      const limit = 2 ** 30 + 200 * 2 ** 20;
      put("sys/fs/cgroup/box/memory.max", String(limit));
      put("sys/fs/cgroup/box/memory.current", String(1 * 2 ** 30));
      put("sys/fs/cgroup/box/app/memory.max", "max");
      put("sys/fs/cgroup/box/app/memory.current", String(1 * 2 ** 30));
      const v2 = readMemInfo(root);
      expect(v2).toEqual({ totalBytes: limit, availableBytes: 200 * 2 ** 20, cgroupLimitBytes: limit });
      // A plan that fits the host's 64 GiB is refused under the limit.
      const host = { totalBytes: 128 * 2 ** 30, availableBytes: 64 * 2 ** 30 };
      expect(() => checkPlanFits(planMemory(census, budgetsFor("desktop", census, host), "desktop", host))).not.toThrow();
      const plan = planMemory(census, budgetsFor("desktop", census, v2), "desktop", v2);
      expect(() => checkPlanFits(plan)).toThrow(/but only 199\.23 MB is usable \(95% of the headroom under the memory cgroup limit 1\.28 GB, 209\.72 MB\)/);
      // cgroup v1.
      put("proc/self/cgroup", "12:cpu,cpuacct:/\n5:memory:/docker/abc\n");
      put("sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes", String(2 * 2 ** 30));
      put("sys/fs/cgroup/memory/docker/abc/memory.usage_in_bytes", String(2 ** 29));
      expect(readMemInfo(root)).toEqual({ totalBytes: 2 * 2 ** 30, availableBytes: 1.5 * 2 ** 30, cgroupLimitBytes: 2 * 2 ** 30 });
      // v1 "unlimited" (2^63 rounded to a page) and no limit at all leave /proc/meminfo's figures.
      put("sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes", "9223372036854771712");
      expect(readMemInfo(root)).toEqual({ totalBytes: 128 * 2 ** 30, availableBytes: 64 * 2 ** 30 });
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });

  it("refuses a context larger than the KV budget with both numbers", () => {
    const plan = planMemory(census, { trunkBytes: 1e9, cacheBytes: 0, kvBytes: 10 * census.kvBytesPerToken, ringSlots: 2, streamEmbedHead: false }, "custom", bigBox);
    expect(plan.kvCapacityTokens).toBe(10);
    expect(() => checkContextFits(plan, 11, census.kvBytesPerToken)).toThrow(/11 tokens .* holds 10 tokens/);
    expect(() => checkContextFits(plan, 10, census.kvBytesPerToken)).not.toThrow();
  });

  it("a prefill chunk above the default adds its tokens' work buffers to runtime + scratch (K3: 1.65 MB per token)", () => {
    const k3 = censusOf(parseConfig(JSON.parse(JSON.stringify(rawK3()))));
    // The mixers run in 64-token pieces, so only the MoE and the hidden states grow with the chunk:
    // 16 x (3584 + 2 x 3072 + 2 x 3584) + 2 x 3584 expert rows, 2 x 7168 + 2 x 2 x 3072 shared,
    // (6 + 8 snapshots + the embedding's) x 7168 hidden, in f32.
    expect(k3.chunkScratchBytesPerToken).toBe((16 * (3584 + 2 * 3072 + 2 * 3584) + 2 * 3584 + 2 * 7168 + 2 * 2 * 3072 + (6 + 9) * 7168) * 4);
    expect(k3.chunkScratchBytesPerToken / 1e6).toBeGreaterThan(0.63); // measured: chunk 256 peaked 120 MB above chunk 64 (2-layer K3, ultra)
    const box = { totalBytes: 64 * GB, availableBytes: 60 * GB };
    const at = (chunkSize?: number) => planMemory(k3, budgetsFor("ultra", k3, box), "ultra", box, { chunkSize });
    expect(at(64).totalBytes).toBe(at(undefined).totalBytes);
    expect(at(16).totalBytes).toBe(at(64).totalBytes); // the base covers the default chunk and smaller ones
    expect(at(256).parts.runtime - at(64).parts.runtime).toBe(192 * k3.chunkScratchBytesPerToken);
    expect(formatPlan(at(256), 93)).toMatch(/runtime \+ scratch/);
  });

  it("auto picks the largest prefill chunk whose work buffers take at most a tenth of its usable memory; the named presets and --chunk keep theirs", () => {
    const k3 = censusOf(parseConfig(JSON.parse(JSON.stringify(rawK3()))));
    const perToken = k3.chunkScratchBytesPerToken; // 1.65 MB
    // usable = available - (2 GB + 2% of total + 6.4 GB)
    const cases: Array<[number, number, number]> = [[64, 60, 1024], [24, 24, 512], [12, 11, 128], [9, 9, 64]];
    for (const [total, available, T] of cases) {
      const box = { totalBytes: total * GB, availableBytes: available * GB };
      const usable = box.availableBytes - (2 * GB + 0.02 * box.totalBytes + 6.4 * GB);
      expect(autoChunkSize(k3, usable), `${available} GB`).toBe(T);
      expect((T - 64) * perToken).toBeLessThanOrEqual(0.1 * usable);
      const bigger = [128, 256, 512, 1024].find((c) => c > T); // the next one would not fit (1024 is the largest auto picks)
      if (bigger) expect((bigger - 64) * perToken, `${available} GB`).toBeGreaterThan(0.1 * usable);
      const budgets = budgetsFor("auto", k3, box);
      expect(budgets.chunkSize).toBe(T);
      const plan = planMemory(k3, budgets, "auto", box, { packedTrunk: true });
      expect(plan.chunkSize).toBe(T);
      expect(plan.parts.runtime).toBe(0.25 * GB + (T - 64) * perToken);
      if (T > 64) expect(formatPlan(plan, 93)).toContain(`prefill chunk: ${T} tokens (its work buffers: `);
      // --chunk wins, and auto then keeps no buffers for a larger one
      const b64 = budgetsFor("auto", k3, box, 64);
      expect(b64.chunkSize).toBe(64);
      expect(b64.trunkBytes + b64.cacheBytes).toBeGreaterThanOrEqual(budgets.trunkBytes + budgets.cacheBytes);
      expect(planMemory(k3, b64, "auto", box, { packedTrunk: true, chunkSize: 64 }).parts.runtime).toBe(0.25 * GB);
      expect(planMemory(k3, budgetsFor("laptop", k3, box), "laptop", box).chunkSize).toBe(64);
    }
    // the buffers come out of what auto hands the trunk, so the plan still leaves the reserve
    const box = { totalBytes: 24 * GB, availableBytes: 24 * GB };
    const plan = planMemory(k3, budgetsFor("auto", k3, box), "auto", box, { packedTrunk: true });
    expect(plan.totalBytes).toBeLessThanOrEqual(box.availableBytes - 8 * GB);
  });

  it("k3 eval's chunk keeps every position's logits inside the buffers the plan holds for the chunk", () => {
    const k3 = censusOf(parseConfig(JSON.parse(JSON.stringify(rawK3()))));
    const V = 163840;
    // 960 x 1.65 MB of buffers hold 687 tokens of buffers + logits (0.66 MB each): 640 beyond 64
    expect(allLogitsChunkSize(1024, k3, V)).toBe(704);
    expect((704 - 64) * (k3.chunkScratchBytesPerToken + 4 * V)).toBeLessThanOrEqual(960 * k3.chunkScratchBytesPerToken);
    expect((768 - 64) * (k3.chunkScratchBytesPerToken + 4 * V)).toBeGreaterThan(960 * k3.chunkScratchBytesPerToken);
    expect(allLogitsChunkSize(128, k3, V)).toBe(64);
    expect(allLogitsChunkSize(64, k3, V)).toBe(64);
    expect(allLogitsChunkSize(16, k3, V)).toBe(16);
    expect(allLogitsChunkSize(100, k3, V)).toBe(100); // not a multiple of 64: a cut elsewhere would change bits
    expect(allLogitsChunkSize(1024, census, 0)).toBe(1024); // no logits: the chunk stays
  });

  it("plans real K3 sizes: laptop gets one ring slot, desktop two plus pinned layers, server pins most", () => {
    const raw = JSON.parse(JSON.stringify(rawK3()));
    const k3 = censusOf(parseConfig(raw));
    const largest = Math.max(...k3.layerTrunkBytes);
    expect(largest).toBeGreaterThan(2.3e9); // layer 0 with the dense MLP (2.34 GB)
    const box = { totalBytes: 512 * GB, availableBytes: 500 * GB };
    const streamed = { packedTrunk: true };
    const laptop = planMemory(k3, budgetsFor("laptop", k3, box), "laptop", box, streamed);
    expect(laptop.ringSlots).toBe(1);
    expect(laptop.pinnedLayers.length).toBe(0);
    const desktop = planMemory(k3, budgetsFor("desktop", k3, box), "desktop", box, streamed);
    expect(desktop.ringSlots).toBe(2);
    expect(desktop.pinnedLayers.length).toBeGreaterThan(5);
    const server = planMemory(k3, budgetsFor("server", k3, box), "server", box, streamed);
    expect(server.pinnedLayers.length).toBeGreaterThan(85);
    // cold-cache reads per token: streamed trunk + 16 experts x 92 layers
    expect(laptop.expectedBytesPerToken).toBeGreaterThan(k3.expertBytesPerToken + 100e9);
    const ultra = planMemory(k3, budgetsFor("ultra", k3, box), "ultra", box, streamed);
    expect(ultra.embedHeadResident).toBe(false);
    expect(ultra.totalBytes).toBeLessThan(4 * GB);
    // The expert store's streaming slots are planned: 16 + 2 demand + 16 lookahead, one expert each.
    const slot = Math.ceil(k3.expertBytes / 4096) * 4096 + 4096;
    expect(laptop.parts.expertReadSlots).toBe(34 * slot);
    // A prompt cache and speculation's checkpoint are planned when on: capped snapshots, one KDA state set.
    const extras = planMemory(k3, budgetsFor("laptop", k3, box), "laptop", box, { ...streamed, promptCache: { slots: 2, maxBytes: 2 ** 40 }, spec: true });
    const snapshot = k3.recurrentStateBytes + laptop.kvCapacityTokens * k3.kvBytesPerToken;
    expect(extras.parts.promptCache).toBe(2 * snapshot);
    expect(extras.parts.specCheckpoint).toBe(k3.recurrentStateBytes);
    expect(extras.totalBytes).toBe(laptop.totalBytes + 2 * snapshot + k3.recurrentStateBytes);
    expect(planMemory(k3, budgetsFor("laptop", k3, box), "laptop", box, { ...streamed, promptCache: { slots: 2, maxBytes: GB } }).parts.promptCache).toBe(GB);
    expect([laptop.parts.promptCache, laptop.parts.specCheckpoint]).toEqual([undefined, undefined]);
    const noPrefetch = planMemory(k3, budgetsFor("laptop", k3, box), "laptop", box, { ...streamed, prefetch: false });
    expect(noPrefetch.parts.expertReadSlots).toBe(18 * slot);
    expect(laptop.totalBytes - noPrefetch.totalBytes).toBe(16 * slot);
  });

  it("without a packed trunk plans the whole trunk resident: no ring, no trunk reads (issue 13's 4-layer K3 figures)", () => {
    const k3 = parseConfig(JSON.parse(JSON.stringify(rawK3())));
    const c4 = censusOf(withLayers(k3, 4));
    const box = { totalBytes: 64 * GB, availableBytes: 60 * GB };
    const perExpert = c4.expertBytes + ALIGN_SLACK;
    expect(c4.expertBytes).toBe(17_547_264);
    for (const preset of ["ultra", "laptop"] as const) {
      const plan = planMemory(c4, budgetsFor(preset, c4, box), preset, box);
      expect(plan.trunkMode).toBe("resident");
      expect(plan.ringSlots).toBe(0);
      expect(plan.pinnedLayers).toEqual([0, 1, 2, 3]);
      expect(plan.expectedReads.trunk).toBe(0);
      expect(plan.parts.trunkRing).toBe(0);
      expect(plan.parts.pinnedTrunk).toBe(c4.trunkBytes);
      // 3 MoE layers x 16 experts, one aligned-superset read each.
      expect(plan.expectedReads.experts).toBe(3 * 16 * perExpert);
      expect(plan.trunkNote).toMatch(/no packed trunk .* whole trunk is loaded resident \(5\.72 GB, over the \d\.\d+ GB trunk budget\)/);
      expect(formatPlan(plan, 4)).toContain("all 4 layers pinned (trunk resident)");
      expect(formatPlan(plan, 4)).toContain("note: no packed trunk");
    }
    const ultra = planMemory(c4, budgetsFor("ultra", c4, box), "ultra", box);
    const laptop = planMemory(c4, budgetsFor("laptop", c4, box), "laptop", box);
    // What the issue measured: 3.19 GB/token at ultra (experts + streamed lm_head), 0.84 at laptop.
    expect(ultra.expectedBytesPerToken / GB).toBeCloseTo(3.19, 2);
    expect(laptop.expectedBytesPerToken / GB).toBeCloseTo(0.84, 2);
    expect(ultra.parts.embedHeadReadSlots).toBe(headReadSlotBytes(c4));
    expect(headChunkRowsFor(163840, 7168 * 2)).toBe(292); // 4 MiB chunks of K3's 14,336-byte rows
    expect(headChunkRowsFor(1000, 256)).toBe(63); // a small vocabulary: at least 16 chunks
    expect(headReadSlotBytes(c4)).toBe(4 * (292 * 7168 * 2 + 4096)); // four 292-row chunks, page-rounded + one page
    // With a packed trunk the same budgets stream: a ring and trunk reads.
    const packed = planMemory(c4, budgetsFor("laptop", c4, box), "laptop", box, { packedTrunk: true });
    expect(packed.trunkMode).toBe("streamed");
    expect(packed.ringSlots).toBe(1);
    expect(packed.expectedReads.trunk).toBeGreaterThan(5 * GB);
  });

  it("auto gives the trunk everything on a big machine and caps it on a small one", () => {
    const big = budgetsFor("auto", census, bigBox);
    expect(big.trunkBytes).toBe(census.trunkBytes);
    expect(() => budgetsFor("huge" as never, census)).toThrow(/--preset huge: expected one of/);
  });
});
