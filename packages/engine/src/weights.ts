/**
 * Weight access for the model: named tensors of a sharded safetensors checkpoint, checked against
 * the shapes the config implies, turned into the forms the kernels take (bf16 bits for GEMV,
 * f32 vectors for norms and gates).
 *
 * Reading is @k3/safetensors: a header-only index of the shards, strict validation, positioned reads.
 */
import { bf16ToF32, Linear } from "@k3/dense";
import { backingCeiling, dropPageCache, loadCeiling, loadFreshCeiling, loadResidentRanges, planBlocks, resolveIoEngine, type Prefault, type Progress, type ResidentLoad, type ResidentLoadStats } from "@k3/moe-stream";
import { openCheckpointSync, openSafetensorsSync, SafetensorsError, type Checkpoint } from "@k3/safetensors";
import { K3Error, EXIT_CONFIG, EXIT_IO } from "./errors.js";

/**
 * A checkpoint tensor that is missing or has the wrong dtype or shape for the config (exit 3,
 * config), or whose file cannot be read (`io`: exit 5).
 */
export class WeightError extends K3Error {
  constructor(message: string, kind: "config" | "io" = "config", options?: { cause?: unknown }) {
    super(message, kind === "io" ? EXIT_IO : EXIT_CONFIG, options);
  }
}

export interface TensorInfo {
  name: string;
  dtype: string;
  shape: number[];
  file: string;
  /** Absolute byte offset of the data in `file`. */
  offset: number;
  nbytes: number;
}

/** Read access to a checkpoint's tensors by name. */
export interface WeightSource {
  readonly dir: string;
  has(name: string): boolean;
  info(name: string): TensorInfo;
  names(): string[];
  /** The tensor's raw little-endian bytes (a fresh copy). */
  read(name: string): Uint8Array;
  /** `byteLength` bytes of the tensor from `byteOffset` (one positioned read), into `into` when given. */
  readRange?(name: string, byteOffset: number, byteLength: number, into?: Uint8Array): Uint8Array;
  /** Bytes read from disk so far. */
  readonly bytesRead: number;
  close(): void;
}

/** Adapts a @k3/safetensors Checkpoint (header-only index, positioned reads). */
class CheckpointSource implements WeightSource {
  bytesRead = 0;
  /** The open checkpoint, for the expert index (one header parse per load). */
  constructor(readonly dir: string, readonly ckpt: Checkpoint) {}
  has(name: string): boolean {
    return this.ckpt.has(name);
  }
  names(): string[] {
    return [...this.ckpt.names()];
  }
  info(name: string): TensorInfo {
    const t = this.ckpt.tryGet(name);
    if (!t) {
      // get() names the shard a tensor of a partly downloaded checkpoint is waiting in.
      wrap(this.dir, () => this.ckpt.get(name));
      throw new WeightError(`${this.dir}: tensor ${name} is missing from the checkpoint`);
    }
    return { name: t.name, dtype: t.dtype, shape: t.shape, file: t.file, offset: t.offset, nbytes: t.byteLength };
  }
  read(name: string): Uint8Array {
    this.info(name);
    const bytes = this.ckpt.readSync(name);
    this.bytesRead += bytes.length;
    return bytes;
  }
  readRange(name: string, byteOffset: number, byteLength: number, into?: Uint8Array): Uint8Array {
    const t = this.info(name);
    if (byteOffset < 0 || byteLength < 0 || byteOffset + byteLength > t.nbytes) {
      throw new WeightError(`${name}: range [${byteOffset}, ${byteOffset + byteLength}) is outside its ${t.nbytes} bytes`);
    }
    const bytes = this.ckpt.readRunSync({ file: t.file, offset: t.offset + byteOffset, byteLength }, into);
    this.bytesRead += byteLength;
    return bytes;
  }
  close(): void {
    this.ckpt.closeSync();
  }
}

