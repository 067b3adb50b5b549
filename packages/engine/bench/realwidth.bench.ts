/**
 * Time per token at K3's real widths against its floor (issue 13 item 3), on a real-width
 * checkpoint from `k3 synth` (K3_RW_MODEL; default /work/rwdata/k3-L2-E896 when present, else
 * /work/rw/k3-L2-E896). For every preset (ultra, laptop, auto; K3_RW_PRESETS), resident and with the trunk
 * streamed from a packed trunk (`--trunk`, packed into a temp dir first): prefill at T = 8 and
 * T = 64, then decode of 8 tokens (the T = 8 run decodes 2 tokens first: the JIT's start-up). Each configuration runs in its own child process under the
 * exclusive bench lock (/work/bin/k3-excl when present, else `flock /tmp/k3-turn.lock flock -x
 * /tmp/k3-bench.lock`: one real-width run at a time, a short exclusive stretch per configuration),
 * which measures the memory-read ceiling and one disk-read ceiling per source the run reads, with
 * the run's own pattern (floor.ts), before loading and again after the runs (the higher is used);
 * the floor per kind is max(bytes touched / memory ceiling, bytes read / its source's ceiling).
 * After the runs the child also times @k3/dense's batched
 * GEMM at batch 64 on a KDA projection shape (bf16 [12288, 7168]): the prefill rate of the
 * resident bf16 layer stack is compared with that GEMM's rate for the same bytes.
 *
 * Run: cd packages/engine && pnpm bench:realwidth      (writes bench-results/realwidth-<model>.json,
 * .md, and each configuration's run report as realwidth-<model>-<config>.report.json for
 * `k3 plan --project --from-report`; prints the markdown the README holds). K3_RW_PRESETS=ultra,laptop
 * and K3_RW_TRUNK=0|1 restrict it; K3_RW_TRUNK_DIR reuses a trunk already packed from the same
 * checkpoint; K3_RW_SCRATCH is where a trunk is packed (deleted after). K3_RW_DISK_CAP_GBPS=X runs
 * every configuration with reads from the checkpoint's disk throttled to X GB/s (disk-cap.ts: one
 * disk speed for the ceilings and the run on a disk whose speed wanders; the table says so).
 */
