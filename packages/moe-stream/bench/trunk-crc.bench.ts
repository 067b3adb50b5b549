/**
 * The cost of checking every packed-trunk read against its crc32 on the reader threads (issue #15).
 *
 *   node --import tsx bench/trunk-crc.bench.ts --dir TRUNK_DIR [--rounds 3] [--engine auto|pread]
 *
 * Streams every layer of the trunk through a one-slot ring (each acquire is a fresh read), with
 * verify "pinned" (ring reads unchecked) and "all" (the default: every read checked) alternating,
 * and prints per mode: GB read, wall seconds, GB/s, and the CPU seconds of the reader threads
 * (k3-read / k3-uring, from /proc/self/task) per GB. Also the crc32's own rate on one thread from
 * memory (the floor of its cost). Run it under the exclusive lock; drop nothing (O_DIRECT reads).
 */
import { readdirSync, readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { native } from "../src/native.js";
import { TrunkStreamer } from "../src/trunk/trunk-stream.js";

const { values } = parseArgs({ options: { dir: { type: "string" }, rounds: { type: "string" }, engine: { type: "string" } } });
if (!values.dir) throw new Error("--dir TRUNK_DIR is required");
const rounds = Number(values.rounds ?? 3);
const ioEngine = (values.engine ?? "auto") as "auto" | "pread";
const TICK = 100; // USER_HZ

/** CPU seconds of this process's threads whose name starts with one of `prefixes`. */
function threadCpu(prefixes: string[]): number {
  let ticks = 0;
  for (const tid of readdirSync("/proc/self/task")) {
    try {
      const comm = readFileSync(`/proc/self/task/${tid}/comm`, "utf8").trim();
      if (!prefixes.some((p) => comm.startsWith(p))) continue;
      const stat = readFileSync(`/proc/self/task/${tid}/stat`, "utf8");
      const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      ticks += Number(f[11]) + Number(f[12]); // utime, stime
    } catch {
      // the thread ended
    }
  }
  return ticks / TICK;
}

// The crc32 alone, one thread, from memory (256 MiB, warm), by each kernel this CPU has.
const buf = new Uint8Array(256 << 20);
for (let i = 0; i < buf.length; i += 4096) buf[i] = i & 0xff;
function crcRate(kernel: "table" | "pclmul" | "vpclmul", bytes: Uint8Array, reps: number): number {
  native.crc32(bytes.subarray(0, 1 << 20), 0, kernel);
  const t0 = performance.now();
  for (let i = 0; i < reps; i++) native.crc32(bytes, 0, kernel);
  return (reps * bytes.length) / ((performance.now() - t0) / 1000) / 1e9;
}
const kernels = (["table", "pclmul", "vpclmul"] as const).slice(0, ["table", "pclmul", "vpclmul"].indexOf(native.crc32Kernel()) + 1);
const rates = kernels.map((k) => [k, k === "table" ? crcRate(k, buf.subarray(0, 16 << 20), 1) : crcRate(k, buf, 4)] as const);
const crcGbps = rates[rates.length - 1][1];
console.log(`crc32 on one thread from memory: ${rates.map(([k, g]) => `${k} ${g.toFixed(2)} GB/s`).join(", ")} (in use: ${native.crc32Kernel()})`);

const tally: Record<string, { bytes: number; seconds: number; cpu: number }> = { pinned: { bytes: 0, seconds: 0, cpu: 0 }, all: { bytes: 0, seconds: 0, cpu: 0 } };
for (let r = 0; r < rounds; r++) {
  for (const verify of (r % 2 ? ["all", "pinned"] : ["pinned", "all"]) as Array<"pinned" | "all">) {
    const s = await TrunkStreamer.open({ dir: values.dir, ringSlots: 1, chunkBytes: 64 << 20, verify, ioEngine });
    try {
      for (const l of s.streamedLayers()) {
        const c0 = threadCpu(["k3-read", "k3-uring"]);
        const w0 = performance.now();
        (await s.acquire(l)).release();
        tally[verify].seconds += (performance.now() - w0) / 1000;
        tally[verify].cpu += threadCpu(["k3-read", "k3-uring"]) - c0;
        tally[verify].bytes += s.manifest.groups.find((g) => g.layer === l)!.byteLength;
      }
      if (r === 0 && verify === "all") console.log(`engine: ${s.stats().engine}`);
    } finally {
      s.close();
    }
  }
}
for (const [mode, t] of Object.entries(tally)) {
  const gb = t.bytes / 1e9;
  console.log(`verify ${mode.padEnd(6)}: ${gb.toFixed(2)} GB in ${t.seconds.toFixed(2)} s = ${(gb / t.seconds).toFixed(2)} GB/s; reader threads ${t.cpu.toFixed(2)} CPU s = ${(t.cpu / gb).toFixed(3)} CPU s per GB`);
}
const extra = tally.all.cpu / (tally.all.bytes / 1e9) - tally.pinned.cpu / (tally.pinned.bytes / 1e9);
console.log(`the check: +${extra.toFixed(3)} reader CPU s per GB (crc32 alone: ${(1 / crcGbps).toFixed(3)} s per GB); wall ${((tally.all.seconds / tally.all.bytes) / (tally.pinned.seconds / tally.pinned.bytes)).toFixed(3)}x per byte`);
