/**
 * Resident loading at disk speed: byte ranges of shard files (a model's resident tensors) read by
 * the store's read pool (io_uring or pread threads, O_DIRECT where the filesystem allows, buffered
 * with the pages dropped after each read elsewhere) in large aligned pieces, several in flight,
 * straight into their final memory.
 *
 * Ranges close together in one file are merged into blocks (the gaps are read too); every block
 * is its own 2 MiB-aligned, huge-page-backed ArrayBuffer (at most `maxBlockBytes`, or one range
 * when a single range is larger; never above 4 GiB), pre-faulted with MADV_POPULATE_WRITE ahead of
 * its reads (no 4 KiB first-touch fault storm), and a range comes back as a view of its block. A
 * block keeps the file's alignment modulo 4096, so a tensor at an 8-aligned file offset is an
 * 8-aligned view; one at an odd offset is still exact, only not element-aligned.
 */
import { MoeStreamError } from "../errors.js";
import { resolveIoEngine, type IoEngine, type IoEngineInUse } from "../io/io-engine.js";
import { dropPageCache, measureReadEngine } from "../io/io-stats.js";
import { native } from "../native.js";
import { ProgressMeter, type Progress } from "@k3/native";

export interface ResidentRange {
  file: string;
  offset: number;
  length: number;
}

/** How destination pages are faulted in: by the reads (4 KiB or huge pages) or up front per block. */
export type Prefault = "none" | "huge" | "populate";

export interface ResidentLoadOptions {
  /** Read piece size (a multiple of 2 MiB; default 8 MiB). */
  pieceBytes?: number;
  /** Reads in flight (default 8). */
  readers?: number;
  ioEngine?: IoEngine;
  /** O_DIRECT where the filesystem allows (default true). */
  direct?: boolean;
  /** Default "populate". */
  prefault?: Prefault;
  /** Threads faulting pages in ahead of the reads under "populate" (default 0: one per core, at most 8). */
  populateThreads?: number;
  /** Largest block made of several ranges (default 1 GiB). */
  maxBlockBytes?: number;
  /** Ranges of one file at most this far apart share a block (default 64 KiB). */
  mergeGapBytes?: number;
  onProgress?: (p: Progress) => void;
  /** Test hook: the read after `after` reads fails (eio), comes back short, or has its O_DIRECT refused with EINVAL. */
  injectFault?: { after: number; kind: "eio" | "short" | "direct-einval" };
}

export interface ResidentLoadStats {
  /** Bytes of the ranges (what the caller asked for). */
  bytes: number;
  /** Bytes the blocks span (ranges + merged gaps). */
  blockBytes: number;
  /** Bytes the device transferred (aligned supersets included). */
  deviceBytes: number;
  blocks: number;
  reads: number;
  directReads: number;
  bufferedReads: number;
  /** Wall seconds of the native load (mapping, faulting, reading). */
  seconds: number;
  engine: IoEngineInUse;
  engineNote: string;
  prefault: Prefault;
  /** Populate threads run (0 unless prefault "populate"). */
  populateThreads: number;
  /** Summed over the populate threads: seconds spent faulting pages in (first touch). */
  populateSeconds: number;
  /** Wall seconds with at least one read in flight. */
  readBusySeconds: number;
  pieceBytes: number;
  readers: number;
  direct: boolean;
}

export interface ResidentLoad {
  /** The bytes of range i (a view of its block; no copy). */
  view(i: number): Uint8Array;
  readonly stats: ResidentLoadStats;
  /** The blocks as read: file, [start, end). For measuring the same reads again (loadCeiling). */
  readonly blocks: ReadonlyArray<{ file: string; start: number; end: number }>;
  /**
   * Gives the blocks' memory back to the kernel now, instead of when the last view is collected
   * (a model's close()). Views stay valid and read as zeros afterwards; calling it twice is harmless.
   */
  release(): void;
}

const MIB = 1 << 20;