import { formatBytes } from "@k3/native";
import { execFileSync, spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { basename, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { gemmBf16, simdLevel, threadCount } from "@k3/dense";
import { formatThreadCpu } from "../src/thread-cpu.js";
import { openDiskCap, type DiskCap } from "./disk-cap.js";
import { formatGemvProbe } from "../src/gemv-probe.js";
import { Engine, REPORT_KINDS, kindFloorSeconds, memCeilingGbps, phaseFloorSeconds, reportCeilings, type RunReport } from "../src/index.js";

const here = fileURLToPath(import.meta.url);
const GEMM_SHAPE = { rows: 12288, cols: 7168 };

interface ChildResult {
  config: { preset: string; trunk: boolean };
  plan_total_bytes: number;
  streamed_layers: number;
  pinned_layers: number;
  load_seconds: number | null;
  prefill8: RunReport;
  run64: RunReport;
  gemm64: { bytes_per_second: number; gflops: number };
}

async function child(cfg: { model: string; preset: string; trunk: string | null }): Promise<void> {
  // The warm fills the expert cache's empty slots before the runs (steady state: a server's cache
  // after its first requests); its figures are in each report (report.warm).
  const engine = await Engine.load(cfg.model, { preset: cfg.preset as "auto", trunkDir: cfg.trunk ?? undefined, floor: true, warm: "wait", log: (l) => process.stderr.write(l + "\n") });
  try {
    const V = engine.tokenizer.nRanks;
    const prompt = (n: number, salt: number) => Array.from({ length: n }, (_, i) => (i * 7919 + salt) % V);
    // Two decoded tokens after it compile the decode path's JavaScript: a process's first decoded
    // tokens ran 10-17 ms slower on the 48B (TurboFan compiling on one of the 2 cores; ad-hoc perf
    // measurement, bench/RESULTS.md), which is start-up, not per-token cost; the measured decode
    // below is the process's second.
    const prefill8 = (await engine.complete(prompt(8, 13), { maxTokens: 3, stopIds: [], temperature: 0 })).report;
    // Every ceiling again after the runs (the run's peak RSS is already in the report).
    const run64 = engine.floorAfterRun((await engine.complete(prompt(64, 101), { maxTokens: 9, stopIds: [], temperature: 0 })).report);
    // The batched-GEMM rate for the same kind of bytes (bf16 weights, batch 64), measured last.
    const { rows, cols } = GEMM_SHAPE;
    const w = new Uint16Array(rows * cols);
    for (let i = 0; i < w.length; i += 997) w[i] = 0x3c00 + (i & 0xff);
    const X = new Float32Array(64 * cols).map((_, i) => ((i % 13) - 6) / 7);
    const Y = new Float32Array(64 * rows);
    gemmBf16(w, X, Y, { rows, cols, batch: 64 });
    let best = Infinity;
    for (let r = 0; r < 3; r++) {
      const t0 = performance.now();
      gemmBf16(w, X, Y, { rows, cols, batch: 64 });
      best = Math.min(best, (performance.now() - t0) / 1000);
    }
    const result: ChildResult = {
      config: { preset: cfg.preset, trunk: cfg.trunk !== null },
      plan_total_bytes: engine.plan.totalBytes,
      streamed_layers: engine.plan.streamedLayers.length,
      pinned_layers: engine.plan.pinnedLayers.length,
      load_seconds: run64.load?.seconds ?? null,
      prefill8,
      run64,
      gemm64: { bytes_per_second: (rows * cols * 2) / best, gflops: (2 * rows * cols * 64) / best / 1e9 },
    };
    process.stdout.write(JSON.stringify(result) + "\n");
  } finally {
    engine.close();
  }
}

function defaultModel(): string | null {
  if (process.env.K3_RW_MODEL) return resolve(process.env.K3_RW_MODEL);
  for (const d of ["/work/rwdata/k3-L2-E896", "/work/rw/k3-L2-E896"]) if (existsSync(join(d, "config.json"))) return d;
  return null;
}

const ms = (s: number) => (1000 * s).toFixed(1);
const ratio = (a: number, b: number) => (b > 0 ? (a / b).toFixed(2) : "-");

function perKindTable(r: RunReport, p64: RunReport): string[] {
  const ceil = reportCeilings(r.floor!);
  const dt = r.per_kind.embed.decode.tokens;
  const pt = p64.prompt_tokens - p64.prompt_cached_tokens;
  const lines = [
    "| kind | decode ms/token | touched/token | read/token | floor ms | ratio | prefill (T=64) ms/token | touched/token | read/token | floor ms | ratio |",
    "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
  ];
  const row = (name: string, d: number[], fd: number, p: number[], fp: number) =>
    `| ${name} | ${ms(d[0] / dt)} | ${formatBytes(d[1] / dt)} | ${formatBytes(d[2] / dt)} | ${ms(fd / dt)} | ${ratio(d[0], fd)} | ${ms(p[0] / pt)} | ${formatBytes(p[1] / pt)} | ${formatBytes(p[2] / pt)} | ${ms(fp / pt)} | ${ratio(p[0], fp)} |`;
  const tot = { d: [0, 0, 0], p: [0, 0, 0] };
  for (const k of REPORT_KINDS) {
    const d = r.per_kind[k].decode;
    const p = p64.per_kind[k].prefill;
    const dv = [d.seconds, d.bytes_touched, d.bytes_read];
    const pv = [p.seconds, p.bytes_touched, p.bytes_read];
    if (dv.every((x) => x === 0) && pv.every((x) => x === 0)) continue;
    dv.forEach((x, i) => (tot.d[i] += x));
    pv.forEach((x, i) => (tot.p[i] += x));
    lines.push(row(k, dv, kindFloorSeconds(k, d.bytes_touched, d.bytes_read, ceil), pv, kindFloorSeconds(k, p.bytes_touched, p.bytes_read, ceil)));
  }
  const phase = (rep: RunReport, ph: "decode" | "prefill") => Object.fromEntries(REPORT_KINDS.map((k) => [k, rep.per_kind[k][ph]]));
  lines.push(row("**all kinds**", tot.d, phaseFloorSeconds(phase(r, "decode"), ceil), tot.p, phaseFloorSeconds(phase(p64, "prefill"), ceil)));
  return lines;
}

/** Decode ms per token above each kind's own floor (every kind more than 0.5 ms over it, largest first). */
function excess(r: RunReport): string {
  const ceil = reportCeilings(r.floor!);
  const dt = r.per_kind.embed.decode.tokens;
  const over = REPORT_KINDS.map((k) => {
    const d = r.per_kind[k].decode;
    const f = kindFloorSeconds(k, d.bytes_touched, d.bytes_read, ceil);
    return { k, over: (d.seconds - f) / dt, ratio: f > 0 ? d.seconds / f : Infinity };
  })
    .filter((x) => x.over > 0.0005)
    .sort((a, b) => b.over - a.over);
  // The kinds' own floors add up to more than the run's floor by what the floor assumes overlapped
  // (memory-bound kinds while the experts or the head are read).
  const own = REPORT_KINDS.reduce((a, k) => a + kindFloorSeconds(k, r.per_kind[k].decode.bytes_touched, r.per_kind[k].decode.bytes_read, ceil), 0) / dt;
  const serial = own - r.floor!.decode_floor_s_per_token;
  const kinds = over.map((x) => `${x.k} +${ms(x.over)} ms (${Number.isFinite(x.ratio) ? x.ratio.toFixed(2) : "-"}x)`).join(", ");
  return `${kinds}${serial > 0.0005 ? `; + ${ms(serial)} ms of the kinds' own floors not overlapped (sum of kind floors ${ms(own)} ms vs the run's ${ms(r.floor!.decode_floor_s_per_token)})` : ""}`;
}

/** The prefill (T=64) rate of the resident bf16 layer stack against the batched GEMM's rate for the same bytes. */
function gemmShare(c: ChildResult): { ideal: number; actual: number; share: number } {
  const p = c.run64.per_kind;
  const kinds = ["kda", "mla", "dense_mlp", "moe_trunk"] as const;
  const bytes = kinds.reduce((a, k) => a + p[k].prefill.bytes_touched, 0);
  const actual = kinds.reduce((a, k) => a + p[k].prefill.seconds, 0);
  const ideal = bytes / c.gemm64.bytes_per_second;
  return { ideal, actual, share: actual > 0 ? ideal / actual : 0 };
}

/** The exclusive bench lock with its turnstile: /work/bin/k3-excl when present. */
function exclusive(argv: string[]): [string, string[]] {
  if (existsSync("/work/bin/k3-excl")) return ["/work/bin/k3-excl", argv];
  return ["flock", ["/tmp/k3-turn.lock", "flock", "-x", "/tmp/k3-bench.lock", ...argv]];
}

function shared(argv: string[]): [string, string[]] {
  if (existsSync("/work/bin/k3-shared")) return ["/work/bin/k3-shared", argv];
  return ["flock", ["-s", "/tmp/k3-bench.lock", ...argv]];
}

interface Row {
  name: string;
  exit: number | null;
  signal: string | null;
  seconds: number;
  result: ChildResult | null;
}

async function parent(): Promise<void> {
  const model = defaultModel();
  if (!model) {
    console.log("realwidth bench skipped: no real-width checkpoint (set K3_RW_MODEL, or generate one: k3 synth --out DIR --layers 2)");
    return;
  }
  const presets = (process.env.K3_RW_PRESETS ?? "ultra,laptop,auto").split(",");
  const trunks = process.env.K3_RW_TRUNK === "0" ? [false] : process.env.K3_RW_TRUNK === "1" ? [true] : [false, true];
  const scratchRoot = process.env.K3_RW_SCRATCH ?? (existsSync("/work/rw") ? "/work/rw/perf" : undefined);
  if (scratchRoot) mkdirSync(scratchRoot, { recursive: true });
  const scratch = mkdtempSync(join(scratchRoot ?? "/tmp", "rw-bench-"));
  const cli = join(here, "..", "..", "dist", "cli.js");
  const tag = basename(model);
  const resDir = join(here, "..", "..", "bench-results");
  mkdirSync(resDir, { recursive: true });
  const rows: Row[] = [];
  const capGbps = process.env.K3_RW_DISK_CAP_GBPS;
  const cap: DiskCap | null = capGbps ? openDiskCap(model, Number(capGbps)) : null;
  try {
    let trunkDir: string | null = process.env.K3_RW_TRUNK_DIR ? resolve(process.env.K3_RW_TRUNK_DIR) : null;
    if (trunks.includes(true) && !trunkDir) {
      trunkDir = join(scratch, "trunk");
      process.stderr.write(`packing the trunk of ${model} into ${trunkDir}\n`);
      const [cmd, args] = shared([process.execPath, cli, "pack", "--model", model, "--out", trunkDir]);
      execFileSync(cmd, args, { stdio: ["ignore", "ignore", "inherit"] });
    }
    for (const preset of presets) {
      for (const t of trunks) {
        const name = `${preset}${t ? " --trunk" : ""}`;
        process.stderr.write(`\n=== ${name} (${new Date().toISOString().slice(11, 19)} UTC) ===\n`);
        const arg = JSON.stringify({ model, preset, trunk: t ? trunkDir : null });
        const child = [process.execPath, "--import", "tsx", here, "--child", arg];
        const [cmd, args] = exclusive(cap ? cap.wrap(child) : child);
        const t0 = performance.now();
        const r = spawnSync(cmd, args, { encoding: "utf8", stdio: ["ignore", "pipe", "inherit"], maxBuffer: 1 << 28 });
        const line = r.stdout.trim().split("\n").pop() ?? "";
        const ok = r.status === 0 && line.startsWith("{");
        const row: Row = { name, exit: r.status, signal: r.signal, seconds: (performance.now() - t0) / 1000, result: ok ? JSON.parse(line) : null };
        if (!ok) process.stderr.write(`${name}: child exited ${r.status}${r.signal ? ` (${r.signal})` : ""}\n`);
        else writeFileSync(join(resDir, `realwidth-${tag}-${preset}${t ? "-trunk" : ""}.report.json`), JSON.stringify(row.result!.run64, null, 1));
        rows.push(row);
      }
    }
  } finally {
    cap?.close();
    rmSync(scratch, { recursive: true, force: true });
  }

  const text = render(model, rows, new Date(), cap);
  console.log(text);
  writeFileSync(join(resDir, `realwidth-${tag}.json`), JSON.stringify({ model, rows, cap: cap ? { device: cap.device, bytesPerSecond: cap.bytesPerSecond } : null }, null, 1));
  writeFileSync(join(resDir, `realwidth-${tag}.md`), text + "\n");
}

/** The markdown of a set of rows (the summary table, the rows above 1.3x with their excess per kind, the per-kind tables). */
function render(model: string, rows: Row[], when = new Date(), cap: Pick<DiskCap, "device" | "bytesPerSecond"> | null = null): string {
  const out: string[] = [];
  const modelCfg = JSON.parse(readFileSync(join(model, "config.json"), "utf8"));
  const tc = modelCfg?.text_config ?? modelCfg;
  out.push(`Checkpoint: \`${model}\` (${tc?.num_hidden_layers} layers, ${tc?.num_experts ?? tc?.n_routed_experts} experts, hidden ${tc?.hidden_size}, vocab ${tc?.vocab_size}); ${threadCount()} threads, SIMD ${simdLevel()}; ${when.toISOString().slice(0, 16)} UTC.${cap ? ` Reads from disk ${cap.device} capped at ${(cap.bytesPerSecond / 1e9).toFixed(2)} GB/s (K3_RW_DISK_CAP_GBPS; cgroup throttle): the ceilings and the run see one disk speed, slower than the disk's own.` : ""}`);
  out.push("");
  out.push("| preset | exit | streamed layers | peak RSS / plan | decode s/token | floor s/token | ratio | prefill s/token T=8 | T=64 | floor T=64 | bf16 stack T=64 / batched GEMM | mem GB/s | disk GB/s per source (before / after) |");
  out.push("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|");
  for (const row of rows) {
    const c = row.result;
    if (!c) {
      out.push(`| ${row.name} | ${row.exit ?? row.signal} | | | | | | | | | | | |`);
      continue;
    }
    const f = c.run64.floor!;
    const g = gemmShare(c);
    const g2 = (x: number | null) => (x === null ? "-" : x.toFixed(2));
    const disk = f.sources.map((x) => `${x.source} ${g2(x.before_gbps)} / ${g2(x.after_gbps)}`).join("; ");
    out.push(
      `| ${row.name} | ${row.exit} | ${c.streamed_layers} | ${formatBytes(c.run64.peak_rss_bytes)} / ${formatBytes(c.plan_total_bytes)} | ${f.decode_s_per_token.toFixed(3)} | ${f.decode_floor_s_per_token.toFixed(3)} | ${f.decode_ratio?.toFixed(2)} | ${c.prefill8.floor!.prefill_s_per_token.toFixed(3)} | ${f.prefill_s_per_token.toFixed(3)} | ${f.prefill_floor_s_per_token.toFixed(3)} | ${g.share.toFixed(2)} (${ms(g.ideal)} / ${ms(g.actual)} ms) | ${f.mem_before_gbps.toFixed(1)} / ${f.mem_after_gbps === null ? "-" : f.mem_after_gbps.toFixed(1)} | ${disk} |`,
    );
  }
  const over = rows.filter((r) => r.result && (r.result.run64.floor!.decode_ratio ?? 0) > 1.3);
  if (over.length) {
    out.push("");
    out.push("Decode above 1.3x its floor, and where the time goes (decode ms/token over each kind's own floor; the run's floor assumes the expert reads overlap the other kinds, so a kind at its own disk floor still adds to the run's excess):");
    out.push("");
    for (const r of over) {
      const f = r.result!.run64.floor!;
      out.push(`- **${r.name}** (${f.decode_ratio!.toFixed(2)}x, ${ms(f.decode_s_per_token - f.decode_floor_s_per_token)} ms/token over ${ms(f.decode_floor_s_per_token)}): ${excess(r.result!.run64)}`);
    }
  }
  const warned = rows.filter((r) => r.result && r.result.run64.floor!.warnings.length);
  for (const r of warned) out.push(`- ${r.name}: FLOOR WARNING ${r.result!.run64.floor!.warnings.join("; ")}`);
  for (const row of rows) {
    const c = row.result;
    if (!c) continue;
    out.push("");
    const w = c.run64.warm;
    const warm = w ? `expert cache warmed first: ${w.experts} experts, ${formatBytes(w.bytes)} in ${w.seconds!.toFixed(1)} s = ${w.gbps!.toFixed(2)} GB/s; ` : "";
    out.push(`**${row.name}** (${warm}decode: ${c.run64.per_kind.embed.decode.tokens} tokens after a 64-token prefill, the process's second decode (the first, 2 tokens after the T=8 prefill, compiles the decode path); batched GEMM bf16 [${GEMM_SHAPE.rows}, ${GEMM_SHAPE.cols}] x 64: ${c.gemm64.gflops.toFixed(0)} GFLOP/s = ${(c.gemm64.bytes_per_second / 1e9).toFixed(1)} GB/s of weights; child ${row.seconds.toFixed(0)} s)`);
    out.push("");
    out.push(...perKindTable(c.run64, c.run64));
    const th = c.run64.decode_threads;
    if (th) out.push("", `Decode CPU by thread: ${formatThreadCpu(th, Math.max(1, c.run64.decode_forwards))}`);
    const gp = c.run64.gemv_probe;
    if (gp) out.push("", "```", ...formatGemvProbe(gp, Math.max(1, c.run64.decode_forwards), memCeilingGbps(c.run64.floor!)), "```");
  }
  return out.join("\n");
}

const at = process.argv.indexOf("--child");
const re = process.argv.indexOf("--render");
if (at >= 0) await child(JSON.parse(process.argv[at + 1]));
else if (re >= 0) {
  // Re-render saved results (bench-results/realwidth-<model>.json), several runs of one model in order.
  const files = process.argv.slice(re + 1);
  const saved = files.map((f) => JSON.parse(readFileSync(f, "utf8")) as { model: string; rows: Row[]; cap?: { device: string; bytesPerSecond: number } | null });
  console.log(render(saved[0].model, saved.flatMap((x) => x.rows), statSync(files[files.length - 1]).mtime, saved[0].cap ?? null));
} else await parent();
