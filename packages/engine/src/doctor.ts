/**
 * `k3 doctor`: what this machine and a checkpoint are ready for. Prints one line per check with
 * ok / warn / FAIL and returns false only for blocking problems.
 *
 * The disk probe uses the engine's own access pattern: expert-sized (17.5 MB) positioned reads at
 * scattered offsets of the checkpoint's shards, several in flight, like the expert store. Reads are
 * buffered, so a checkpoint already in the page cache reads at memory speed (the line says so).
 */
import { execFileSync } from "node:child_process";
import { closeSync, existsSync, fstatSync, openSync, readdirSync, readSync, statSync } from "node:fs";
import { open } from "node:fs/promises";
import { basename, join } from "node:path";
import { bestSimdLevel, nativeInfo, simdLevel, threadCount } from "@k3/dense";
import { censusOf } from "./census.js";
import { readConfig } from "./config.js";
import { fmtBytes, GB, presetForMemory, readMemInfo } from "./presets.js";

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

async function probe(files: string[], budget: number): Promise<{ bytes: number; seconds: number }> {
  const sized = files.map((f) => ({ f, size: statSync(f).size })).filter((x) => x.size > EXPERT_READ);
  if (sized.length === 0) return { bytes: 0, seconds: 0 };
  const handles = await Promise.all(sized.map((x) => open(x.f, "r")));
  const reads = Math.max(1, Math.floor(budget / EXPERT_READ));
  const inflight = 4;
  let seed = 12345;
  const rand = () => ((seed = (seed * 1103515245 + 12345) >>> 0) / 4294967296);
  const bufs = Array.from({ length: inflight }, () => Buffer.allocUnsafe(EXPERT_READ));
  let bytes = 0;
  const t0 = performance.now();
  let next = 0;
  await Promise.all(
    bufs.map(async (buf) => {
      while (next < reads) {
        next++;
        const i = Math.floor(rand() * sized.length);
        const max = sized[i].size - EXPERT_READ;
        const pos = Math.floor((rand() * max) / 4096) * 4096;
        const { bytesRead } = await handles[i].read(buf, 0, EXPERT_READ, pos);
        bytes += bytesRead;
      }
    }),
  );
  const seconds = (performance.now() - t0) / 1000;
  await Promise.all(handles.map((h) => h.close()));
  return { bytes, seconds };
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
  ok(`RAM: MemAvailable ${fmtBytes(mem.availableBytes)} of ${fmtBytes(mem.totalBytes)} → suggested --preset ${preset}`);
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
    ok(`config: ${cfg.family}, ${cfg.numLayers} layers (${cfg.layerKinds.filter((k) => k === "mla").length} MLA), ${cfg.moe.numExperts} experts top-${cfg.moe.topK}; trunk ${fmtBytes(census.trunkBytes + census.embedBytes + census.headBytes)}, experts ${fmtBytes(census.expertsTotal * census.expertBytes)}`);
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
  if (shardFiles.length && !bad) ok(`${shardFiles.length} shards, ${fmtBytes(total)}: every size matches its header`);
  const m = /of-(\d+)\.safetensors$/.exec(shardFiles[0] ?? "");
  if (m && Number(m[1]) !== shardFiles.filter((f) => /model-\d+-of-\d+\.safetensors$/.test(f)).length) fail(`expected ${Number(m[1])} shards (from the file names), found ${shardFiles.length}`);

  const p = await probe(shardFiles, o.probeBytes);
  if (p.bytes === 0) warn("disk probe skipped: shards are smaller than one K3 expert read (tiny model?)");
  else {
    const rate = p.bytes / p.seconds / 1e9;
    const cached = total < mem.availableBytes ? " (the checkpoint fits in RAM, so the page cache may serve it: a cold drive is slower)" : "";
    ok(`disk probe: ${(p.bytes / 1e9).toFixed(2)} GB in 17.5 MB positioned reads, 4 in flight: ${rate.toFixed(2)} GB/s${cached}`);
    o.out(`      a K3 token with no cached expert reads 25.83 GB of experts: ~${(25.83 / rate).toFixed(1)} s/token from this disk`);
  }
  o.out(blocking ? "blocking problems found" : `next: k3 run --model ${o.dir} --preset ${preset} --prompt "Hello"`);
  return !blocking;
}