/** Bytes per element of a safetensors dtype (1 for the byte-sized and sub-byte ones). */
function elementBytes(dtype: string): number {
  if (dtype === "F64" || dtype === "I64" || dtype === "U64") return 8;
  if (dtype === "F32" || dtype === "I32" || dtype === "U32") return 4;
  if (dtype === "BF16" || dtype === "F16" || dtype === "I16" || dtype === "U16") return 2;
  return 1;
}

/** `bytes`, or an aligned copy when its offset does not suit a typed view of `dtype`. */
function aligned(bytes: Uint8Array, dtype: string): Uint8Array {
  return bytes.byteOffset % elementBytes(dtype) === 0 ? bytes : bytes.slice();
}

/** How the resident weights are read (see preloadWeights). */
export interface PreloadOptions {
  /** Read pieces in MiB (a multiple of 2; default 8; env K3_LOAD_PIECE_MB). */
  pieceMb?: number;
  /** Reads in flight (default 8; env K3_LOAD_READERS). */
  readers?: number;
  /** O_DIRECT where the filesystem allows (default true). */
  direct?: boolean;
  /** Page pre-faulting (default "huge": the reads fault 2 MiB pages; env K3_LOAD_PREFAULT). */
  prefault?: Prefault;
  /** Threads faulting pages in ahead of the reads (default 0: one per core; env K3_LOAD_POPULATE_THREADS). */
  populateThreads?: number;
  /** Also measure the ceiling: the same reads by the same engine, page cache dropped, before and after the load. */
  ceiling?: boolean;
  onProgress?: (p: Progress) => void;
}

/** What a resident load did: bytes, time, the read setup and (optionally) the ceiling of the same reads. */
export interface PreloadResult {
  source: WeightSource;
  /** Gives the resident blocks' memory back to the kernel now (the views then read as zeros). */
  release: () => void;
  stats: ResidentLoadStats;
  /** GB/s of the same reads by the same engine, page cache dropped per file (best of before and after); null when not measured. */
  ceilingGbps: number | null;
  /** Wall seconds spent measuring the ceiling (not part of the load). */
  ceilingSeconds: number;
  /** GB/s of each ceiling run: [before, after] the load ([] when not measured). */
  ceilingRunsGbps: number[];
  /** The other ceilings of the same bytes, measured after the load (null when not measured): see FreshCeilings. */
  fresh: FreshCeilings | null;
}

/**
 * What a load into fresh memory is up against, beside the disk into a reused buffer (ceilingGbps),
 * all GB/s of the same block bytes: the same reads into fresh memory of the same size, O_DIRECT
 * (pages faulted by the reads) and buffered (a `cat` into memory), best of the two = `readGbps`;
 * fresh memory faulted in alone (MADV_POPULATE_WRITE, one thread per core) = `backingGbps`; and
 * `boundGbps` = min(disk, backing): a load that overlaps the two perfectly takes max of their times.
 */
export interface FreshCeilings {
  readDirectGbps: number;
  readBufferedGbps: number;
  readGbps: number;
  backingGbps: number;
  boundGbps: number;
  /** Wall seconds the three runs took. */
  seconds: number;
}

/**
 * A WeightSource whose tensors (those named at preload) are views of blocks read at disk speed
 * (@k3/moe-stream loadResidentRanges: large aligned pieces through the read pool, O_DIRECT, into
 * 2 MiB pages that the reads fault in). Names not preloaded fall through to the checkpoint.
 */
class ResidentSource implements WeightSource {
  bytesRead: number;
  constructor(private readonly inner: WeightSource, private readonly views: Map<string, Uint8Array>, preloadedBytes: number) {
    this.bytesRead = preloadedBytes;
  }
  get dir(): string {
    return this.inner.dir;
  }
  has(name: string): boolean {
    return this.inner.has(name);
  }
  names(): string[] {
    return this.inner.names();
  }
  info(name: string): TensorInfo {
    return this.inner.info(name);
  }
  read(name: string): Uint8Array {
    const v = this.views.get(name);
    if (!v) {
      const before = this.inner.bytesRead;
      const bytes = this.inner.read(name);
      this.bytesRead += this.inner.bytesRead - before;
      return bytes;
    }
    return aligned(v, this.inner.info(name).dtype);
  }
  readRange(name: string, byteOffset: number, byteLength: number, into?: Uint8Array): Uint8Array {
    const before = this.inner.bytesRead;
    const bytes = this.inner.readRange!(name, byteOffset, byteLength, into);
    this.bytesRead += this.inner.bytesRead - before;
    return bytes;
  }
  close(): void {
    this.inner.close();
  }
}

