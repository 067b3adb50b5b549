/**
 * Time per token at K3's real widths against its floor (issue 13 item 3), on a real-width
 * checkpoint from `k3 synth` (K3_RW_MODEL; default /work/rw/k3-L2-E896 when present, else
 * /work/rw/k3-L4-E64). For every preset (ultra, laptop, auto), resident and with the trunk
 * streamed from a packed trunk (`--trunk`, packed into a temp dir first): prefill at T = 8 and
 * T = 64, then decode of 8 tokens. Each configuration runs in its own child process under
 * `flock -x /tmp/k3-bench.lock` (one real-width run at a time), which measures, before loading,
 * the memory-read ceiling (@k3/dense, 2 threads, 512 MiB) and the disk-read ceiling (@k3/moe-stream,
 * the checkpoint's experts, O_DIRECT, depth 16); the floor per kind is max(bytes touched / memory
 * ceiling, bytes read / disk ceiling). After the runs the child also times @k3/dense's batched
 * GEMM at batch 64 on a KDA projection shape (bf16 [12288, 7168]): the prefill rate of the
 * resident bf16 layer stack is compared with that GEMM's rate for the same bytes.
 *
 * Run: cd packages/engine && pnpm bench:realwidth      (writes bench-results/realwidth.json and
 * prints the markdown the README holds). K3_RW_PRESETS=ultra,laptop and K3_RW_TRUNK=0|1 restrict it;
 * K3_RW_TRUNK_DIR reuses a trunk already packed from the same checkpoint.
 */
