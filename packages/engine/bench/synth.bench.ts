/**
 * `k3 synth` write rate against plain writes of the same number of bytes to the same directory, all
 * with fsync, alternated in the same run (the disk ceiling: 8 MiB writeSync, synth's own write queue
 * with zeros, dd), plus the generator's own rate without writing. Prints synth GB/s, the best plain
 * write's GB/s and their ratio, and the ratio per round.
 * Default size: the CI recipe (2 real-width K3 layers, 16 experts, vocab 4096: 3.57 GB).
 * Run (exclusive lock: it is a timed run):
 *   /work/bin/k3-excl pnpm exec node --import tsx bench/synth.bench.ts [--dir DIR] [--layers N --experts E --vocab V]
 * Env: K3_SYNTH_BENCH_ROUNDS (default 3), K3_SYNTH_BENCH_DD=0 (no buffered dd row), K3_SYNTH_BENCH_DIRECT_DD=0
 * (no `dd oflag=direct` row), K3_SYNTH_BENCH_SYNC=0 (no writeSync row), K3_SYNTH_BENCH_BUFFERED=1 (also
 * synth with io: "buffered", the page-cache path it had before O_DIRECT).
 * Rounds alternate the order (synth first, then the plain writes first) and each round's ratio is
 * synth over the fastest plain write of that round.
 * DIR (default $K3_SYNTH_BENCH_DIR or ./.synth-bench) needs twice the size free; everything written is removed.
 */
import { spawnSync } from "node:child_process";
import { closeSync, constants, fsyncSync, mkdirSync, openSync, rmSync, write, writeSync } from "node:fs";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
// @ts-expect-error: plain .mjs helper shared by every package's bench
import { writeReport } from "../../../scripts/bench-report.mjs";
import { StagingBuffers } from "@k3/moe-stream";
import { timeQueuedWrite } from "@k3/safetensors";
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

const rounds = Number(process.env.K3_SYNTH_BENCH_ROUNDS ?? 3);
const file = join(dir, "plain.bin");
const piece = Buffer.alloc(8 << 20, 0x5a);
// The same number of bytes for the plain writes: the checkpoint's tensor data (its headers and
// small files add < 0.1%).
const bytes = synthPlan(synthConfig(opts)).reduce((a, sh) => a + sh.tensors.reduce((b, x) => b + tensorByteSize(x), 0), 0);
const times = { synth: [] as number[], plain: [] as number[], queued: [] as number[], dd: [] as number[], ddDirect: [] as number[], synthBuffered: [] as number[], direct: [] as number[] };
const useDd = process.env.K3_SYNTH_BENCH_DD !== "0";
const useDirectDd = process.env.K3_SYNTH_BENCH_DIRECT_DD !== "0";
const useBuffered = process.env.K3_SYNTH_BENCH_BUFFERED === "1";
const cpu = { synth: [] as string[], synthBuffered: [] as string[] };
let ioMode = "";
let ddOk = true;
let synthBytes = 0;
let tensors = 0;

/** A plain sequential write of `bytes` zeros-like bytes: 8 MiB writeSync pieces of one buffer, then fsync. */
function plainSync(): number {
  const t0 = performance.now();
  const fd = openSync(file, "w");
  for (let done = 0; done < bytes; ) done += writeSync(fd, piece, 0, Math.min(piece.length, bytes - done));
  fsyncSync(fd);
  closeSync(fd);
  const s = (performance.now() - t0) / 1000;
  rmSync(file, { force: true });
  return s;
}

/**
 * The same bytes with O_DIRECT and no copy: 4 aligned 32 MiB buffers (synth's staging size and
 * count), 4 writes in flight, then fsync: the ceiling of synth's write path minus its generation.
 */
const direct = new StagingBuffers(32 << 20, 4);
for (const b of direct.buffers) b.fill(0x5a);
async function plainDirect(): Promise<number> {
  const t0 = performance.now();
  const fd = openSync(file, constants.O_WRONLY | constants.O_CREAT | constants.O_TRUNC | constants.O_DIRECT);
  const B = direct.bufferBytes;
  const whole = Math.floor(bytes / B) * B;
  let next = 0;
  const lane = async (buf: Uint8Array) => {
    while (next < whole) {
      const at = next;
      next += B;
      await new Promise<void>((res, rej) => write(fd, buf, 0, B, at, (e, n) => (e ? rej(e) : n !== B ? rej(new Error(`short write ${n}`)) : res())));
    }
  };
  await Promise.all(direct.buffers.map(lane));
  closeSync(fd);
  const tail = openSync(file, "r+"); // the unaligned rest, buffered
  if (bytes > whole) writeSync(tail, piece, 0, bytes - whole, whole);
  fsyncSync(tail);
  closeSync(tail);
  const s = (performance.now() - t0) / 1000;
  rmSync(file, { force: true });
  return s;
}

