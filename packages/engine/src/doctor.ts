/**
 * `k3 doctor`: what this machine and a checkpoint are ready for. Prints one line per check with
 * ok / warn / FAIL and returns false only for blocking problems.
 *
 * The disk probe uses the engine's own access pattern and read engine: expert-sized reads (the
 * checkpoint's own routed experts when they are large, else 17.5 MB ranges at scattered 4 KiB
 * offsets of its shards) with O_DIRECT, as many in flight as the expert store has readers, driven
 * from C by @k3/moe-stream's measureReadEngine (io_uring, else pread threads), next to
 * measureReadCeiling (plain pread threads at the same depth). O_DIRECT bypasses the page cache, so a
 * checkpoint that fits in RAM is measured at disk speed too (unless its filesystem refuses O_DIRECT).
 */
import { formatBytes } from "@k3/native";
import { execFileSync } from "node:child_process";
import { closeSync, existsSync, fstatSync, openSync, readdirSync, readFileSync, readSync, statSync } from "node:fs";
import { basename, join } from "node:path";
import { bestSimdLevel, nativeInfo, simdLevel, threadCount } from "@k3/dense";
import { measureReadCeiling, measureReadEngine, openCheckpointIndex, RangeReader } from "@k3/moe-stream";
import { censusOf } from "./census.js";
import { moeLayersOf, readConfig } from "./config.js";
import { budgetsFor, GB, presetForMemory, readMemInfo } from "./presets.js";
import { DEFAULTS } from "./options.js";
import { VERIFY_STATE } from "./verify.js";

export interface DoctorOptions {
  dir: string | null;
  /** Further directories holding shards (`--shard-dirs`): their shards are checked and probed too. */
  shardDirs?: readonly string[];
  probeBytes: number;
  out: (line: string) => void;
}

/** The expert read size of real K3 (one coalesced pread per expert). */
const EXPERT_READ = 17_547_264;

/** Each shard's size must equal 8 + header length + the end of its last tensor. */
function checkShard(file: string): string | null {
  const fd = openSync(file, "r");
  try {
    const size = fstatSync(fd).size;
    const head = Buffer.alloc(8);
    if (size < 8 || readSync(fd, head, 0, 8, 0) !== 8) return `${size} bytes: too short`;
    const len = Number(head.readBigUInt64LE(0));
    if (len > 100_000_000 || 8 + len > size) return `header length ${len} does not fit ${size} bytes`;
    const buf = Buffer.alloc(len);
    readSync(fd, buf, 0, len, 8);
    let header: Record<string, { data_offsets?: number[] }>;
    try {
      header = JSON.parse(buf.toString("utf8"));
    } catch {
      return "header is not valid JSON";
    }
    let end = 0;
    for (const [k, v] of Object.entries(header)) if (k !== "__metadata__" && Array.isArray(v.data_offsets)) end = Math.max(end, v.data_offsets[1]);
    if (8 + len + end !== size) return `size ${size} but the header says ${8 + len + end} (truncated or padded download)`;
    return null;
  } finally {
    closeSync(fd);
  }
}

/** Whether `k3 verify` ever checked the checkpoint's bytes (sizes alone do not catch flipped bits). */
function verifiedLine(dir: string, ok: (s: string) => void, warn: (s: string) => void): void {
  const state = join(dir, VERIFY_STATE);
  if (!existsSync(state)) {
    warn(`the checkpoint's bytes have never been verified: k3 verify --model ${dir} (hashes every file against the sha256 k3 download recorded)`);
    return;
  }
  try {
    const files = Object.values((JSON.parse(readFileSync(state, "utf8")) as { files?: Record<string, { expected: string; actual: string }> }).files ?? {});
    const bad = files.filter((f) => f.actual !== f.expected).length;
    (bad ? warn : ok)(`k3 verify checked ${files.length} file(s) (last ${statSync(state).mtime.toISOString().slice(0, 16).replace("T", " ")} UTC)${bad ? `: ${bad} did not match; rerun k3 verify --model ${dir}` : ""}`);
  } catch {
    warn(`${state} is unreadable: rerun k3 verify --model ${dir}`);
  }
}

/** Reads in flight in the expert store (ExpertStore's default readers): the probe's queue depth. */
export const PROBE_QUEUE_DEPTH = 16;

export interface ProbeResult {
  reads: number;
  readBytes: number;
  /** "experts" = the checkpoint's own routed experts; "ranges" = expert-sized ranges of its shards. */
  pattern: "experts" | "ranges";
  engine: { gbPerSec: number; seconds: number; engine: "io_uring" | "pread"; note: string };
  ceiling: { gbPerSec: number; seconds: number };
  /** Every probed file is read with O_DIRECT (else the page cache may serve repeated bytes). */
  direct: boolean;
}

