/**
 * Issue 13 item 6, the CI test at real widths: synth's CI fixture (`ciCheckpointOptions`: one layer
 * at the published widths, MLA + MoE with 16 MXFP4 experts, vocab 4096: 1.23 GB, with the pack
 * 2.18 GB written; K3_REALWIDTH_CI=full: KDA + dense MLP, MLA + MoE, 6.9 GB written) is generated in
 * the OS temp dir, packed, and run in child processes resident (laptop) and with the trunk streamed
 * (ultra: one ring slot, embed/head streamed). Both must give the same tokens, exit 0, keep peak
 * RSS within their plans (each under a cgroup memory cap equal to its plan's total where one is
 * writable) and report a plan check that holds; the bytes written (checkpoint + pack) stay under
 * 3 GB (small). Skips with the reason when the temp dir lacks the space.
 */
import { mkdtempSync, readFileSync, rmSync, statfsSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { spawn } from "node:child_process";
import { afterAll, describe, expect, it } from "vitest";
import { censusOf } from "../src/census.js";
import { readConfig } from "../src/config.js";
import { budgetsFor, GB, planMemory, readMemInfo, type PresetName } from "../src/presets.js";
import type { RunReport } from "../src/report.js";
import { synthCiCheckpoint } from "../src/synth.js";
import { memoryCap, runCapped } from "./cgroup.js";

const CLI = join(__dirname, "..", "src", "cli.ts");
const SIZE = process.env.K3_REALWIDTH_CI === "full" ? "full" : "small";
const NEED = (SIZE === "full" ? 8 : 3) * GB;
const free = (() => {
  try {
    const s = statfsSync(tmpdir());
    return s.bavail * s.bsize;
  } catch {
    return 0;
  }
})();
const skip = free < NEED ? `${tmpdir()} has ${(free / GB).toFixed(1)} GB free, the real-width CI test needs ${NEED / GB} GB` : null;
if (skip) console.log(`realwidth-ci: skipped (${skip})`);
const cap = memoryCap();
if ("skip" in cap) console.log(`realwidth-ci: runs without a memory cap (${cap.skip})`);

let dir: string | null = null;
afterAll(() => {
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/** A child `k3 ...`: under a cap of `capBytes` when a cgroup is writable, else plain. */
async function k3(args: string[], capBytes: number | null): Promise<{ code: number | null; signal: string | null; stderr: string; capped: boolean }> {
  const argv = [process.execPath, "--import", "tsx", CLI, ...args];
  const env = { ...process.env, K3_THREADS: process.env.K3_THREADS ?? "2" };
  const cwd = join(__dirname, "..");
  if (capBytes !== null && !("skip" in cap)) {
    const r = await runCapped(cap, capBytes, argv, { env, cwd, timeoutMs: 600_000 });
    return { code: r.code, signal: r.signal, stderr: r.stderr, capped: true };
  }
  return new Promise((res) => {
    const child = spawn(argv[0], argv.slice(1), { env, cwd, stdio: ["ignore", "ignore", "pipe"] });
    let stderr = "";
    child.stderr.on("data", (d) => (stderr += d));
    child.on("close", (code, signal) => res({ code, signal, stderr, capped: false }));
  });
}

describe.skipIf(skip !== null)("real-width K3 in CI: pack + streamed trunk + resident, same tokens, exit 0, RSS within the plan", () => {
  it("generates, packs and runs", { timeout: 1_200_000 }, async () => {
    dir = mkdtempSync(join(tmpdir(), "k3-realwidth-"));
    const model = join(dir, "model");
    const t0 = performance.now();
    const synth = await synthCiCheckpoint(model, { fsync: false, size: SIZE });
    console.log(`realwidth-ci: synth ${(synth.fileBytes / GB).toFixed(2)} GB in ${((performance.now() - t0) / 1000).toFixed(1)} s (${synth.layerMap})`);

    const trunk = join(dir, "trunk");
    const tp = performance.now();
    const pack = await k3(["pack", "--model", model, "--out", trunk], null);
    expect(pack.code, pack.stderr).toBe(0);
    const packBytes = statSync(join(trunk, "trunk.bin")).size + statSync(join(trunk, "trunk.json")).size;
    const written = synth.fileBytes + packBytes;
    console.log(`realwidth-ci: pack ${(packBytes / GB).toFixed(2)} GB in ${((performance.now() - tp) / 1000).toFixed(1)} s; written in all ${(written / GB).toFixed(2)} GB`);
    if (SIZE === "small") expect(written).toBeLessThan(3 * GB);

    const cfg = readConfig(model);
    const census = censusOf(cfg);
    const mem = readMemInfo();
    const ids = [cfg.bosTokenId, 100, 200, 300, 400].join(",");
    // ultra's 2.5 GB trunk budget holds the one-layer trunk (0.83 GB), so the streamed run gets a
    // trunk budget below one layer: nothing pinned, the layer streams through the one ring slot.
    const streamGb = SIZE === "small" ? ["--trunk-gb", "0.5"] : [];
    const runs: Array<{ name: string; preset: PresetName; packed: boolean; extra: string[]; trunkBytes?: number }> = [
      { name: "resident", preset: "laptop", packed: false, extra: [] },
      { name: "streamed trunk", preset: "ultra", packed: true, extra: ["--trunk", trunk, ...streamGb], trunkBytes: streamGb.length ? 0.5 * GB : undefined },
    ];
    const tokens: number[][] = [];
    for (const r of runs) {
      const budgets = budgetsFor(r.preset, census, mem);
      if (r.trunkBytes !== undefined) budgets.trunkBytes = r.trunkBytes;
      const plan = planMemory(census, budgets, r.trunkBytes !== undefined ? "custom" : r.preset, mem, { prefetch: true, packedTrunk: r.packed });
      const json = join(dir, `${r.preset}.json`);
      const t = performance.now();
      const out = await k3(["run", "--model", model, "--preset", r.preset, "--ids", ids, "--max-tokens", "3", "--json", json, ...r.extra], plan.totalBytes);
      const line = `realwidth-ci ${r.name} (${r.preset}): exit ${out.code}${out.signal ? ` ${out.signal}` : ""}, ${((performance.now() - t) / 1000).toFixed(1)} s, plan ${(plan.totalBytes / GB).toFixed(2)} GB${out.capped ? " (= the cgroup cap)" : " (no cap)"}`;
      expect(out.signal, `${line}\n${out.stderr.slice(-3000)}`).toBeNull();
      expect(out.code, `${line}\n${out.stderr.slice(-3000)}`).toBe(0);
      const report = JSON.parse(readFileSync(json, "utf8")) as RunReport;
      console.log(`${line}, peak RSS ${(report.peak_rss_bytes / GB).toFixed(2)} GB, read/token ${(report.plan_check!.measured_per_token.total / GB).toFixed(3)} GB (planned ${(report.plan_check!.expected_per_token.total / GB).toFixed(3)})`);
      expect(report.plan_check!.planned_total_bytes).toBe(plan.totalBytes);
      expect(report.peak_rss_bytes).toBeLessThanOrEqual(plan.totalBytes);
      expect(report.plan_check!.mismatches).toEqual([]);
      expect(plan.trunkMode).toBe(r.packed ? "streamed" : "resident");
      if (r.packed) expect(report.bytes_read.trunk).toBeGreaterThan(0);
      else expect(report.bytes_read.trunk).toBe(0);
      tokens.push(report.generated_ids);
    }
    expect(tokens[0]).toHaveLength(3);
    expect(tokens[1]).toEqual(tokens[0]);
  });
});