/** Block planning shared by the load and its ceiling (the moe-stream defaults). */
const RESIDENT_BLOCK_BYTES = 1 << 30;
const RESIDENT_MERGE_GAP = 64 << 10;

const envNumber = (k: string): number | undefined => (process.env[k] ? Number(process.env[k]) : undefined);

/**
 * Reads the named tensors of `src` into resident memory in one pass at disk speed and returns a
 * source serving them as views (no per-tensor reads, no copies; misaligned tensors only are copied).
 */
export function preloadWeights(src: WeightSource, names: readonly string[], opts: PreloadOptions = {}): PreloadResult {
  const ranges = names.map((n) => {
    const t = src.info(n);
    return { file: t.file, offset: t.offset, length: t.nbytes };
  });
  // "huge" by default: 2 MiB pages faulted by the O_DIRECT reads themselves. After a drop_caches on
  // this VM (free page reporting: the host backs every fresh page again) it loaded 7.88 GB at
  // 2.69-3.34 GB/s against 0.92-1.18 for populate threads faulting ahead of the reads (1 or 8);
  // with RAM full of cache 3.94 against 2.86-5.59 (bench/load.bench.ts, README "Resident load").
  const prefault = (opts.prefault ?? process.env.K3_LOAD_PREFAULT ?? "huge") as Prefault;
  if (!["none", "huge", "populate"].includes(prefault)) throw new WeightError(`load prefault ${JSON.stringify(prefault)}: expected none, huge or populate`);
  const pieceMb = opts.pieceMb ?? envNumber("K3_LOAD_PIECE_MB") ?? 8;
  const readers = opts.readers ?? envNumber("K3_LOAD_READERS") ?? 8;
  const populateThreads = opts.populateThreads ?? envNumber("K3_LOAD_POPULATE_THREADS") ?? 0;
  const ro = { pieceBytes: pieceMb * 2 ** 20, readers, direct: opts.direct ?? true, prefault };
  const measure = opts.ceiling === true && ranges.length > 0;
  // The ceiling reads the very blocks the load reads (same planner and pieces) with the engine it uses.
  const blocks = measure ? planBlocks(ranges, RESIDENT_BLOCK_BYTES, RESIDENT_MERGE_GAP).blocks : [];
  let engine: "io_uring" | "pread" = resolveIoEngine(undefined).engine === "pread" ? "pread" : "io_uring";
  let ceilingSeconds = 0;
  const ceiling = () => {
    const t0 = performance.now();
    try {
      return loadCeiling(blocks, { ...ro, engine });
    } catch (e) {
      if (engine === "pread") throw e;
      engine = "pread"; // io_uring blocked here: the load's "auto" runs pread threads too
      return loadCeiling(blocks, { ...ro, engine });
    } finally {
      ceilingSeconds += (performance.now() - t0) / 1000;
    }
  };
  const before = measure ? ceiling() : null;
  const t1 = performance.now();
  if (measure) for (const f of new Set(blocks.map((b) => b.file))) dropPageCache(f);
  ceilingSeconds += (performance.now() - t1) / 1000;
  let load: ResidentLoad;
  try {
    // A bar only for loads long enough to watch.
    const onProgress = ranges.reduce((a, r) => a + r.length, 0) >= 512 * 2 ** 20 ? opts.onProgress : undefined;
    load = loadResidentRanges(ranges, { ...ro, maxBlockBytes: RESIDENT_BLOCK_BYTES, mergeGapBytes: RESIDENT_MERGE_GAP, populateThreads, onProgress });
  } catch (e) {
    throw new WeightError(`${src.dir}: ${(e as Error).message}`, "io", { cause: e });
  }
  const after = measure ? ceiling() : null;
  // After the load (so its memory is still held and these get memory the way it did): the same
  // reads into fresh memory, then backing alone. Each unmaps before the next starts.
  let fresh: FreshCeilings | null = null;
  if (measure) {
    const t2 = performance.now();
    const bytes = load.stats.blockBytes;
    const run = (kind: "fresh-direct" | "fresh-buffered" | "backing") => ceilingRun(src.dir, blocks, kind, { ...ro, engine, populateThreads });
    const d = run("fresh-direct");
    const b = run("fresh-buffered");
    const back = run("backing");
    const disk = Math.max(...[before, after].map((x) => bytes / x!.seconds / 1e9));
    fresh = { readDirectGbps: d, readBufferedGbps: b, readGbps: Math.max(d, b), backingGbps: back, boundGbps: Math.min(disk, back), seconds: (performance.now() - t2) / 1000 };
    ceilingSeconds += fresh.seconds;
  }
  const views = new Map<string, Uint8Array>();
  names.forEach((n, i) => views.set(n, load.view(i)));
  // Same bytes (the blocks) over the ceiling run's time: the faster of the runs before and after.
  const runs = [before, after].filter((x) => x !== null);
  const ceilingGbps = runs.length > 0 ? Math.max(...runs.map((x) => load.stats.blockBytes / x!.seconds / 1e9)) : null;
  const ceilingRunsGbps = runs.map((x) => load.stats.blockBytes / x!.seconds / 1e9);
  return { source: new ResidentSource(src, views, load.stats.blockBytes), release: () => load.release(), stats: load.stats, ceilingGbps, ceilingSeconds, ceilingRunsGbps, fresh };
}