import { execFileSync, spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { gemmBf16, simdLevel, threadCount } from "@k3/dense";
import { Engine, REPORT_KINDS, floorSeconds, fmtBytes, type RunReport } from "../src/index.js";

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
  const engine = await Engine.load(cfg.model, { preset: cfg.preset as "auto", trunkDir: cfg.trunk ?? undefined, floor: true, log: (l) => process.stderr.write(l + "\n") });
  try {
    const V = engine.tokenizer.nRanks;
    const prompt = (n: number, salt: number) => Array.from({ length: n }, (_, i) => (i * 7919 + salt) % V);
    const prefill8 = (await engine.complete(prompt(8, 13), { maxTokens: 1, stopIds: [], temperature: 0 })).report;
    const run64 = (await engine.complete(prompt(64, 101), { maxTokens: 9, stopIds: [], temperature: 0 })).report;
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
  for (const d of ["/work/rw/k3-L2-E896", "/work/rw/k3-L4-E64"]) if (existsSync(join(d, "config.json"))) return d;
  return null;
}

const ms = (s: number) => (1000 * s).toFixed(1);
const ratio = (a: number, b: number) => (b > 0 ? (a / b).toFixed(2) : "-");

function perKindTable(r: RunReport, p64: RunReport): string[] {
  const f = r.floor!;
  const ceil = { memGbps: f.mem_ceiling_gbps, diskGbps: f.disk_ceiling_gbps };
  const dt = r.per_kind.embed.decode.tokens;
  const pt = p64.prompt_tokens - p64.prompt_cached_tokens;
  const lines = [
    "| kind | decode ms/token | touched/token | read/token | floor ms | ratio | prefill (T=64) ms/token | touched/token | read/token | floor ms | ratio |",
    "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
  ];
  const tot = { d: [0, 0, 0], p: [0, 0, 0] };
  const row = (name: string, d: number[], p: number[]) => {
    const fd = floorSeconds(d[1], d[2], ceil);
    const fp = floorSeconds(p[1], p[2], ceil);
    return `| ${name} | ${ms(d[0] / dt)} | ${fmtBytes(d[1] / dt)} | ${fmtBytes(d[2] / dt)} | ${ms(fd / dt)} | ${ratio(d[0], fd)} | ${ms(p[0] / pt)} | ${fmtBytes(p[1] / pt)} | ${fmtBytes(p[2] / pt)} | ${ms(fp / pt)} | ${ratio(p[0], fp)} |`;
  };
  for (const k of REPORT_KINDS) {
    const d = r.per_kind[k].decode;
    const p = p64.per_kind[k].prefill;
    const dv = [d.seconds, d.bytes_touched, d.bytes_read];
    const pv = [p.seconds, p.bytes_touched, p.bytes_read];
    if (dv.every((x) => x === 0) && pv.every((x) => x === 0)) continue;
    dv.forEach((x, i) => (tot.d[i] += x));
    pv.forEach((x, i) => (tot.p[i] += x));
    lines.push(row(k, dv, pv));
  }
  lines.push(row("**all kinds**", tot.d, tot.p));
  return lines;
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

async function parent(): Promise<void> {
  const model = defaultModel();
  if (!model) {
    console.log("realwidth bench skipped: no real-width checkpoint (set K3_RW_MODEL, or generate one: k3 synth --out /work/rw/k3-L4-E64 --layers 4 --experts 64)");
    return;
  }
  const presets = (process.env.K3_RW_PRESETS ?? "ultra,laptop,auto").split(",");
  const trunks = process.env.K3_RW_TRUNK === "0" ? [false] : process.env.K3_RW_TRUNK === "1" ? [true] : [false, true];
  const scratchRoot = process.env.K3_RW_SCRATCH ?? (existsSync("/work/rw") ? "/work/rw/perf" : undefined);
  if (scratchRoot) mkdirSync(scratchRoot, { recursive: true });
  const scratch = mkdtempSync(join(scratchRoot ?? "/tmp", "rw-bench-"));
  const cli = join(here, "..", "..", "dist", "cli.js");
  const results: ChildResult[] = [];
  try {
    let trunkDir: string | null = process.env.K3_RW_TRUNK_DIR ? resolve(process.env.K3_RW_TRUNK_DIR) : null;
    if (trunks.includes(true) && !trunkDir) {
      trunkDir = join(scratch, "trunk");
      process.stderr.write(`packing the trunk of ${model} into ${trunkDir}\n`);
      execFileSync("flock", ["-s", "/tmp/k3-bench.lock", process.execPath, cli, "pack", "--model", model, "--out", trunkDir], { stdio: ["ignore", "ignore", "inherit"] });
    }
    for (const preset of presets) {
      for (const t of trunks) {
        process.stderr.write(`\n=== ${preset}${t ? " --trunk" : ""} ===\n`);
        const arg = JSON.stringify({ model, preset, trunk: t ? trunkDir : null });
        const r = spawnSync("flock", ["-x", "/tmp/k3-bench.lock", process.execPath, "--import", "tsx", here, "--child", arg], { encoding: "utf8", stdio: ["ignore", "pipe", "inherit"], maxBuffer: 1 << 28 });
        const line = r.stdout.trim().split("\n").pop() ?? "";
        if (r.status !== 0 || !line.startsWith("{")) {
          process.stderr.write(`${preset}${t ? " --trunk" : ""}: child exited ${r.status}${r.signal ? ` (${r.signal})` : ""}\n`);
          continue;
        }
        results.push(JSON.parse(line));
      }
    }
  } finally {
    rmSync(scratch, { recursive: true, force: true });
  }

  const cfgName = (c: ChildResult) => `${c.config.preset}${c.config.trunk ? " --trunk" : ""}`;
  const out: string[] = [];
  const first = results[0];
  const modelCfg = first ? JSON.parse(readFileSync(join(model, "config.json"), "utf8")) : null;
  const tc = modelCfg?.text_config ?? modelCfg;
  out.push(`Checkpoint: \`${model}\` (${tc?.num_hidden_layers} layers, ${tc?.num_experts ?? tc?.n_routed_experts} experts, hidden ${tc?.hidden_size}, vocab ${tc?.vocab_size}); ${threadCount()} threads, SIMD ${simdLevel()}; ${new Date().toISOString().slice(0, 16)} UTC.`);
  out.push("");
  out.push("| preset | streamed layers | peak RSS / plan | decode s/token | floor s/token | ratio | prefill s/token T=8 | T=64 | floor T=64 | bf16 stack T=64 / batched GEMM | mem GB/s | disk GB/s |");
  out.push("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
  for (const c of results) {
    const f = c.run64.floor!;
    const g = gemmShare(c);
    out.push(
      `| ${cfgName(c)} | ${c.streamed_layers} | ${fmtBytes(c.run64.peak_rss_bytes)} / ${fmtBytes(c.plan_total_bytes)} | ${f.decode_s_per_token.toFixed(3)} | ${f.decode_floor_s_per_token.toFixed(3)} | ${f.decode_ratio?.toFixed(2)} | ${c.prefill8.floor!.prefill_s_per_token.toFixed(3)} | ${f.prefill_s_per_token.toFixed(3)} | ${f.prefill_floor_s_per_token.toFixed(3)} | ${g.share.toFixed(2)} (${ms(g.ideal)} / ${ms(g.actual)} ms) | ${f.mem_ceiling_gbps.toFixed(1)} | ${f.disk_ceiling_gbps.toFixed(2)} |`,
    );
  }
  for (const c of results) {
    out.push("");
    out.push(`**${cfgName(c)}** (decode: ${c.run64.per_kind.embed.decode.tokens} tokens after a 64-token prefill; batched GEMM bf16 [${GEMM_SHAPE.rows}, ${GEMM_SHAPE.cols}] x 64: ${c.gemm64.gflops.toFixed(0)} GFLOP/s = ${(c.gemm64.bytes_per_second / 1e9).toFixed(1)} GB/s of weights)`);
    out.push("");
    out.push(...perKindTable(c.run64, c.run64));
  }
  const text = out.join("\n");
  console.log(text);
  const resDir = join(here, "..", "..", "bench-results");
  mkdirSync(resDir, { recursive: true });
  writeFileSync(join(resDir, "realwidth.json"), JSON.stringify({ model, results }, null, 1));
  writeFileSync(join(resDir, "realwidth.md"), text + "\n");
}

const at = process.argv.indexOf("--child");
if (at >= 0) await child(JSON.parse(process.argv[at + 1]));
else await parent();
