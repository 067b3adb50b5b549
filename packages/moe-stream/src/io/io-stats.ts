/**
 * Honest I/O accounting helpers: device bytes from /proc/self/io (read_bytes counts what the
 * block layer read for us, page-cache hits excluded), peak RSS, cold-cache control and the disk's
 * own ceiling for an access pattern.
 */
import { readFileSync } from "node:fs";
import { native } from "../native.js";

/** /proc/self/io: read_bytes (from the device) and rchar (all read() bytes, cache hits included). */
export function procIo(): { readBytes: number; rchar: number } {
  try {
    const text = readFileSync("/proc/self/io", "utf8");
    const field = (k: string) => Number(new RegExp(`^${k}: (\\d+)$`, "m").exec(text)?.[1] ?? NaN);
    return { readBytes: field("read_bytes"), rchar: field("rchar") };
  } catch {
    return { readBytes: NaN, rchar: NaN };
  }
}

/** Peak resident set size of this process, in bytes. */
export function peakRssBytes(): number {
  return process.resourceUsage().maxRSS * 1024;
}

/** fdatasync + POSIX_FADV_DONTNEED: drops the file's clean pages from the page cache (no root needed). */
export function dropPageCache(file: string): void {
  const rc = native.dropFileCache(file);
  if (rc !== 0) throw new Error(`dropPageCache(${file}): errno ${rc}`);
}

/** A list of ranges as the native benchmarks take it: distinct paths, then file index, offset, length per read. */
function readList(reads: Array<{ file: string; offset: number; length: number }>): [string[], Uint32Array, Float64Array, Float64Array] {
  const files = [...new Set(reads.map((r) => r.file))];
  const index = new Map(files.map((f, i) => [f, i]));
  return [files, Uint32Array.from(reads, (x) => index.get(x.file)!), Float64Array.from(reads, (x) => x.offset), Float64Array.from(reads, (x) => x.length)];
}

/**
 * The disk's ceiling for a list of ranges: `queueDepth` plain pread threads, O_DIRECT aligned
 * supersets, no cache and no JS in the loop. GB = 1e9 bytes.
 */
export function measureReadCeiling(
  reads: Array<{ file: string; offset: number; length: number }>,
  opts: { queueDepth?: number; direct?: boolean } = {},
): { bytes: number; seconds: number; gbPerSec: number } {
  const r = native.readCeiling(...readList(reads), opts.queueDepth ?? 16, opts.direct ?? true);
  return { ...r, gbPerSec: r.bytes / r.seconds / 1e9 };
}

/**
 * The read pool's own cost for a list of ranges: every read queued at once on `engine` at depth
 * `queueDepth`, driven from C (no JS in the loop); wall seconds and process CPU seconds (every
 * thread, io_uring's kernel workers included). GB = 1e9 bytes.
 */
export function measureReadEngine(
  reads: Array<{ file: string; offset: number; length: number }>,
  opts: { engine: "io_uring" | "pread"; queueDepth?: number; direct?: boolean },
): { bytes: number; seconds: number; cpuSeconds: number; gbPerSec: number; cpuSecPerGB: number; engine: "io_uring" | "pread" } {
  const r = native.poolBench(...readList(reads), opts.queueDepth ?? 16, opts.engine, opts.direct ?? true);
  return { ...r, gbPerSec: r.bytes / r.seconds / 1e9, cpuSecPerGB: r.cpuSeconds / (r.bytes / 1e9) };
}
