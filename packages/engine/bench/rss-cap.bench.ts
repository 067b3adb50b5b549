/**
 * Peak RSS within the plan on a real-width checkpoint: `k3 run` at each preset in a child process
 * under a cgroup memory cap (no swap) of plan / 0.95 + the runtime's own charge (the plan reads the
 * cgroup: the smallest cap it is accepted under), with --floor (ceilings measured in
 * the same run). Prints one row per run, then the published-K3 projection from the first run's
 * per-kind rates (k3 plan --project --from-report).
 *
 *   K3_BENCH_MODEL=/work/rw/k3-L4-E64 [K3_BENCH_TRUNK=DIR] [K3_BENCH_PRESETS=ultra,laptop] \
 *     node --import tsx bench/rss-cap.bench.ts
 */
import { formatBytes } from "@k3/native";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { censusOf } from "../src/census.js";
import { readConfig } from "../src/config.js";
import { budgetsFor, planMemory, readMemInfo, type PresetName } from "../src/presets.js";
import { formatProjection, projectK3, ratesFromReport } from "../src/projection.js";
import type { RunReport } from "../src/report.js";
import { capForPlan, memoryCap, runCapped, runtimeChargeAtPlan } from "../test/cgroup.js";

const model = process.env.K3_BENCH_MODEL;
if (!model) throw new Error("set K3_BENCH_MODEL to a real-width checkpoint (k3 synth)");
const trunk = process.env.K3_BENCH_TRUNK;
const presets = (process.env.K3_BENCH_PRESETS ?? "ultra,laptop").split(",") as PresetName[];
const cap = memoryCap();
if ("skip" in cap) throw new Error(`no writable memory cgroup: ${cap.skip}`);
const cli = join(import.meta.dirname, "..", "dist", "cli.js");
const cfg = readConfig(model);
const census = censusOf(cfg);
const out = mkdtempSync(join(tmpdir(), "k3-rss-bench-"));
const ids = [cfg.bosTokenId, 100, 200, 300, 400, 500, 600, 700].join(",");
const rows: string[] = [];
let first: RunReport | null = null;
try {
  for (const preset of presets) {
    const mem = readMemInfo();
    const plan = planMemory(census, budgetsFor(preset, census, mem), preset, mem, { prefetch: true, packedTrunk: trunk !== undefined });
    const json = join(out, `${preset}.json`);
    const argv = [process.execPath, cli, "run", "--model", model, "--preset", preset, "--ids", ids, "--max-tokens", "4", "--floor", "--json", json, ...(trunk ? ["--trunk", trunk] : [])];
    const t0 = performance.now();
    const r = await runCapped(cap, capForPlan(plan.totalBytes, await runtimeChargeAtPlan(cap, cli, model, join(import.meta.dirname, ".."))), argv, { timeoutMs: 1_800_000 });
    const wall = (performance.now() - t0) / 1000;
    if (r.code !== 0) {
      rows.push(`| ${preset} | ${plan.trunkMode} | ${formatBytes(plan.totalBytes)} | exit ${r.code} ${r.signal ?? ""} | | | | |`);
      process.stderr.write(r.stderr.slice(-2000));
      continue;
    }
    const rep = JSON.parse(readFileSync(json, "utf8")) as RunReport;
    first ??= rep;
    const pc = rep.plan_check!;
    rows.push(
      `| ${preset} | ${plan.trunkMode} | ${formatBytes(plan.totalBytes)} | ${formatBytes(rep.peak_rss_bytes)} (${((100 * rep.peak_rss_bytes) / plan.totalBytes).toFixed(0)}%) | ${r.cgroupPeakBytes === null ? "n/a" : formatBytes(r.cgroupPeakBytes)} | ` +
        `${formatBytes(pc.expected_per_token.total)} / ${formatBytes(pc.measured_per_token.total)} | ${pc.mismatches.length ? pc.mismatches.join("; ") : "held"} | ${rep.floor ? `${rep.floor.decode_s_per_token.toFixed(2)} s (floor ${rep.floor.decode_floor_s_per_token.toFixed(2)}; mem ${rep.floor.mem_ceiling_gbps.toFixed(1)}, disk ${rep.floor.disk_ceiling_gbps.toFixed(2)} GB/s)` : "n/a"} | ${wall.toFixed(0)} s |`,
    );
  }
  console.log(`model ${model} (${cfg.numLayers} layers, ${cfg.moe.numExperts} experts), cgroup ${cap.kind} cap = plan total, memory.swap 0, ${trunk ? `--trunk ${trunk}` : "no packed trunk (trunk resident)"}`);
  console.log("| preset | trunk | plan total = cap | peak RSS | cgroup peak | read/decoded token planned / measured | plan check | decode s/token | wall |");
  console.log("|---|---|---:|---:|---:|---:|---|---|---:|");
  for (const r of rows) console.log(r);
  if (first?.per_kind && first.floor) {
    const fr = ratesFromReport(first);
    for (const gbps of [fr.diskCeilingGbps!, 7]) {
      console.log("");
      console.log(formatProjection(projectK3({ rates: fr.rates, diskGbps: gbps, diskSource: gbps === 7 ? "--disk-gbps 7" : "the first run's measured disk ceiling", mem: readMemInfo() })));
    }
  }
} finally {
  rmSync(out, { recursive: true, force: true });
}