/** Groups ranges into blocks: same file, sorted, gaps <= mergeGap, each block <= maxBlock unless one range is larger. */
export function planBlocks(ranges: readonly ResidentRange[], maxBlock: number, mergeGap: number): { blocks: { file: string; start: number; end: number }[]; of: Int32Array } {
  const order = ranges.map((_, i) => i).sort((a, b) => (ranges[a].file < ranges[b].file ? -1 : ranges[a].file > ranges[b].file ? 1 : ranges[a].offset - ranges[b].offset));
  const blocks: { file: string; start: number; end: number }[] = [];
  const of = new Int32Array(ranges.length);
  for (const i of order) {
    const r = ranges[i];
    if (!Number.isSafeInteger(r.offset) || !Number.isSafeInteger(r.length) || r.offset < 0 || r.length < 0) throw new MoeStreamError(`resident range ${i} of ${r.file}: bad offset ${r.offset} / length ${r.length}`);
    const end = r.offset + Math.max(1, r.length);
    const b = blocks[blocks.length - 1];
    if (b && b.file === r.file && r.offset - b.end <= mergeGap && Math.max(end, b.end) - b.start <= maxBlock) {
      b.end = Math.max(b.end, end);
    } else {
      blocks.push({ file: r.file, start: r.offset, end });
    }
    of[i] = blocks.length - 1;
  }
  return { blocks, of };
}

/** Blocks as the native loader takes them: the distinct files, then per block its file's index, start and end. */
function blockTable(blocks: ReadonlyArray<{ file: string; start: number; end: number }>) {
  const files = [...new Set(blocks.map((b) => b.file))];
  const index = new Map(files.map((f, i) => [f, i]));
  return {
    files,
    fileOf: Uint32Array.from(blocks, (b) => index.get(b.file)!),
    starts: Float64Array.from(blocks, (b) => b.start),
    ends: Float64Array.from(blocks, (b) => b.end),
  };
}

/** Reads `ranges` into resident memory (see the module comment). Errors name the file and offsets. */
export function loadResidentRanges(ranges: readonly ResidentRange[], opts: ResidentLoadOptions = {}): ResidentLoad {
  const pieceBytes = opts.pieceBytes ?? 8 * MIB;
  const readers = opts.readers ?? 8;
  const direct = opts.direct ?? true;
  const prefault = opts.prefault ?? "populate";
  if (!Number.isSafeInteger(pieceBytes) || pieceBytes < 2 * MIB || pieceBytes % (2 * MIB) !== 0 || pieceBytes > 1 << 30)
    throw new MoeStreamError(`resident load: piece of ${pieceBytes} bytes, expected a multiple of 2 MiB up to 1 GiB`);
  if (!Number.isInteger(readers) || readers < 1 || readers > 256) throw new MoeStreamError(`resident load: ${readers} readers, expected 1..256`);
  const populateThreads = opts.populateThreads ?? 0;
  if (!Number.isInteger(populateThreads) || populateThreads < 0 || populateThreads > 8) throw new MoeStreamError(`resident load: ${populateThreads} populate threads, expected 0 (one per core) .. 8`);
  const { engine } = resolveIoEngine(opts.ioEngine);
  const { blocks, of } = planBlocks(ranges, opts.maxBlockBytes ?? 1 << 30, opts.mergeGapBytes ?? 64 << 10);
  const table = blockTable(blocks);
  const total = ranges.reduce((a, r) => a + r.length, 0);
  const meter = new ProgressMeter("load", blocks.reduce((a, b) => a + b.end - b.start, 0));
  let seen = 0;
  const progress = opts.onProgress
    ? (done: number) => {
        meter.add(done - seen);
        seen = done;
        opts.onProgress!(meter.snapshot(`${blocks.length} blocks`));
      }
    : undefined;
  const r = readBlocks(
    "resident load",
    table,
    { pieceBytes, threads: readers, engine, direct, prefault, populateThreads, ...(opts.injectFault ? { fault: opts.injectFault.kind, faultAfter: opts.injectFault.after } : {}) },
    progress,
  );
  if (progress) opts.onProgress!(meter.snapshot(`${blocks.length} blocks`, true));
  const s = r.stats;
  return {
    blocks,
    stats: {
      bytes: total,
      blockBytes: blocks.reduce((a, b) => a + b.end - b.start, 0),
      deviceBytes: s.deviceBytes,
      blocks: blocks.length,
      reads: s.reads,
      directReads: s.directReads,
      bufferedReads: s.bufferedReads,
      seconds: s.seconds,
      engine: s.engine,
      engineNote: s.engineNote,
      prefault: s.prefault,
      populateThreads: s.populateThreads,
      populateSeconds: s.populateSeconds,
      readBusySeconds: s.readBusySeconds,
      pieceBytes,
      readers,
      direct,
    },
    release(): void {
      for (const block of r.blocks) native.releasePages(block);
    },
    view(i: number): Uint8Array {
      const b = of[i];
      const rg = ranges[i];
      return new Uint8Array(r.blocks[b], rg.offset - r.bases[b], rg.length);
    },
  };
}