/** The load's ceilings, one at a time: "disk" (reused buffer, loadCeiling), the same reads into fresh memory, or backing alone. */
export type ResidentCeilingKind = "disk" | "fresh-direct" | "fresh-buffered" | "backing";

/** GB/s (of the block bytes) of one ceiling run over the load's blocks. */
function ceilingRun(dir: string, blocks: ReturnType<typeof planBlocks>["blocks"], kind: ResidentCeilingKind, o: { pieceBytes: number; readers: number; direct: boolean; engine: "io_uring" | "pread"; populateThreads: number }): number {
  const bytes = blocks.reduce((a, b) => a + b.end - b.start, 0);
  try {
    if (kind === "backing") return backingCeiling(bytes, o.populateThreads).gbPerSec;
    if (kind === "disk") return bytes / loadCeiling(blocks, o).seconds / 1e9;
    return loadFreshCeiling(blocks, { ...o, direct: kind === "fresh-direct" && o.direct }).gbPerSec;
  } catch (e) {
    throw new WeightError(`${dir}: ${(e as Error).message}`, "io", { cause: e });
  }
}

/**
 * One ceiling of the resident load of `names` without loading (benchmarks run each in its own
 * process from the same memory state): the blocks the load would read, GB/s of their bytes.
 * Same defaults and env knobs as preloadWeights.
 */
export function residentCeiling(src: WeightSource, names: readonly string[], kind: ResidentCeilingKind, opts: PreloadOptions = {}): { gbps: number; bytes: number; seconds: number } {
  const ranges = names.map((n) => {
    const t = src.info(n);
    return { file: t.file, offset: t.offset, length: t.nbytes };
  });
  const { blocks } = planBlocks(ranges, RESIDENT_BLOCK_BYTES, RESIDENT_MERGE_GAP);
  const engine: "io_uring" | "pread" = resolveIoEngine(undefined).engine === "pread" ? "pread" : "io_uring";
  const o = {
    pieceBytes: (opts.pieceMb ?? envNumber("K3_LOAD_PIECE_MB") ?? 8) * 2 ** 20,
    readers: opts.readers ?? envNumber("K3_LOAD_READERS") ?? 8,
    direct: opts.direct ?? true,
    engine,
    populateThreads: opts.populateThreads ?? envNumber("K3_LOAD_POPULATE_THREADS") ?? 0,
  };
  const t0 = performance.now();
  const gbps = ceilingRun(src.dir, blocks, kind, o);
  return { gbps, bytes: blocks.reduce((a, b) => a + b.end - b.start, 0), seconds: (performance.now() - t0) / 1000 };
}