/** Up to `budget` bytes of distinct expert-sized reads, in a fixed pseudo-random order. */
export function probeReads(dir: string | null, files: string[], budget: number, shardDirs?: readonly string[]): { reads: Array<{ file: string; offset: number; length: number }>; pattern: "experts" | "ranges" } {
  let seed = 12345;
  const rand = () => (seed = (Math.imul(seed, 1103515245) + 12345) >>> 0) / 4294967296;
  // The checkpoint's own experts when they are expert-sized (a real-width checkpoint): the engine's exact reads.
  if (dir) {
    try {
      const cfg = readConfig(dir);
      const census = censusOf(cfg);
      if (census.expertBytes >= 1 << 20) {
        const index = openCheckpointIndex(dir, { shardDirs, allowMissingShards: true });
        const all = moeLayersOf(cfg).flatMap((l) => {
          try {
            return index.experts(l);
          } catch {
            return [];
          }
        });
        const n = Math.max(1, Math.min(all.length, Math.floor(budget / census.expertBytes)));
        for (let i = all.length - 1; i > 0; i--) {
          const j = Math.floor(rand() * (i + 1));
          [all[i], all[j]] = [all[j], all[i]];
        }
        if (all.length > 0) return { reads: all.slice(0, n).map((e) => ({ file: e.file, offset: e.offset, length: e.byteLength })), pattern: "experts" };
      }
    } catch {
      /* fall back to ranges */
    }
  }
  const sized = files.map((f) => ({ f, size: statSync(f).size })).filter((x) => x.size > EXPERT_READ);
  if (sized.length === 0) return { reads: [], pattern: "ranges" };
  const n = Math.max(1, Math.floor(budget / EXPERT_READ));
  // Distinct slots of each file (no range read twice), spread over all files.
  const taken = new Set<string>();
  const reads: Array<{ file: string; offset: number; length: number }> = [];
  for (let tries = 0; reads.length < n && tries < 20 * n; tries++) {
    const x = sized[Math.floor(rand() * sized.length)];
    const slots = Math.floor(x.size / EXPERT_READ);
    const k = Math.floor(rand() * slots);
    if (taken.has(`${x.f}:${k}`)) continue;
    taken.add(`${x.f}:${k}`);
    reads.push({ file: x.f, offset: k * EXPERT_READ, length: EXPERT_READ });
  }
  return { reads, pattern: "ranges" };
}

/** The engine's read pattern measured on the checkpoint: its read engine, and plain pread threads at the same depth. */
export function probeDisk(dir: string | null, files: string[], budget: number, shardDirs?: readonly string[]): ProbeResult | null {
  const { reads, pattern } = probeReads(dir, files, budget, shardDirs);
  if (reads.length === 0) return null;
  const used = [...new Set(reads.map((r) => r.file))];
  const rr = RangeReader.open({ files: used, maxRangeBytes: 4096, slots: 1, prefault: false });
  const direct = rr.fileInfo().every((f) => f.direct);
  rr.close();
  // Two halves, so neither run reads bytes the other brought in (when O_DIRECT is refused).
  const half = Math.max(1, Math.floor(reads.length / 2));
  const a = reads.slice(0, half);
  const b = reads.length > 1 ? reads.slice(half) : reads;
  let engine: ProbeResult["engine"];
  try {
    const r = measureReadEngine(a, { engine: "io_uring", queueDepth: PROBE_QUEUE_DEPTH });
    engine = { gbPerSec: r.gbPerSec, seconds: r.seconds, engine: "io_uring", note: "" };
  } catch (e) {
    const r = measureReadEngine(a, { engine: "pread", queueDepth: PROBE_QUEUE_DEPTH });
    engine = { gbPerSec: r.gbPerSec, seconds: r.seconds, engine: "pread", note: `io_uring unavailable: ${(e as Error).message}` };
  }
  const c = measureReadCeiling(b, { queueDepth: PROBE_QUEUE_DEPTH });
  return { reads: reads.length, readBytes: reads.reduce((x, r) => x + r.length, 0), pattern, engine, ceiling: { gbPerSec: c.gbPerSec, seconds: c.seconds }, direct };
}