/** The same bytes through synth's own write path (WriteQueue: 32 MiB writev batches, 4 in flight), then fsync. */
const plainQueued = (): Promise<number> => timeQueuedWrite(file, bytes, { inFlight: 4, batchBytes: 32 << 20 });

// Interleaved rounds: synth and the plain writes back to back, their order alternated per round
// (odd rounds synth first, even rounds the plain writes first), so drift of the shared disk hits
// both; each round's synth is judged against the plain writes of the same round.
// K3_SYNTH_BENCH_SYNC=0 leaves out the 8 MiB writeSync row (the queued plain write stays).
const useSync = process.env.K3_SYNTH_BENCH_SYNC !== "0";
const roundLog: string[] = [];
for (let round = 0; round < rounds; round++) {
  const synthRun = async () => {
    // k3 synth (every shard fsynced at the end), as the CLI runs it; then (K3_SYNTH_BENCH_BUFFERED=1)
    // the same through the page cache.
    for (const io of useBuffered ? (["direct", "buffered"] as const) : (["direct"] as const)) {
      const c0 = process.cpuUsage();
      const r = await synthesize({ out, ...opts, force: true, io });
      const c = process.cpuUsage(c0);
      (io === "direct" ? times.synth : times.synthBuffered).push(r.seconds);
      (io === "direct" ? cpu.synth : cpu.synthBuffered).push(`${(c.user / 1e6).toFixed(1)} user + ${(c.system / 1e6).toFixed(1)} sys`);
      if (io === "direct") ioMode = r.io.mode + (r.io.note ? ` (${r.io.note})` : "");
      synthBytes = r.fileBytes;
      tensors = r.tensors;
      rmSync(out, { recursive: true, force: true });
    }
  };
  const plainRuns = async () => {
    times.direct.push(await plainDirect());
    if (useSync) times.plain.push(plainSync());
    times.queued.push(await plainQueued());
    if (useDd) {
      // dd of the same size (conv=fsync).
      const count = Math.ceil(bytes / (8 << 20));
      t = performance.now();
      const dd = spawnSync("dd", ["if=/dev/zero", `of=${file}`, "bs=8M", `count=${count}`, "conv=fsync"], { encoding: "utf8" });
      if (dd.status === 0) times.dd.push((performance.now() - t) / 1000);
      else ddOk = false;
      rmSync(file, { force: true });
    }
    if (useDirectDd) {
      // dd with O_DIRECT (32 MiB blocks, conv=fsync): the page-cache-free write ceiling.
      const count = Math.ceil(bytes / (32 << 20));
      t = performance.now();
      const dd = spawnSync("dd", ["if=/dev/zero", `of=${file}`, "bs=32M", `count=${count}`, "oflag=direct", "conv=fsync"], { encoding: "utf8" });
      if (dd.status === 0) times.ddDirect.push((performance.now() - t) / 1000);
      rmSync(file, { force: true });
    }
  };
  if (round % 2 === 0) {
    await synthRun();
    await plainRuns();
  } else {
    await plainRuns();
    await synthRun();
  }
  roundLog.push(
    `${round + 1} ${round % 2 === 0 ? "synth first" : "plain first"}: synth ${times.synth.at(-1)!.toFixed(2)} s (CPU ${cpu.synth.at(-1)} s)` +
      (useBuffered ? `, synth buffered ${times.synthBuffered.at(-1)!.toFixed(2)} s (CPU ${cpu.synthBuffered.at(-1)} s)` : "") +
      `, O_DIRECT plain ${times.direct.at(-1)!.toFixed(2)} s, queued plain ${times.queued.at(-1)!.toFixed(2)} s${useSync ? `, writeSync ${times.plain.at(-1)!.toFixed(2)} s` : ""}` +
      (useDd && times.dd[round] !== undefined ? `, dd ${times.dd[round].toFixed(2)} s` : "") +
      (useDirectDd && times.ddDirect[round] !== undefined ? `, dd oflag=direct ${times.ddDirect[round].toFixed(2)} s` : ""),
  );
  console.error(roundLog.at(-1));
}

const gbps = (b: number, s: number) => b / 1e9 / s;
const best = (xs: number[]) => Math.min(...xs);
const list = (xs: number[]) => xs.map((x) => x.toFixed(2)).join(", ");
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1];
const synthRate = gbps(synthBytes, best(times.synth));
const plainRate = times.plain.length ? gbps(bytes, best(times.plain)) : 0;
const queuedRate = gbps(bytes, best(times.queued));
const ddRate = ddOk && times.dd.length ? gbps(bytes, best(times.dd)) : NaN;
const ddDirectRate = times.ddDirect.length ? gbps(bytes, best(times.ddDirect)) : NaN;
const directRate = gbps(bytes, best(times.direct));
// The ceiling: the best plain write of the run (our writers of the same bytes, dd, dd O_DIRECT).
const ceiling = Math.max(directRate, plainRate, queuedRate, Number.isNaN(ddRate) ? 0 : ddRate, Number.isNaN(ddDirectRate) ? 0 : ddDirectRate);
// Per round: synth against the fastest plain write of that round.
const roundBest = (i: number) =>
  Math.max(gbps(bytes, times.direct[i]), times.plain[i] ? gbps(bytes, times.plain[i]) : 0, gbps(bytes, times.queued[i]), times.dd[i] ? gbps(bytes, times.dd[i]) : 0, times.ddDirect[i] ? gbps(bytes, times.ddDirect[i]) : 0);
