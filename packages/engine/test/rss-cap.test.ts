/**
 * Peak RSS within the plan at every preset, checked the hard way: each `k3 run` is a child process
 * in a cgroup whose memory cap (no swap) is what the plan needs to be accepted there: the plan
 * reads the cgroup (available = cap - what is already charged, of which it uses 95%), so the cap is
 * plan / 0.95 + the runtime's own charge when it plans (cgroup.ts: measured once by a capped
 * `k3 plan`, which must see the cap). The
 * child must exit 0 (not be OOM-killed), its peak RSS must be within the plan (not the cap), and
 * its report's plan check must hold. Skips with the reason where no memory cgroup is writable.
 */
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { packTrunk } from "@k3/moe-stream";
import { afterAll, describe, expect, it } from "vitest";
import { censusOf } from "../src/census.js";
import { readConfig } from "../src/config.js";
import { budgetsFor, GB, planMemory, PRESET_NAMES, readMemInfo, type MemInfo, type PresetName } from "../src/presets.js";
import type { RunReport } from "../src/report.js";
import { capForPlan, memoryCap, runCapped, runtimeChargeAtPlan } from "./cgroup.js";
import { TINY_K3 } from "./helpers.js";

const CLI = join(__dirname, "..", "src", "cli.ts");
const cap = memoryCap();
const skip = "skip" in cap ? cap.skip : null;
if (skip) console.log(`rss-cap: skipped (${skip})`);
const dir = mkdtempSync(join(tmpdir(), "k3-rss-cap-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const census = censusOf(readConfig(TINY_K3));

/** The plan Engine.load makes for these flags (same census, budgets and extras) with these memory figures. */
function planTotal(preset: PresetName, mem: MemInfo, trunkGb?: number, packed = false): number {
  const budgets = { ...budgetsFor(preset, census, mem), ...(trunkGb !== undefined ? { trunkBytes: trunkGb * GB } : {}) };
  // Engine.load plans explicit budgets (--trunk-gb) as "custom", whose lookahead holds a whole layer.
  return planMemory(census, budgets, trunkGb !== undefined ? "custom" : preset, mem, { prefetch: true, packedTrunk: packed }).totalBytes;
}

/**
 * The plan the child will make under its cap, and that cap: plan / 0.95 + the charge. `auto` sizes
 * its budgets from the available figure, which the cap sets: iterate to the fixed point.
 */
async function capFor(preset: PresetName, trunkGb?: number, packed = false): Promise<{ total: number; capBytes: number }> {
  const charge = await runtimeChargeAtPlan(cap as Exclude<typeof cap, { skip: string }>, CLI, TINY_K3, join(__dirname, ".."));
  const host = readMemInfo();
  let total = planTotal(preset, host, trunkGb, packed);
  for (let i = 0; i < 5; i++) {
    const capBytes = capForPlan(total, charge);
    const mem = { totalBytes: Math.min(host.totalBytes, capBytes), availableBytes: Math.min(host.availableBytes, capBytes - charge), cgroupLimitBytes: capBytes };
    const next = planTotal(preset, mem, trunkGb, packed);
    if (next === total) return { total, capBytes };
    total = next;
  }
  throw new Error(`rss-cap: the ${preset} plan does not settle under a cap derived from it`);
}

async function capped(name: string, preset: PresetName, extra: string[], { total, capBytes }: { total: number; capBytes: number }) {
  const json = join(dir, `${name}.json`);
  const r = await runCapped(cap as Exclude<typeof cap, { skip: string }>, capBytes, [process.execPath, "--import", "tsx", CLI, "run", "--model", TINY_K3, "--preset", preset, "--ids", "768,100,200,300,400", "--max-tokens", "6", "--json", json, ...extra], {
    env: { ...process.env, K3_THREADS: "1" },
    cwd: join(__dirname, ".."),
    timeoutMs: 120_000,
  });
  const line = `rss-cap ${name}: plan ${(total / 1e6).toFixed(1)} MB, cap ${(capBytes / 1e6).toFixed(1)} MB (${(cap as { kind: string }).kind}), exit ${r.code}${r.signal ? ` ${r.signal}` : ""}, cgroup peak ${r.cgroupPeakBytes === null ? "n/a" : (r.cgroupPeakBytes / 1e6).toFixed(1) + " MB"}, cap hits ${r.capHits ?? "n/a"}`;
  expect(r.oomKilled, `${line}\n${r.stderr}`).toBe(false);
  expect(r.code, `${line}\n${r.stderr}`).toBe(0);
  const report = JSON.parse(readFileSync(json, "utf8")) as RunReport;
  console.log(`${line}, peak RSS ${(report.peak_rss_bytes / 1e6).toFixed(1)} MB`);
  expect(report.peak_rss_bytes).toBeLessThanOrEqual(total);
  expect(report.plan_check!.planned_total_bytes).toBe(total);
  expect(report.plan_check!.mismatches).toEqual([]);
  return report;
}

describe.skipIf(skip !== null)("peak RSS within the plan under a cgroup cap of plan / 0.95 + the runtime's own charge (tiny K3)", () => {
  for (const preset of PRESET_NAMES) {
    it(`${preset}: exit 0, peak RSS <= plan, plan check holds`, async () => {
      await capped(preset, preset, [], await capFor(preset));
    });
  }

  it("a cap the plan does not fit under is refused by the plan (exit 1, naming the cgroup limit), not OOM-killed", async () => {
    const { total, capBytes } = await capFor("laptop");
    const tight = Math.floor((capBytes - 0.1 * total) / 4096) * 4096;
    const r = await runCapped(cap as Exclude<typeof cap, { skip: string }>, tight, [process.execPath, "--import", "tsx", CLI, "run", "--model", TINY_K3, "--preset", "laptop", "--ids", "768,100", "--max-tokens", "2"], {
      env: { ...process.env, K3_THREADS: "1" },
      cwd: join(__dirname, ".."),
      timeoutMs: 120_000,
    });
    expect(r.oomKilled).toBe(false);
    expect(r.code, r.stderr).toBe(1);
    expect(r.stderr).toMatch(new RegExp(`memory plan needs .* is usable \\(95% of the headroom under the memory cgroup limit ${(tight / 1e6).toFixed(2)} MB`));
  });

  it("ultra and laptop streaming the trunk from a packed trunk (1 ring slot / 2 ring slots)", async () => {
    const trunk = join(dir, "trunk");
    await packTrunk(TINY_K3, trunk);
    // Budgets that hold a ring and a few pinned layers, not the whole trunk.
    const trunkGb = 0.0012;
    for (const preset of ["ultra", "laptop"] as const) {
      const r = await capped(`${preset}+trunk`, preset, ["--trunk", trunk, "--trunk-gb", String(trunkGb)], await capFor(preset, trunkGb, true));
      expect(r.bytes_read.trunk).toBeGreaterThan(0);
    }
  });

  it("the cap bites: a cap below the runtime's own footprint is OOM-killed (the check can fail)", async () => {
    const r = await runCapped(cap as Exclude<typeof cap, { skip: string }>, 24e6, [process.execPath, "-e", "const a=[];for(let i=0;i<20;i++)a.push(Buffer.alloc(1e7,1));"], { timeoutMs: 60_000 });
    expect(r.code).not.toBe(0);
    expect(r.signal).toBe("SIGKILL");
  });
});