/**
 * The ceiling of a load: the same blocks cut into the same pieces, read again by the same engine at
 * the same depth (O_DIRECT when `direct`, into a reused buffer: disk time only), each file's page
 * cache dropped first (POSIX_FADV_DONTNEED). GB = 1e9 bytes.
 */
export function loadCeiling(
  blocks: ReadonlyArray<{ file: string; start: number; end: number }>,
  opts: { pieceBytes?: number; readers?: number; engine: "io_uring" | "pread"; direct?: boolean },
): { bytes: number; seconds: number; gbPerSec: number; engine: "io_uring" | "pread"; cacheDrop: "fadvise-dontneed" } {
  const P = opts.pieceBytes ?? 8 * MIB;
  const reads: { file: string; offset: number; length: number }[] = [];
  for (const b of blocks) {
    const base = Math.floor(b.start / 4096) * 4096;
    for (let lo = base; lo < b.end; lo += P) {
      const from = Math.max(lo, b.start);
      const to = Math.min(lo + P, b.end);
      if (to > from) reads.push({ file: b.file, offset: from, length: to - from });
    }
  }
  for (const f of new Set(blocks.map((b) => b.file))) dropPageCache(f);
  const m = measureReadEngine(reads, { engine: opts.engine, queueDepth: opts.readers ?? 8, direct: opts.direct ?? true });
  return { bytes: m.bytes, seconds: m.seconds, gbPerSec: m.gbPerSec, engine: m.engine, cacheDrop: "fadvise-dontneed" };
}

/**
 * A sequential read of the same blocks into fresh memory of the same size: what any loader pays
 * (the disk plus first touch of memory it has not used yet), next to loadCeiling's disk alone. The
 * same pieces, engine and depth as the load, each file's page cache dropped first; `direct` O_DIRECT
 * with the destination's huge pages faulted by the reads themselves, else buffered reads (a `cat`
 * into memory). The memory is unmapped before it returns. GB = 1e9 bytes of the blocks.
 */
export function loadFreshCeiling(
  blocks: ReadonlyArray<{ file: string; start: number; end: number }>,
  opts: { pieceBytes?: number; readers?: number; engine: "io_uring" | "pread"; direct: boolean },
): { bytes: number; seconds: number; gbPerSec: number; direct: boolean } {
  const table = blockTable(blocks);
  for (const f of table.files) dropPageCache(f);
  const bytes = blocks.reduce((a, b) => a + b.end - b.start, 0);
  const r = readBlocks("fresh-memory read ceiling", table, { pieceBytes: opts.pieceBytes ?? 8 * MIB, threads: opts.readers ?? 8, engine: opts.engine, direct: opts.direct, prefault: "huge", discard: true });
  return { bytes, seconds: r.stats.seconds, gbPerSec: bytes / r.stats.seconds / 1e9, direct: opts.direct };
}

/**
 * Memory backing alone: `bytes` of fresh memory mapped like the load's (2 MiB-aligned, THP), faulted
 * in with MADV_POPULATE_WRITE by `threads` threads (0 = one per core), then unmapped. The lower
 * bound of any load into fresh memory, whatever the disk does. GB = 1e9 bytes.
 */
export function backingCeiling(bytes: number, threads = 0): { bytes: number; seconds: number; gbPerSec: number; threads: number } {
  if (!Number.isSafeInteger(bytes) || bytes < 0) throw new MoeStreamError(`backing ceiling: ${bytes} bytes`);
  let seconds: number;
  try {
    seconds = native.backingCeiling(bytes, threads, true);
  } catch (e) {
    throw new MoeStreamError(`backing ceiling: ${(e as Error).message}`, "io", { cause: e });
  }
  return { bytes, seconds, gbPerSec: seconds > 0 ? bytes / seconds / 1e9 : 0, threads };
}

/** The native block reader over a block table; its failures become MoeStreamError("io") naming `what`. */
function readBlocks(
  what: string,
  table: ReturnType<typeof blockTable>,
  options: Parameters<typeof native.loadResident>[4],
  progress?: Parameters<typeof native.loadResident>[5],
): ReturnType<typeof native.loadResident> {
  try {
    return native.loadResident(table.files, table.fileOf, table.starts, table.ends, options, progress);
  } catch (e) {
    throw new MoeStreamError(`${what}: ${(e as Error).message}`, "io", { cause: e });
  }
}
