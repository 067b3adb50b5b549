/**
 * Peak RSS within the plan at every preset, checked the hard way: each `k3 run` is a child process
 * in a cgroup whose memory cap (no swap) is the plan's total. The child must exit 0 (not be
 * OOM-killed), its peak RSS must be within the plan, and its report's plan check must hold.
 * Skips with the reason where no memory cgroup is writable (not root, no controller).
 */
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { packTrunk } from "@k3/moe-stream";
import { afterAll, describe, expect, it } from "vitest";
import { censusOf } from "../src/census.js";
import { readConfig } from "../src/config.js";
import { budgetsFor, GB, planMemory, PRESET_NAMES, readMemInfo, type PresetName } from "../src/presets.js";
import type { RunReport } from "../src/report.js";
import { memoryCap, runCapped } from "./cgroup.js";
import { TINY_K3 } from "./helpers.js";

const CLI = join(__dirname, "..", "src", "cli.ts");
const cap = memoryCap();
const skip = "skip" in cap ? cap.skip : null;
if (skip) console.log(`rss-cap: skipped (${skip})`);
const dir = mkdtempSync(join(tmpdir(), "k3-rss-cap-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const census = censusOf(readConfig(TINY_K3));

/** The plan Engine.load makes for these flags (same census, budgets and extras). */
function planTotal(preset: PresetName, trunkGb?: number, packed = false): number {
  const mem = readMemInfo();
  const budgets = { ...budgetsFor(preset, census, mem), ...(trunkGb !== undefined ? { trunkBytes: trunkGb * GB } : {}) };
  // Engine.load plans explicit budgets (--trunk-gb) as "custom", whose lookahead holds a whole layer.
  return planMemory(census, budgets, trunkGb !== undefined ? "custom" : preset, mem, { prefetch: true, packedTrunk: packed }).totalBytes;
}

async function capped(name: string, preset: PresetName, extra: string[], total: number) {
  const json = join(dir, `${name}.json`);
  const r = await runCapped(cap as Exclude<typeof cap, { skip: string }>, total, [process.execPath, "--import", "tsx", CLI, "run", "--model", TINY_K3, "--preset", preset, "--ids", "768,100,200,300,400", "--max-tokens", "6", "--json", json, ...extra], {
    env: { ...process.env, K3_THREADS: "1" },
    cwd: join(__dirname, ".."),
    timeoutMs: 120_000,
  });
  const line = `rss-cap ${name}: cap ${(total / 1e6).toFixed(1)} MB (${(cap as { kind: string }).kind}), exit ${r.code}${r.signal ? ` ${r.signal}` : ""}, cgroup peak ${r.cgroupPeakBytes === null ? "n/a" : (r.cgroupPeakBytes / 1e6).toFixed(1) + " MB"}, cap hits ${r.capHits ?? "n/a"}`;
  expect(r.oomKilled, `${line}\n${r.stderr}`).toBe(false);
  expect(r.code, `${line}\n${r.stderr}`).toBe(0);
  const report = JSON.parse(readFileSync(json, "utf8")) as RunReport;
  console.log(`${line}, peak RSS ${(report.peak_rss_bytes / 1e6).toFixed(1)} MB`);
  expect(report.peak_rss_bytes).toBeLessThanOrEqual(total);
  expect(report.plan_check!.planned_total_bytes).toBe(total);
  expect(report.plan_check!.mismatches).toEqual([]);
  return report;
}

describe.skipIf(skip !== null)("peak RSS within the plan under a cgroup cap equal to the plan's total (tiny K3)", () => {
  for (const preset of PRESET_NAMES) {
    it(`${preset}: exit 0, peak RSS <= plan, plan check holds`, async () => {
      await capped(preset, preset, [], planTotal(preset));
    });
  }

  it("ultra and laptop streaming the trunk from a packed trunk (1 ring slot / 2 ring slots)", async () => {
    const trunk = join(dir, "trunk");
    await packTrunk(TINY_K3, trunk);
    // Budgets that hold a ring and a few pinned layers, not the whole trunk.
    const trunkGb = 0.0012;
    for (const preset of ["ultra", "laptop"] as const) {
      const total = planTotal(preset, trunkGb, true);
      const r = await capped(`${preset}+trunk`, preset, ["--trunk", trunk, "--trunk-gb", String(trunkGb)], total);
      expect(r.bytes_read.trunk).toBeGreaterThan(0);
    }
  });

  it("the cap bites: a cap below the runtime's own footprint is OOM-killed (the check can fail)", async () => {
    const r = await runCapped(cap as Exclude<typeof cap, { skip: string }>, 24e6, [process.execPath, "-e", "const a=[];for(let i=0;i<20;i++)a.push(Buffer.alloc(1e7,1));"], { timeoutMs: 60_000 });
    expect(r.code).not.toBe(0);
    expect(r.signal).toBe("SIGKILL");
  });
});
