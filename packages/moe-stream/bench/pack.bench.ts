/**
 * packTrunk rate against the same run's read and write ceilings: rounds of (read ceiling, write
 * ceiling, pack), each on the same bytes:
 *  - read: the trunk's source ranges, in the pack's order, 64 MiB O_DIRECT reads, 4 in flight;
 *  - write: as many bytes as trunk.bin to the output directory, O_DIRECT 32 MiB x 4 + fsync;
 *  - pack: packTrunk(model, out) (copy, per-group fsync + journal, verify re-read), as `k3 pack`.
 * The source shards' page cache is dropped before each read and pack (dd iflag=nocache count=0,
 * POSIX_FADV_DONTNEED on those files only). Prints pack GB/s, both ceilings and
 * pack / min(read, write).
 * Run (exclusive lock: a timed run):
 *   /work/bin/k3-excl node --import tsx bench/pack.bench.ts --model DIR [--out DIR] [--rounds N]
 */
import { spawnSync } from "node:child_process";
import { closeSync, fsyncSync, mkdirSync, openSync, rmSync } from "node:fs";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
// @ts-expect-error: plain .mjs helper shared by every package's bench
import { writeReport } from "../../../scripts/bench-report.mjs";
import { DirectFileReader, alignedReadBuffer } from "../src/io/direct-read.js";
import { DIRECT_BUFFER_BYTES, DirectFileWriter } from "../src/io/direct-write.js";
import { packTrunk, planTrunk } from "../src/trunk/trunk-pack.js";

const { values } = parseArgs({ options: { model: { type: "string" }, out: { type: "string" }, rounds: { type: "string" } } });
if (!values.model) throw new Error("usage: pack.bench.ts --model DIR [--out DIR] [--rounds N]");
const model = resolve(values.model);
const outRoot = resolve(values.out ?? join(model, "..", ".pack-bench"));
const rounds = Number(values.rounds ?? 2);
mkdirSync(outRoot, { recursive: true });
const plan = planTrunk(model);
const sources = plan.groups.flatMap((g) => g.sources);
const files = [...new Set(sources.map((t) => t.file))];
const trunkBytes = plan.bytes;
const dataBytes = sources.reduce((a, t) => a + t.byteLength, 0);

function dropSourceCache(): void {
  for (const f of files) spawnSync("dd", [`if=${f}`, "iflag=nocache", "count=0", "status=none"]);
}

async function readCeiling(): Promise<number> {
  dropSourceCache();
  const piece = 64 << 20;
  const bufs = Array.from({ length: 4 }, () => alignedReadBuffer(piece));
  const readers = new Map(files.map((f) => [f, new DirectFileReader(f)]));
  const jobs: Array<[DirectFileReader, number, number]> = [];
  for (const t of sources) for (let at = 0; at < t.byteLength; at += piece) jobs.push([readers.get(t.file)!, t.offset + at, Math.min(piece, t.byteLength - at)]);
  const t0 = performance.now();
  let next = 0;
  const worker = async (buf: Uint8Array) => {
    while (next < jobs.length) {
      const [r, pos, len] = jobs[next++];
      await r.read(buf, pos, len);
    }
  };
  await Promise.all(bufs.map(worker));
  const s = (performance.now() - t0) / 1000;
  for (const r of readers.values()) r.close();
  return s;
}

/** trunkBytes of a pattern to a fresh file: O_DIRECT, 32 MiB x 4 in flight, then fsync (the pack's writer alone). */
async function writeCeiling(): Promise<number> {
  const file = join(outRoot, "plain.bin");
  const block = new Uint8Array(DIRECT_BUFFER_BYTES).fill(0x5a);
  const fd = openSync(file, "w");
  const w = new DirectFileWriter(fd, file);
  const t0 = performance.now();
  try {
    for (let at = 0; at < trunkBytes; at += block.length) await w.push(block.subarray(0, Math.min(block.length, trunkBytes - at)), at);
    await w.drain();
    fsyncSync(fd);
  } finally {
    w.close();
    closeSync(fd);
  }
  const s = (performance.now() - t0) / 1000;
  rmSync(file, { force: true });
  return s;
}

async function pack(): Promise<number> {
  const out = join(outRoot, "trunk");
  rmSync(out, { recursive: true, force: true });
  dropSourceCache();
  const t0 = performance.now();
  await packTrunk(model, out);
  const s = (performance.now() - t0) / 1000;
  rmSync(out, { recursive: true, force: true });
  return s;
}

const times = { read: [] as number[], write: [] as number[], pack: [] as number[] };
for (let r = 0; r < rounds; r++) {
  times.read.push(await readCeiling());
  times.write.push(await writeCeiling());
  times.pack.push(await pack());
}
rmSync(outRoot, { recursive: true, force: true });

const gbps = (b: number, s: number) => b / 1e9 / s;
const best = (xs: number[]) => Math.min(...xs);
const list = (xs: number[]) => xs.map((x) => x.toFixed(2)).join(", ");
const readRate = gbps(dataBytes, best(times.read));
const writeRate = gbps(trunkBytes, best(times.write));
const packRate = gbps(trunkBytes, best(times.pack));
const ceiling = Math.min(readRate, writeRate);
const perRound = times.pack.map((s, i) => gbps(trunkBytes, s) / Math.min(gbps(dataBytes, times.read[i]), gbps(trunkBytes, times.write[i])));
writeReport("pack", {
  title: "packTrunk (k3 pack) vs the same run's read and write ceilings",
  command: `/work/bin/k3-excl node --import tsx bench/pack.bench.ts --model ${values.model} --rounds ${rounds}`,
  rows: [
    { step: `packTrunk (${plan.groups.length} groups)`, GB: trunkBytes / 1e9, "seconds (each run)": list(times.pack), "best GB/s": packRate, "x min(read, write)": packRate / ceiling },
    { step: "read ceiling: the source ranges, O_DIRECT 64 MiB x 4 in flight", GB: dataBytes / 1e9, "seconds (each run)": list(times.read), "best GB/s": readRate, "x min(read, write)": readRate / ceiling },
    { step: "write ceiling: O_DIRECT 32 MiB x 4 in flight + fsync", GB: trunkBytes / 1e9, "seconds (each run)": list(times.write), "best GB/s": writeRate, "x min(read, write)": writeRate / ceiling },
  ],
  notes: [`pack ${packRate.toFixed(3)} GB/s, read ${readRate.toFixed(3)} GB/s, write ${writeRate.toFixed(3)} GB/s, pack / min = ${(packRate / ceiling).toFixed(2)}; per round ${perRound.map((x) => x.toFixed(2)).join(", ")}`],
});
console.log(`pack ${packRate.toFixed(3)} GB/s | read ${readRate.toFixed(3)} | write ${writeRate.toFixed(3)} | pack/min ${(packRate / ceiling).toFixed(2)} | per round ${perRound.map((x) => x.toFixed(2)).join(", ")}`);
