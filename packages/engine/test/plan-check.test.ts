// The run report's plan check: planned vs measured bytes per decoded token by source, memory parts, flags.
import { describe, expect, it } from "vitest";
import { censusOf } from "../src/census.js";
import { parseConfig, withLayers } from "../src/config.js";
import { budgetsFor, GB, planMemory } from "../src/presets.js";
import { checkPlan, formatReport, buildReport, emptyCounters } from "../src/report.js";
import { publishedK3Config } from "./helpers.js";

const c4 = censusOf(withLayers(parseConfig(JSON.parse(JSON.stringify(publishedK3Config()))), 4));
const box = { totalBytes: 64 * GB, availableBytes: 60 * GB };
const ultra = planMemory(c4, budgetsFor("ultra", c4, box), "ultra", box);

describe("plan check", () => {
  it("holds when each source is within 10 %, with experts scaled by the decode hit rate", () => {
    const r = ultra.expectedReads;
    const pc = checkPlan({
      plan: ultra,
      decodeForwards: 4,
      // 25 % of expert requests hit the cache: 0.75 of the cold expert bytes, +5 % on the head.
      decodeBytes: { trunk: 0, experts: 4 * 0.75 * r.experts, embedHead: 4 * 1.05 * r.embedHead },
      decodeExpertRequests: 192,
      decodeExpertHits: 48,
      allocated: { pinnedTrunk: c4.trunkBytes, embedHeadReadSlots: ultra.parts.embedHeadReadSlots },
      peakRssBytes: ultra.totalBytes - 1,
    });
    expect(pc.decode_resident_hit_rate).toBe(0.25);
    expect(pc.expected_per_token.experts).toBeCloseTo(0.75 * r.experts, 0);
    expect(pc.planned_per_token.total).toBe(ultra.expectedBytesPerToken);
    expect(pc.mismatches).toEqual([]);
  });

  it("expert reads below the hit-scaled plan hold; above it (beyond one expert read) they are flagged", () => {
    const r = ultra.expectedReads;
    const run = (expertsPerToken: number) =>
      checkPlan({ plan: ultra, decodeForwards: 4, decodeBytes: { trunk: 0, experts: 4 * expertsPerToken, embedHead: 4 * r.embedHead }, decodeExpertRequests: 192, decodeExpertHits: 0, allocated: {}, peakRssBytes: 1 }).mismatches;
    expect(ultra.expertReadBytes).toBe(c4.expertBytes + 4096);
    expect(run(0.8 * r.experts)).toEqual([]);
    expect(run(1.1 * r.experts + ultra.expertReadBytes / 4 - 1)).toEqual([]);
    expect(run(1.2 * r.experts)).toEqual([expect.stringMatching(/^experts reads: .* \(\+?20%\)$/)]);
  });

  it("flags the issue's case: a streaming ring planned (8.91 GB/token) where the run read 3.19", () => {
    // The old plan for this run: the trunk streamed although no packed trunk was given.
    const wrong = planMemory(c4, budgetsFor("ultra", c4, box), "ultra", box, { packedTrunk: true });
    expect(wrong.expectedBytesPerToken / GB).toBeCloseTo(8.91, 1);
    const measured = { trunk: 0, experts: ultra.expectedReads.experts, embedHead: ultra.expectedReads.embedHead };
    const pc = checkPlan({ plan: wrong, decodeForwards: 1, decodeBytes: measured, decodeExpertRequests: 48, decodeExpertHits: 0, allocated: { trunkRing: 0 }, peakRssBytes: 1 });
    expect(pc.mismatches).toEqual([expect.stringMatching(/^trunk reads: 0 B\/token measured vs 5\.72 GB\/token planned \(-100%\)$/)]);
    // The fixed plan holds for the same run.
    expect(checkPlan({ plan: ultra, decodeForwards: 1, decodeBytes: measured, decodeExpertRequests: 48, decodeExpertHits: 0, allocated: {}, peakRssBytes: 1 }).mismatches).toEqual([]);
  });

  it("flags a part allocated above its plan and a peak RSS above the total; the text report says so", () => {
    const pc = checkPlan({
      plan: ultra,
      decodeForwards: 0,
      decodeBytes: { trunk: 0, experts: 0, embedHead: 0 },
      decodeExpertRequests: 0,
      decodeExpertHits: 0,
      allocated: { expertReadSlots: 2 * ultra.parts.expertReadSlots },
      peakRssBytes: ultra.totalBytes + GB,
    });
    expect(pc.mismatches).toHaveLength(2);
    expect(pc.mismatches[0]).toMatch(/^expert read slots: 9\d\d\.\d\d MB allocated vs 4\d\d\.\d\d MB planned$/);
    expect(pc.mismatches[1]).toMatch(/^peak RSS .* exceeds the planned total/);
    const report = buildReport({ model: "m", preset: "ultra", threads: 1, simd: "scalar", chunkSize: 64, promptIds: [1], generatedIds: [], text: "", stopReason: "length", counters: emptyCounters(), wallSeconds: 1 });
    expect(report.plan_check).toBeNull();
    const text = formatReport({ ...report, plan_check: pc });
    expect(text).toContain("plan vs run: no decode forward");
    expect(text).toMatch(/PLAN MISMATCH \(>10%\): expert read slots/);
  });
});