/** Wraps @k3/safetensors' typed errors (a file missing, unreadable or malformed: io, exit 5) with the file named. */
function wrap<T>(what: string, fn: () => T): T {
  try {
    return fn();
  } catch (err) {
    if (err instanceof SafetensorsError) throw new WeightError(`${what}: ${err.message}`, "io", { cause: err });
    throw err;
  }
}

/**
 * Opens a sharded checkpoint (model.safetensors.index.json) or the *.safetensors files in `dir`.
 * `allowMissingShards`: a partly downloaded checkpoint (`--layers N`); a tensor of an absent shard fails naming it.
 * `shardDirs`: further directories holding shards (a checkpoint spread over several drives).
 */
export function openWeights(dir: string, options: { allowMissingShards?: boolean; shardDirs?: readonly string[] } = {}): WeightSource & { readonly ckpt: Checkpoint } {
  return wrap(dir, () => new CheckpointSource(dir, openCheckpointSync(dir, { allowMissingShards: options.allowMissingShards, shardDirs: options.shardDirs })));
}

/** Opens one safetensors file (e.g. expected.safetensors). */
export function openSafetensorsFile(file: string): WeightSource {
  return wrap(file, () => new CheckpointSource(file, openSafetensorsSync(file)));
}

// ---------------------------------------------------------------- typed views

function checkShape(info: TensorInfo, want: number[]): void {
  const got = info.shape;
  const same = got.length === want.length && got.every((x, i) => x === want[i]);
  if (!same) throw new WeightError(`tensor ${info.name}: shape ${JSON.stringify(got)} but the config implies ${JSON.stringify(want)}`);
}

const weightError = (message: string) => new WeightError(message);

/** A tensor as the layer packages take it (`{ dtype, shape, data }`, data zero-copy): they check it against their config. */
export function weightTensor(src: WeightSource, name: string): { dtype: string; shape: number[]; data: Uint8Array } {
  const info = src.info(name);
  return { dtype: info.dtype, shape: info.shape, data: src.read(name) };
}

/** Loads a 2-D weight as a @k3/dense `Linear` (bf16 or f32, zero-copy) after checking its shape against the config. */
export function loadMatrix(src: WeightSource, name: string, rows: number, cols: number): Linear {
  const info = src.info(name);
  checkShape(info, [rows, cols]);
  if (info.dtype !== "BF16" && info.dtype !== "F32") throw new WeightError(`tensor ${name}: dtype ${info.dtype}, expected BF16 or F32`);
  return new Linear(name, { dtype: info.dtype, shape: info.shape, data: src.read(name) }, rows, cols, weightError);
}

/** Loads a vector (any of the accepted shapes, e.g. [C,1,K] for a conv) as f32, checking the element count. */
export function loadVector(src: WeightSource, name: string, elements: number, shapes?: number[][]): Float32Array {
  const info = src.info(name);
  const count = info.shape.reduce((a, x) => a * x, 1);
  if (count !== elements || (shapes && !shapes.some((s) => s.length === info.shape.length && s.every((x, i) => x === info.shape[i])))) {
    throw new WeightError(`tensor ${name}: shape ${JSON.stringify(info.shape)} but the config implies ${shapes ? shapes.map((s) => JSON.stringify(s)).join(" or ") : elements + " elements"}`);
  }
  const bytes = aligned(src.read(name), info.dtype);
  if (info.dtype === "F32") return new Float32Array(bytes.buffer, bytes.byteOffset, elements);
  if (info.dtype === "BF16") return bf16ToF32(bytes.subarray(0, elements * 2));
  throw new WeightError(`tensor ${name}: dtype ${info.dtype}, expected F32 or BF16`);
}

