import { describe, expect, it } from "vitest";
import { censusOf } from "../src/census.js";
import { readConfig } from "../src/config.js";
import { budgetsFor, checkContextFits, checkPlanFits, formatPlan, GB, planMemory, presetForMemory, PRESET_NAMES } from "../src/presets.js";
import { TINY_K3 } from "./helpers.js";

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
    const budgets = { trunkBytes: 2 * largest + 3 * largest, cacheBytes: 0, kvBytes: 1e6, ringSlots: 2, streamEmbedHead: true };
    const plan = planMemory(census, budgets, "custom", bigBox);
    expect(plan.ringSlots).toBe(2);
    expect(plan.pinnedLayers.length).toBeGreaterThanOrEqual(3);
    expect(plan.pinnedLayers.length + plan.streamedLayers.length).toBe(13);
    expect(plan.expectedBytesPerToken).toBeGreaterThan(census.expertBytesPerToken);
    expect(formatPlan(plan, 13)).toMatch(/ring 2 x .* \(async prefetch\)/);
  });

  it("refuses a plan that does not fit with both numbers", () => {
    const small = { totalBytes: 1 * GB, availableBytes: 0.2 * GB };
    const plan = planMemory(census, budgetsFor("laptop", census, small), "laptop", small);
    expect(() => checkPlanFits(plan)).toThrow(/needs .* but only 190.00 MB is usable/);
  });

  it("refuses a context larger than the KV budget with both numbers", () => {
    const plan = planMemory(census, { trunkBytes: 1e9, cacheBytes: 0, kvBytes: 10 * census.kvBytesPerToken, ringSlots: 2, streamEmbedHead: false }, "custom", bigBox);
    expect(plan.kvCapacityTokens).toBe(10);
    expect(() => checkContextFits(plan, 11, census.kvBytesPerToken)).toThrow(/11 tokens .* holds 10 tokens/);
    expect(() => checkContextFits(plan, 10, census.kvBytesPerToken)).not.toThrow();
  });

  it("auto gives the trunk everything on a big machine and caps it on a small one", () => {
    const big = budgetsFor("auto", census, bigBox);
    expect(big.trunkBytes).toBe(census.trunkBytes);
    expect(() => budgetsFor("huge" as never, census)).toThrow(/--preset huge: expected one of/);
  });
});