const perRound = times.synth.map((s, i) => gbps(synthBytes, s) / roundBest(i));
const perRoundBuffered = times.synthBuffered.map((s, i) => gbps(synthBytes, s) / roundBest(i));
const bufferedRate = times.synthBuffered.length ? gbps(synthBytes, best(times.synthBuffered)) : NaN;
const rows = [
  { step: `k3 synth --layers ${opts.layers} --experts ${opts.experts} --vocab ${opts.vocab} (${tensors} tensors; ${ioMode})`, GB: synthBytes / 1e9, "seconds (each run)": list(times.synth), "best GB/s": synthRate, "vs best plain write": synthRate / ceiling },
  ...(times.synthBuffered.length ? [{ step: "k3 synth, io: buffered (the page-cache path before O_DIRECT)", GB: synthBytes / 1e9, "seconds (each run)": list(times.synthBuffered), "best GB/s": bufferedRate, "vs best plain write": bufferedRate / ceiling }] : []),
  { step: "plain write, O_DIRECT 32 MiB x 4 in flight from aligned buffers (no copy) + fsync", GB: bytes / 1e9, "seconds (each run)": list(times.direct), "best GB/s": directRate, "vs best plain write": directRate / ceiling },
  ...(times.plain.length ? [{ step: "plain write, 8 MiB writeSync + fsync", GB: bytes / 1e9, "seconds (each run)": list(times.plain), "best GB/s": plainRate, "vs best plain write": plainRate / ceiling }] : []),
  { step: "plain write, WriteQueue 32 MiB x 4 in flight + fsync", GB: bytes / 1e9, "seconds (each run)": list(times.queued), "best GB/s": queuedRate, "vs best plain write": queuedRate / ceiling },
  ...(Number.isNaN(ddRate) ? [] : [{ step: "dd if=/dev/zero bs=8M conv=fsync", GB: bytes / 1e9, "seconds (each run)": list(times.dd), "best GB/s": ddRate, "vs best plain write": ddRate / ceiling }]),
  ...(Number.isNaN(ddDirectRate) ? [] : [{ step: "dd if=/dev/zero bs=32M oflag=direct conv=fsync", GB: bytes / 1e9, "seconds (each run)": list(times.ddDirect), "best GB/s": ddDirectRate, "vs best plain write": ddDirectRate / ceiling }]),
  { step: "generator only (no write)", GB: gen.bytes / 1e9, "seconds (each run)": genSec.toFixed(2), "best GB/s": gbps(gen.bytes, genSec), "vs best plain write": gbps(gen.bytes, genSec) / ceiling },
];
writeReport("synth", {
  title: "k3 synth write rate vs a plain write of the same bytes (same run, alternated)",
  command: `${Object.entries(process.env).filter(([k]) => k.startsWith("K3_SYNTH_BENCH_") && k !== "K3_SYNTH_BENCH_DIR").map(([k, v]) => `${k}=${v} `).join("")}/work/bin/k3-excl pnpm exec node --import tsx bench/synth.bench.ts --layers ${opts.layers} --experts ${opts.experts} --vocab ${opts.vocab}${values.dir ? ` --dir ${values.dir}` : ""}`,
  rows,
  notes: [
    `synth ${synthRate.toFixed(3)} GB/s, plain write ${ceiling.toFixed(3)} GB/s, ratio ${(synthRate / ceiling).toFixed(2)} (best of ${rounds} each); per round synth / that round's best plain write: ${perRound.map((x) => x.toFixed(2)).join(", ")} (median ${median(perRound).toFixed(2)}; >= 0.8 in ${perRound.filter((x) => x >= 0.8).length} of ${perRound.length} rounds)`,
    ...(perRoundBuffered.length ? [`synth io: buffered per round: ${perRoundBuffered.map((x) => x.toFixed(2)).join(", ")}`] : []),
    "Shared virtio disk: other processes' I/O in the same minutes moves both figures; the per-round ratio is the comparison.",
    ...roundLog.map((l) => `round ${l}`),
  ],
});
console.log(`synth ${synthRate.toFixed(3)} GB/s | plain write ${ceiling.toFixed(3)} GB/s | ratio ${(synthRate / ceiling).toFixed(2)} | per round ${perRound.map((x) => x.toFixed(2)).join(", ")}`);
rmSync(dir, { recursive: true, force: true });