export async function runDoctor(o: DoctorOptions): Promise<boolean> {
  let blocking = false;
  const ok = (s: string) => o.out(`ok    ${s}`);
  const warn = (s: string) => o.out(`warn  ${s}`);
  const fail = (s: string) => {
    blocking = true;
    o.out(`FAIL  ${s}`);
  };

  const [maj, min] = process.versions.node.split(".").map(Number);
  if (maj > 20 || (maj === 20 && min >= 19)) ok(`node ${process.versions.node}`);
  else fail(`node ${process.versions.node}: k3 needs >= 20.19`);
  // A C toolchain is only needed to rebuild the native addons from source (prebuilds ship in the packages).
  try {
    const cc = execFileSync("cc", ["--version"], { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] }).split("\n")[0];
    ok(`C compiler: ${cc} (only for \`pnpm test:source\`; prebuilt addons need none)`);
  } catch {
    warn("no C compiler (cc): fine with the shipped prebuilds; needed only to build the addons from source");
  }
  const info = nativeInfo();
  ok(`native kernels: ${info.origin} (${info.file})`);
  const best = bestSimdLevel();
  (best === "scalar" ? warn : ok)(`SIMD: using ${simdLevel()}, best on this CPU ${best}${best === "scalar" ? " (no AVX2: kernels run scalar, several times slower)" : ""}`);
  ok(`threads: ${threadCount()} (K3_THREADS or --threads to change)`);
  const mem = readMemInfo();
  const preset = presetForMemory(mem.availableBytes);
  ok(`RAM: MemAvailable ${formatBytes(mem.availableBytes)} of ${formatBytes(mem.totalBytes)} → suggested --preset ${preset}`);
  if (mem.availableBytes < 4 * GB) warn("less than 4 GB available: even the ultra preset (~3 GB) will be tight");

  if (!o.dir) {
    o.out("(no --model: skipping the checkpoint and disk checks)");
    return !blocking;
  }
  if (!existsSync(o.dir)) {
    fail(`${o.dir} does not exist`);
    return false;
  }
  let shardFiles: string[] = [];
  try {
    const cfg = readConfig(o.dir);
    const census = censusOf(cfg);
    ok(`config: ${cfg.family}, ${cfg.numLayers} layers (${cfg.layerKinds.filter((k) => k === "mla").length} MLA), ${cfg.moe.numExperts} experts top-${cfg.moe.topK}; trunk ${formatBytes(census.trunkBytes + census.embedBytes + census.headBytes)}, experts ${formatBytes(census.expertsTotal * census.expertBytes)}`);
    const chunk = budgetsFor("auto", census, mem).chunkSize ?? DEFAULTS.chunkSize;
    const named = DEFAULTS.chunkSize;
    ok(`prefill chunk: --preset auto plans ${chunk} tokens for this model on this machine${chunk > named ? ` (the named presets keep ${named}: add --chunk ${chunk} to one for the same output with each streamed expert read once per ${chunk} tokens instead of per ${named}; k3 plan --chunk ${chunk} shows its memory)` : ""}`);
  } catch (err) {
    fail((err as Error).message);
  }
  for (const f of ["tiktoken.model", "tokenizer_config.json"]) (existsSync(join(o.dir, f)) ? ok : fail)(`${f}${existsSync(join(o.dir, f)) ? "" : " is missing"}`);
  for (const d of [o.dir, ...(o.shardDirs ?? [])]) {
    if (!existsSync(d)) {
      fail(`shard directory ${d} does not exist`);
      continue;
    }
    shardFiles.push(...readdirSync(d).filter((f) => f.endsWith(".safetensors") && f !== "expected.safetensors").map((f) => join(d, f)));
  }
  shardFiles.sort((a, b) => basename(a).localeCompare(basename(b)));
  if (shardFiles.length === 0) fail("no *.safetensors shards");
  let bad = 0;
  let total = 0;
  for (const f of shardFiles) {
    const problem = checkShard(f);
    total += statSync(f).size;
    if (problem) {
      bad++;
      fail(`${f}: ${problem}`);
    }
  }
  if (shardFiles.length && !bad) ok(`${shardFiles.length} shards, ${formatBytes(total)}: every size matches its header`);
  verifiedLine(o.dir, ok, warn);
  const m = /of-(\d+)\.safetensors$/.exec(shardFiles[0] ?? "");
  if (m && Number(m[1]) !== shardFiles.filter((f) => /model-\d+-of-\d+\.safetensors$/.test(f)).length) fail(`expected ${Number(m[1])} shards (from the file names), found ${shardFiles.length}`);

  const p = probeDisk(o.dir, shardFiles, o.probeBytes, o.shardDirs);
  if (!p) warn("disk probe skipped: shards are smaller than one K3 expert read (tiny model?)");
  else {
    const what = p.pattern === "experts" ? "of the checkpoint's routed experts" : "expert-sized (17.5 MB) ranges at scattered offsets";
    const cached = p.direct ? "" : " (O_DIRECT refused by this filesystem: buffered reads, the page cache may serve them)";
    ok(`disk probe (the engine's pattern): ${p.reads} reads ${what}, ${formatBytes(p.readBytes)}, O_DIRECT, ${PROBE_QUEUE_DEPTH} in flight${cached}`);
    o.out(`      read engine (${p.engine.engine}${p.engine.note ? `; ${p.engine.note}` : ""}): ${p.engine.gbPerSec.toFixed(2)} GB/s; plain pread threads, same depth: ${p.ceiling.gbPerSec.toFixed(2)} GB/s`);
    const rate = Math.max(p.engine.gbPerSec, p.ceiling.gbPerSec);
    o.out(`      a K3 token with no cached expert reads 25.83 GB of experts: ~${(25.83 / rate).toFixed(1)} s/token from this disk (k3 plan --project --disk-gbps ${rate.toFixed(2)})`);
  }
  o.out(blocking ? "blocking problems found" : `next: k3 run --model ${o.dir} --preset ${preset} --prompt "Hello"`);
  return !blocking;
}
