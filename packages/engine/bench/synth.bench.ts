/**
 * `k3 synth` write rate against a plain sequential write of the same number of bytes, both with
 * fsync, in the same run (the disk ceiling), plus the generator's own rate without writing.
 * Default size: the CI recipe (2 real-width K3 layers, 16 experts, vocab 4096: 3.57 GB).
 * Run (exclusive lock: it is a timed run):
 *   flock -x /tmp/k3-bench.lock pnpm exec node --import tsx bench/synth.bench.ts [--dir DIR] [--layers N --experts E --vocab V]
 * DIR (default $K3_SYNTH_BENCH_DIR or ./.synth-bench) needs twice the size free; everything written is removed.
 */
import { spawnSync } from "node:child_process";
import { closeSync, fsyncSync, mkdirSync, openSync, rmSync, writeSync } from "node:fs";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
// @ts-expect-error: plain .mjs helper shared by every package's bench
import { writeReport } from "../../../scripts/bench-report.mjs";
import { generateOnly, synthConfig, synthesize, synthPlan, tensorByteSize } from "../src/synth.js";

const { values } = parseArgs({ options: { dir: { type: "string" }, layers: { type: "string" }, experts: { type: "string" }, vocab: { type: "string" } } });
const dir = resolve(values.dir ?? process.env.K3_SYNTH_BENCH_DIR ?? ".synth-bench");
const opts = { layers: Number(values.layers ?? 2), experts: Number(values.experts ?? 16), vocab: Number(values.vocab ?? 4096), seed: 0 };
mkdirSync(dir, { recursive: true });
const out = join(dir, "ckpt");

// 1. The generator alone (no I/O).
let t = performance.now();
const gen = generateOnly(synthConfig(opts), 0);
const genSec = (performance.now() - t) / 1000;

const rounds = Number(process.env.K3_SYNTH_BENCH_ROUNDS ?? 2);
const file = join(dir, "plain.bin");
const piece = Buffer.alloc(8 << 20, 0x5a);
// The same number of bytes for the plain writes: the checkpoint's tensor data (its headers and
// small files add < 0.1%).
let bytes = synthPlan(synthConfig(opts)).reduce((a, sh) => a + sh.tensors.reduce((b, x) => b + tensorByteSize(x), 0), 0);
const times = { synth: [] as number[], plain: [] as number[], dd: [] as number[] };
let ddOk = true;
let synthBytes = 0;
let tensors = 0;
// Rounds of plain write -> synth -> dd, so drift of the shared disk hits all three alike.
for (let round = 0; round < rounds; round++) {
  // A plain sequential write of the same bytes: 8 MiB writeSync pieces of one buffer, then fsync.
  {
    t = performance.now();
    const fd = openSync(file, "w");
    for (let done = 0; done < bytes; ) done += writeSync(fd, piece, 0, Math.min(piece.length, bytes - done));
    fsyncSync(fd);
    closeSync(fd);
    times.plain.push((performance.now() - t) / 1000);
    rmSync(file, { force: true });
  }
  // k3 synth (every shard fsynced at the end), as the CLI runs it.
  const r = await synthesize({ out, ...opts, force: true });
  times.synth.push(r.seconds);
  synthBytes = r.fileBytes;
  tensors = r.tensors;
  rmSync(out, { recursive: true, force: true });
  // dd of the same size (conv=fsync).
  const count = Math.ceil(bytes / (8 << 20));
  t = performance.now();
  const dd = spawnSync("dd", ["if=/dev/zero", `of=${file}`, "bs=8M", `count=${count}`, "conv=fsync"], { encoding: "utf8" });
  if (dd.status === 0) times.dd.push((performance.now() - t) / 1000);
  else ddOk = false;
  rmSync(file, { force: true });
}

const gbps = (bytes: number, s: number) => bytes / 1e9 / s;
const best = (xs: number[]) => Math.min(...xs);
const list = (xs: number[]) => xs.map((x) => x.toFixed(2)).join(", ");
const synthRate = gbps(synthBytes, best(times.synth));
const plainRate = gbps(bytes, best(times.plain));
const ddRate = ddOk && times.dd.length ? gbps(bytes, best(times.dd)) : NaN;
const ceiling = Math.max(plainRate, Number.isNaN(ddRate) ? 0 : ddRate);
const rows = [
  { step: `k3 synth --layers ${opts.layers} --experts ${opts.experts} --vocab ${opts.vocab} (${tensors} tensors)`, GB: synthBytes / 1e9, "seconds (each run)": list(times.synth), "best GB/s": synthRate, "vs best sequential write": synthRate / ceiling },
  { step: "plain sequential write, 8 MiB writeSync + fsync", GB: bytes / 1e9, "seconds (each run)": list(times.plain), "best GB/s": plainRate, "vs best sequential write": plainRate / ceiling },
  ...(Number.isNaN(ddRate) ? [] : [{ step: "dd if=/dev/zero bs=8M conv=fsync", GB: bytes / 1e9, "seconds (each run)": list(times.dd), "best GB/s": ddRate, "vs best sequential write": ddRate / ceiling }]),
  { step: "generator only (no write)", GB: gen.bytes / 1e9, "seconds (each run)": genSec.toFixed(2), "best GB/s": gbps(gen.bytes, genSec), "vs best sequential write": gbps(gen.bytes, genSec) / ceiling },
];
writeReport("synth", {
  title: "k3 synth write rate vs a plain sequential write (same run, same bytes)",
  command: `flock -x /tmp/k3-bench.lock pnpm exec node --import tsx bench/synth.bench.ts --layers ${opts.layers} --experts ${opts.experts} --vocab ${opts.vocab}`,
  rows,
  notes: ["Shared virtio disk: other processes' I/O in the same minutes moves both figures; the ratio is the comparison."],
});
rmSync(dir, { recursive: true, force: true });
