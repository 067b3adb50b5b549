/**
 * Checkpoint: one index over every tensor of a sharded checkpoint (or of one file, or of an
 * in-memory file), built from the headers alone, with grouping by layer/expert, contiguous runs
 * and positioned reads.
 */
import { closeSync, existsSync, openSync, readdirSync, statSync } from "node:fs";
import { open as openAsync, type FileHandle } from "node:fs/promises";
import { basename, join, relative, resolve } from "node:path";
import { DTYPES, type Dtype } from "./dtypes.js";
import { SafetensorsError, ioError } from "./errors.js";
import { preadExact, preadExactSync, bytesOf } from "./io.js";
import { resolveShard, shardRoots, unsafeShardReason } from "./paths.js";
import { tsBackend, type Backend, type IndexedShards, type IndexSummary, type Speculation } from "./backend.js";
import { KIND_EXPERT, KIND_GLOBAL, tableName, tableShape, type HeaderTable } from "./table.js";
import { classifyName } from "./classify.js";
import { nativeBinding, nativeLoadError } from "./native.js";

/** One tensor, with its absolute position in its file. */
export interface TensorInfo {
  name: string;
  dtype: Dtype;
  shape: number[];
  /** Path of the file that holds it. */
  file: string;
  /** Absolute byte offset in the file (8 + N + data_offsets[0]). */
  offset: number;
  byteLength: number;
  /** data_offsets as written in the header (relative to the data start). */
  dataOffsets: [number, number];
}

/** A contiguous byte range of one file holding one or more whole tensors. */
export interface TensorRun {
  file: string;
  offset: number;
  byteLength: number;
  tensors: TensorInfo[];
}

/** A routed expert of one layer. */
export interface ExpertInfo {
  id: number;
  layer: number;
  /** The file of its first tensor. */
  file: string;
  /** Start of its lowest tensor and the span to the end of its highest (one read when contiguous). */
  offset: number;
  byteLength: number;
  /** True when its tensors sit in one file with no foreign bytes between them. */
  contiguous: boolean;
  /** In file order. */
  tensors: TensorInfo[];
}

export interface LayerInfo {
  layer: number;
  /** Every tensor of the layer that is not a routed expert's (attention, norms, router, shared, fused), in file order. */
  trunk: TensorInfo[];
  /** The trunk as contiguous runs (one run in the K3 layout). */
  trunkRuns: TensorRun[];
  /** Routed expert ids, ascending. */
  expertIds: number[];
  /** Bytes of the routed experts. */
  expertBytes: number;
}

export interface OpenOptions {
  /** "native" (default when the addon loads) or "ts" (the pure-TS parser). */
  backend?: "native" | "ts";
  /** Called with each non-fatal finding (e.g. index total_size mismatch). */
  onWarning?: (message: string) => void;
  /**
   * A partly downloaded checkpoint: shards index.json lists but that are not on disk are left out
   * (a warning names them) instead of failing with MissingShard. The present shards are indexed and
   * cross-checked as usual (by the pure-TS parser); a tensor of an absent shard is not `has()`, and
   * `get()` names the shard to fetch. Default false.
   */
  allowMissingShards?: boolean;
  /**
   * Further directories holding shards (a checkpoint spread over several drives): each shard
   * index.json names is looked up in the checkpoint directory, then in these; it must be in
   * exactly one of them, and a symlink may not leave the directory holding it. Default none.
   */
  shardDirs?: readonly string[];
}

export type RunSpec = readonly string[] | { file: string; offset: number; byteLength: number };

const isDtype = (code: number): Dtype => DTYPES[code];

/** Where a shard's bytes live: on disk (read with fs) or in memory (views, no copy). */
type ShardSource = { kind: "file"; path: string } | { kind: "memory"; bytes: Uint8Array; path: string };

export class Checkpoint {
  /** The directory of a sharded checkpoint, or null for one file / a buffer. */
  readonly dir: string | null;
  /** Shard paths, in index order. */
  readonly files: readonly string[];
  /** Findings that did not stop the open (e.g. total_size mismatch). */
  readonly warnings: string[];
  /** Parser used: "native" or "ts". */
  readonly backend: "native" | "ts";
  /** Number of tensors. */
  readonly size: number;

  private readonly tables: HeaderTable[];
  private readonly bases: Float64Array;
  private readonly lookup: IndexedShards;
  private readonly sources: ShardSource[];
  private readonly indexMetadata: Record<string, unknown> | null;
  private fds: (number | undefined)[];
  private handles: (Promise<FileHandle> | undefined)[];
  private closed = false;
  private byLayer: Map<number, Int32Array> | null = null;
  /** Tensors of shards index.json lists but that are absent (allowMissingShards), by name. */
  private readonly absent: Map<string, string>;

  /** @internal use openCheckpoint / openSafetensors / parseSafetensors. */
  constructor(args: {
    dir: string | null;
    sources: ShardSource[];
    indexed: IndexedShards;
    backend: "native" | "ts";
    indexMetadata: Record<string, unknown> | null;
    warnings: string[];
    absent?: Map<string, string>;
  }) {
    this.dir = args.dir;
    this.absent = args.absent ?? new Map();
    this.sources = args.sources;
    this.files = args.sources.map((s) => s.path);
    this.lookup = args.indexed;
    this.tables = args.indexed.tables;
    this.backend = args.backend;
    this.indexMetadata = args.indexMetadata;
    this.warnings = args.warnings;
    this.bases = new Float64Array(this.tables.length + 1);
    for (let s = 0; s < this.tables.length; s++) this.bases[s + 1] = this.bases[s] + this.tables[s].count;
    this.size = this.bases[this.tables.length];
    this.fds = new Array(this.tables.length);
    this.handles = new Array(this.tables.length);
  }

  // ---------------------------------------------------------------- metadata

  /**
   * For one file: its `__metadata__` (string -> string, null-prototype object) or null.
   * For a sharded checkpoint: the "metadata" object of index.json (or null without an index).
   */
  get metadata(): Record<string, unknown> | null {
    if (this.dir !== null) return this.indexMetadata;
    return this.shardMetadata(0);
  }

  /** The `__metadata__` of shard s as a null-prototype object, or null. */
  shardMetadata(s: number): Record<string, string> | null {
    const pairs = this.tables[s]?.metadata;
    if (!pairs) return null;
    const out = Object.create(null) as Record<string, string>;
    for (const [k, v] of pairs) out[k] = v;
    return out;
  }

  /** Sum of tensor data bytes. */
  get dataBytes(): number {
    let total = 0;
    for (const t of this.tables) total += t.fileSize - 8 - t.headerLength;
    return total;
  }

  /** The raw column tables, one per shard (advanced use: no per-tensor objects). */
  get headerTables(): readonly HeaderTable[] {
    return this.tables;
  }

  // ---------------------------------------------------------------- lookup

  private locate(global: number): [number, number] {
    let lo = 0;
    let hi = this.tables.length - 1;
    while (lo < hi) {
      const mid = (lo + hi + 1) >> 1;
      if (this.bases[mid] <= global) lo = mid;
      else hi = mid - 1;
    }
    return [lo, global - this.bases[lo]];
  }

  private info(s: number, i: number): TensorInfo {
    const t = this.tables[s];
    const begin = t.begin[i];
    const end = t.end[i];
    return {
      name: tableName(t, i),
      dtype: isDtype(t.dtype[i]),
      shape: tableShape(t, i),
      file: this.sources[s].path,
      offset: 8 + t.headerLength + begin,
      byteLength: end - begin,
      dataOffsets: [begin, end],
    };
  }

  private infoGlobal(global: number): TensorInfo {
    const [s, i] = this.locate(global);
    return this.info(s, i);
  }

  has(name: string): boolean {
    return this.lookup.find(name) >= 0;
  }

  /** The tensor called `name`, or undefined. */
  tryGet(name: string): TensorInfo | undefined {
    const g = this.lookup.find(name);
    return g < 0 ? undefined : this.infoGlobal(g);
  }

  /** The tensor called `name`; throws TensorNotFound. */
  get(name: string): TensorInfo {
    const g = this.lookup.find(name);
    if (g < 0) {
      const shard = this.absent.get(name);
      if (shard !== undefined) throw new SafetensorsError("MissingShard", `the tensor is in shard ${JSON.stringify(shard)}, which is not on disk (partial checkpoint)`, { file: this.dir ?? this.files[0], tensor: name });
      throw new SafetensorsError("TensorNotFound", "no tensor of this name in the checkpoint", { file: this.dir ?? this.files[0], tensor: name });
    }
    return this.infoGlobal(g);
  }

  /** Every tensor, shard by shard in header order (objects are made as you iterate). */
  get tensors(): Iterable<TensorInfo> {
    const self = this;
    return {
      *[Symbol.iterator]() {
        for (let s = 0; s < self.tables.length; s++) for (let i = 0; i < self.tables[s].count; i++) yield self.info(s, i);
      },
    };
  }

  /** Every tensor name. */
  *names(): IterableIterator<string> {
    for (const t of this.tables) for (let i = 0; i < t.count; i++) yield tableName(t, i);
  }

  // ---------------------------------------------------------------- grouping

  /** Global indices of each layer's tensors (counting sort over the layer column). */
  private layerIndex(): Map<number, Int32Array> {
    if (this.byLayer) return this.byLayer;
    const counts = new Map<number, number>();
    for (const t of this.tables) for (let i = 0; i < t.count; i++) if (t.kind[i] !== KIND_GLOBAL) counts.set(t.layer[i], (counts.get(t.layer[i]) ?? 0) + 1);
    const out = new Map<number, Int32Array>();
    const fill = new Map<number, number>();
    for (const [l, c] of [...counts].sort((a, b) => a[0] - b[0])) {
      out.set(l, new Int32Array(c));
      fill.set(l, 0);
    }
    let base = 0;
    for (const t of this.tables) {
      for (let i = 0; i < t.count; i++) {
        if (t.kind[i] === KIND_GLOBAL) continue;
        const l = t.layer[i];
        const k = fill.get(l)!;
        out.get(l)![k] = base + i;
        fill.set(l, k + 1);
      }
      base += t.count;
    }
    this.byLayer = out;
    return out;
  }

  /** Layer numbers present, ascending. */
  layerNumbers(): number[] {
    return [...this.layerIndex().keys()];
  }

  /** Tensors outside numbered layers (embeddings, final norm, lm_head, vision, ...). */
  globals(): TensorInfo[] {
    const out: TensorInfo[] = [];
    for (let s = 0; s < this.tables.length; s++) {
      const t = this.tables[s];
      for (let i = 0; i < t.count; i++) if (t.kind[i] === KIND_GLOBAL) out.push(this.info(s, i));
    }
    return out;
  }

  /** One entry per numbered layer, ascending: its trunk tensors and runs, and its expert ids. */
  layers(): LayerInfo[] {
    return this.layerNumbers().map((l) => this.layer(l));
  }

  /** One layer (see layers()). */
  layer(layer: number): LayerInfo {
    const idx = this.layerIndex().get(layer);
    if (!idx) throw new SafetensorsError("TensorNotFound", `no tensor belongs to layer ${layer}`, { file: this.dir ?? this.files[0] });
    const trunk: TensorInfo[] = [];
    const ids = new Set<number>();
    let expertBytes = 0;
    for (const g of idx) {
      const [s, i] = this.locate(g);
      const t = this.tables[s];
      if (t.kind[i] === KIND_EXPERT) {
        ids.add(t.expert[i]);
        expertBytes += t.end[i] - t.begin[i];
      } else trunk.push(this.info(s, i));
    }
    sortByPosition(trunk, this.files);
    return { layer, trunk, trunkRuns: this.runs(trunk), expertIds: [...ids].sort((a, b) => a - b), expertBytes };
  }

  /**
   * The routed experts of a layer, by ascending id, each with its byte range taken from the
   * header (K3 stores experts in lexicographic id order, so never compute id x size).
   */
  experts(layer: number): ExpertInfo[] {
    const idx = this.layerIndex().get(layer);
    if (!idx) throw new SafetensorsError("TensorNotFound", `no tensor belongs to layer ${layer}`, { file: this.dir ?? this.files[0] });
    const groups = new Map<number, TensorInfo[]>();
    for (const g of idx) {
      const [s, i] = this.locate(g);
      const t = this.tables[s];
      if (t.kind[i] !== KIND_EXPERT) continue;
      let list = groups.get(t.expert[i]);
      if (!list) groups.set(t.expert[i], (list = []));
      list.push(this.info(s, i));
    }
    const out: ExpertInfo[] = [];
    for (const id of [...groups.keys()].sort((a, b) => a - b)) {
      const tensors = groups.get(id)!;
      sortByPosition(tensors, this.files);
      const runs = this.runs(tensors);
      const first = tensors[0];
      const last = tensors[tensors.length - 1];
      const sameFile = tensors.every((t) => t.file === first.file);
      out.push({
        id,
        layer,
        file: first.file,
        offset: first.offset,
        byteLength: sameFile ? last.offset + last.byteLength - first.offset : first.byteLength,
        contiguous: runs.length === 1,
        tensors,
      });
    }
    return out;
  }

  /** Groups tensors (infos or names) into maximal runs of adjacent bytes, in file order. */
  runs(tensors: readonly (TensorInfo | string)[]): TensorRun[] {
    const list = tensors.map((t) => (typeof t === "string" ? this.get(t) : t));
    sortByPosition(list, this.files);
    const out: TensorRun[] = [];
    for (const t of list) {
      const prev = out[out.length - 1];
      if (prev && prev.file === t.file && prev.offset + prev.byteLength === t.offset) {
        prev.byteLength += t.byteLength;
        prev.tensors.push(t);
      } else out.push({ file: t.file, offset: t.offset, byteLength: t.byteLength, tensors: [t] });
    }
    return out;
  }

  // ---------------------------------------------------------------- reads

  private shardOfFile(file: string): number {
    let s = this.files.indexOf(file);
    if (s < 0) s = this.files.findIndex((f) => basename(f) === file);
    if (s < 0) throw new SafetensorsError("InvalidArgument", `no shard ${JSON.stringify(file)} in this checkpoint`, { file: this.dir ?? undefined });
    return s;
  }

  /** Resolves a run spec (tensor names that form one contiguous range, or a raw range) to a shard range. */
  private resolveRun(spec: RunSpec): { s: number; offset: number; byteLength: number } {
    if (Array.isArray(spec)) {
      const runs = this.runs(spec as readonly string[]);
      if (runs.length !== 1) {
        throw new SafetensorsError("InvalidArgument", `readRun: the ${spec.length} tensors form ${runs.length} separate byte ranges, not one`, { file: this.dir ?? this.files[0] });
      }
      return { s: this.shardOfFile(runs[0].file), offset: runs[0].offset, byteLength: runs[0].byteLength };
    }
    const r = spec as { file: string; offset: number; byteLength: number };
    const s = this.shardOfFile(r.file);
    const size = this.tables[s].fileSize;
    if (!Number.isSafeInteger(r.offset) || !Number.isSafeInteger(r.byteLength) || r.offset < 0 || r.byteLength < 0 || r.offset + r.byteLength > size) {
      throw new SafetensorsError("InvalidArgument", `readRun: range [${r.offset}, +${r.byteLength}) is not inside the ${size}-byte file`, { file: this.files[s] });
    }
    return { s, offset: r.offset, byteLength: r.byteLength };
  }

  private checkOpen(): void {
    if (this.closed) throw new SafetensorsError("Closed", "the checkpoint is closed", { file: this.dir ?? this.files[0] });
  }

  private target(buffer: ArrayBufferView, bufferOffset: number, length: number, what: string): Uint8Array {
    const bytes = bytesOf(buffer);
    if (!Number.isSafeInteger(bufferOffset) || bufferOffset < 0 || bufferOffset + length > bytes.byteLength) {
      throw new SafetensorsError("BufferTooSmall", `${what} needs ${length} bytes at buffer offset ${bufferOffset} but the buffer has ${bytes.byteLength}`, { file: this.dir ?? this.files[0] });
    }
    return bytes;
  }

  private fd(s: number): number {
    let fd = this.fds[s];
    if (fd === undefined) {
      try {
        fd = openSync(this.files[s], "r");
      } catch (err) {
        throw ioError(this.files[s], "opening", err);
      }
      this.fds[s] = fd;
    }
    return fd;
  }

  private handle(s: number): Promise<FileHandle> {
    let h = this.handles[s];
    if (!h) {
      h = openAsync(this.files[s], "r").catch((err: unknown) => {
        this.handles[s] = undefined;
        throw ioError(this.files[s], "opening", err);
      });
      this.handles[s] = h;
    }
    return h;
  }

  private copySync(s: number, position: number, length: number, into: Uint8Array, at: number): void {
    this.checkOpen();
    const src = this.sources[s];
    if (src.kind === "memory") {
      into.set(src.bytes.subarray(position, position + length), at);
      return;
    }
    preadExactSync(this.fd(s), src.path, into, at, length, position);
  }

  private async copy(s: number, position: number, length: number, into: Uint8Array, at: number): Promise<void> {
    this.checkOpen();
    const src = this.sources[s];
    if (src.kind === "memory") {
      into.set(src.bytes.subarray(position, position + length), at);
      return;
    }
    await preadExact(await this.handle(s), src.path, into, at, length, position);
  }

  /** Reads a tensor's bytes into `buffer` at `bufferOffset`; returns the written bytes as a view. */
  async readInto(name: string, buffer: ArrayBufferView, bufferOffset = 0): Promise<Uint8Array> {
    const t = this.get(name);
    const s = this.shardOfFile(t.file);
    const bytes = this.target(buffer, bufferOffset, t.byteLength, `tensor ${JSON.stringify(name)}`);
    await this.copy(s, t.offset, t.byteLength, bytes, bufferOffset);
    return bytes.subarray(bufferOffset, bufferOffset + t.byteLength);
  }

  readIntoSync(name: string, buffer: ArrayBufferView, bufferOffset = 0): Uint8Array {
    const t = this.get(name);
    const s = this.shardOfFile(t.file);
    const bytes = this.target(buffer, bufferOffset, t.byteLength, `tensor ${JSON.stringify(name)}`);
    this.copySync(s, t.offset, t.byteLength, bytes, bufferOffset);
    return bytes.subarray(bufferOffset, bufferOffset + t.byteLength);
  }

  /** A fresh copy of a tensor's bytes (8-aligned, so any typed view of it works). */
  async read(name: string): Promise<Uint8Array> {
    const t = this.get(name);
    const out = new Uint8Array(t.byteLength);
    await this.copy(this.shardOfFile(t.file), t.offset, t.byteLength, out, 0);
    return out;
  }

  readSync(name: string): Uint8Array {
    const t = this.get(name);
    const out = new Uint8Array(t.byteLength);
    this.copySync(this.shardOfFile(t.file), t.offset, t.byteLength, out, 0);
    return out;
  }

  /**
   * One read for a run of adjacent tensors (e.g. a K3 expert's 6 tensors, 17,547,264 bytes) or a
   * raw {file, offset, byteLength} range. With `buffer`, reads into it at `bufferOffset`.
   */
  async readRun(spec: RunSpec, buffer?: ArrayBufferView, bufferOffset = 0): Promise<Uint8Array> {
    const r = this.resolveRun(spec);
    const bytes = buffer ? this.target(buffer, bufferOffset, r.byteLength, "readRun") : new Uint8Array(r.byteLength);
    const at = buffer ? bufferOffset : 0;
    await this.copy(r.s, r.offset, r.byteLength, bytes, at);
    return bytes.subarray(at, at + r.byteLength);
  }

  readRunSync(spec: RunSpec, buffer?: ArrayBufferView, bufferOffset = 0): Uint8Array {
    const r = this.resolveRun(spec);
    const bytes = buffer ? this.target(buffer, bufferOffset, r.byteLength, "readRun") : new Uint8Array(r.byteLength);
    const at = buffer ? bufferOffset : 0;
    this.copySync(r.s, r.offset, r.byteLength, bytes, at);
    return bytes.subarray(at, at + r.byteLength);
  }

  /**
   * Zero-copy bytes of a tensor of an in-memory checkpoint (parseSafetensors). For files, use
   * read()/readInto() (or mapTensor() from the native addon).
   */
  view(name: string): Uint8Array {
    const t = this.get(name);
    const s = this.shardOfFile(t.file);
    const src = this.sources[s];
    if (src.kind !== "memory") throw new SafetensorsError("InvalidArgument", "view() needs an in-memory checkpoint; use read() or readInto() for files", { file: t.file, tensor: name });
    this.checkOpen();
    return src.bytes.subarray(t.offset, t.offset + t.byteLength);
  }

  /**
   * Zero-copy bytes of a tensor of a file checkpoint: an mmap-backed external ArrayBuffer of
   * exactly this tensor (unmapped when collected), so tensors of shards larger than 4 GiB work.
   * Needs the native addon. Truncating the file while a mapping is alive raises SIGBUS on access.
   */
  map(name: string): Uint8Array {
    const t = this.get(name);
    const s = this.shardOfFile(t.file);
    this.checkOpen();
    const src = this.sources[s];
    if (src.kind === "memory") return this.view(name);
    if (!nativeBinding) throw new SafetensorsError("InvalidArgument", `map() needs the native addon (${nativeLoadError})`, { file: t.file, tensor: name });
    return new Uint8Array(nativeBinding.mapRange(src.path, t.offset, t.byteLength));
  }

  /** Closes the shard files. Reads after close throw Closed. */
  async close(): Promise<void> {
    this.closeSync();
  }

  closeSync(): void {
    if (this.closed) return;
    this.closed = true;
    for (const fd of this.fds) if (fd !== undefined) closeSync(fd);
    const handles = this.handles.filter((h): h is Promise<FileHandle> => !!h);
    for (const h of handles) h.then((x) => x.close()).catch(() => undefined);
    this.fds = [];
    this.handles = [];
  }
}

function sortByPosition(list: TensorInfo[], files: readonly string[]): void {
  const rank = new Map(files.map((f, i) => [f, i]));
  list.sort((a, b) => rank.get(a.file)! - rank.get(b.file)! || a.offset - b.offset);
}

// ---------------------------------------------------------------- opening

const INDEX_NAME = "model.safetensors.index.json";

function findIndexFile(dir: string): string | null {
  const direct = join(dir, INDEX_NAME);
  if (existsSync(direct)) return direct;
  let entries: string[];
  try {
    entries = readdirSync(dir);
  } catch (err) {
    throw ioError(dir, "listing the checkpoint directory", err);
  }
  const candidates = entries.filter((f) => f.endsWith(".safetensors.index.json")).sort();
  return candidates.length === 1 ? join(dir, candidates[0]) : null;
}

function listShardFiles(dir: string): string[] {
  const files = readdirSync(dir)
    .filter((f) => f.endsWith(".safetensors"))
    .sort()
    .map((f) => join(dir, f))
    .filter((p) => statSync(p).isFile());
  if (files.length === 0) throw new SafetensorsError("NoTensorFiles", "the directory holds no model.safetensors.index.json and no *.safetensors file", { file: dir });
  return files;
}

function parseIndexMetadata(index: IndexSummary, indexFile: string): Record<string, unknown> | null {
  if (index.metadataJson === null) return null;
  const v = JSON.parse(index.metadataJson) as unknown;
  return v && typeof v === "object" ? (v as Record<string, unknown>) : null;
}

function totalSizeWarning(meta: Record<string, unknown> | null, tables: HeaderTable[], indexFile: string): string | null {
  if (!meta || !("total_size" in meta)) return null;
  let total = 0;
  for (const t of tables) total += t.fileSize - 8 - t.headerLength;
  const declared = meta.total_size;
  if (declared !== total) return `${indexFile}: metadata.total_size is ${JSON.stringify(declared)} but the shards hold ${total} tensor bytes`;
  return null;
}

interface Plan {
  dir: string;
  indexFile: string | null;
  index: IndexSummary | null;
  shards: string[];
}

function planSync(dir: string, backend: Backend, shardDirs?: readonly string[]): Plan {
  const { abs, indexFile } = locate(dir);
  if (!indexFile) return { dir: abs, indexFile: null, index: null, shards: listShardFiles(abs) };
  const index = backend.parseIndex(indexFile);
  const roots = shardRoots(abs, shardDirs);
  const shards = index.shards.map((name) => resolveShard(roots, name, indexFile));
  return { dir: abs, indexFile, index, shards };
}

function finish(plan: Plan, indexed: IndexedShards, backend: Backend, options: OpenOptions, absent?: Map<string, string>): Checkpoint {
  const warnings: string[] = [];
  let meta: Record<string, unknown> | null = null;
  if (plan.index && plan.indexFile) {
    meta = parseIndexMetadata(plan.index, plan.indexFile);
    const w = totalSizeWarning(meta, indexed.tables, plan.indexFile);
    if (w) warnings.push(w);
  }
  for (const w of warnings) options.onWarning?.(w);
  return new Checkpoint({
    dir: plan.dir,
    sources: plan.shards.map((path) => ({ kind: "file", path })),
    indexed,
    backend: backend.kind,
    indexMetadata: meta,
    warnings,
    absent,
  });
}

/**
 * The plan of a partly downloaded checkpoint (allowMissingShards): index.json parsed by the TS
 * parser, restricted to the shards on disk; the absent shards' tensors are remembered by name.
 */
function partialPlanSync(dir: string, shardDirs?: readonly string[]): { plan: Plan; absent: Map<string, string>; warning: string | null } {
  const { abs, indexFile } = locate(dir);
  if (!indexFile) return { plan: { dir: abs, indexFile: null, index: null, shards: listShardFiles(abs) }, absent: new Map(), warning: null };
  const index = tsBackend.parseIndex(indexFile);
  const roots = shardRoots(abs, shardDirs);
  const { names, shardOf } = index.state as { names: string[]; shardOf: Uint32Array };
  const keep: number[] = []; // old shard id -> new id, or -1
  const shards: string[] = [];
  const missing: string[] = [];
  index.shards.forEach((name) => {
    const unsafe = unsafeShardReason(name);
    if (unsafe) throw new SafetensorsError("UnsafeShardPath", `shard path ${JSON.stringify(name)} is refused: ${unsafe}`, { file: indexFile });
    if (!roots.some((r) => existsSync(join(r.dir, name)))) {
      keep.push(-1);
      missing.push(name);
      return;
    }
    keep.push(shards.length);
    shards.push(resolveShard(roots, name, indexFile));
  });
  const absent = new Map<string, string>();
  const keptNames: string[] = [];
  const keptShard: number[] = [];
  for (let k = 0; k < names.length; k++) {
    const s = keep[shardOf[k]];
    if (s < 0) absent.set(names[k], index.shards[shardOf[k]]);
    else {
      keptNames.push(names[k]);
      keptShard.push(s);
    }
  }
  if (shards.length === 0) throw new SafetensorsError("MissingShard", `none of the ${index.shards.length} shards weight_map lists is on disk`, { file: indexFile });
  const partial: IndexSummary = { ...index, shards: shards.map((p) => relative(abs, p)), entries: keptNames.length, state: { names: keptNames, shardOf: Uint32Array.from(keptShard) } };
  const warning = missing.length
    ? `${indexFile}: ${missing.length} of ${index.shards.length} shards are not on disk (${missing.slice(0, 3).join(", ")}${missing.length > 3 ? ", ..." : ""}); their ${absent.size} tensors are unavailable`
    : null;
  return { plan: { dir: abs, indexFile, index: partial, shards }, absent, warning };
}

function openPartialSync(dir: string, options: OpenOptions): Checkpoint {
  const { plan, absent, warning } = partialPlanSync(dir, options.shardDirs);
  const indexed = tsBackend.indexShardsSync(plan.shards, plan.index, plan.indexFile ?? undefined);
  // total_size covers the whole checkpoint: it cannot match a partial one.
  const ck = finish({ ...plan, index: plan.index && { ...plan.index, metadataJson: null } }, indexed, tsBackend, options, absent);
  if (warning) {
    ck.warnings.push(warning);
    options.onWarning?.(warning);
  }
  return ck;
}

/** Plain *.safetensors files of the directory (no symlinks): the shards a speculative pass may read. */
function speculativeCandidates(abs: string): string[] {
  return readdirSync(abs, { withFileTypes: true })
    .filter((d) => d.isFile() && d.name.endsWith(".safetensors"))
    .map((d) => join(abs, d.name))
    .sort();
}

/** The directory and its index file, or null when there is none (stat errors are IoError). */
function locate(dir: string): { abs: string; indexFile: string | null } {
  const abs = resolve(dir);
  let st;
  try {
    st = statSync(abs);
  } catch (err) {
    throw ioError(abs, "opening the checkpoint", err);
  }
  if (!st.isDirectory()) throw new SafetensorsError("InvalidArgument", "openCheckpoint needs a directory; use openSafetensors for one file", { file: abs });
  return { abs, indexFile: findIndexFile(abs) };
}

/**
 * With the native parser, index.json and the headers of every plain *.safetensors file are
 * parsed in one parallel pass; the shard paths are then checked exactly as in the sequential
 * plan, and a shard that was not a candidate (subdirectory, symlink) falls back to that plan.
 */
function finishSpeculation(spec: Speculation, abs: string, indexFile: string, candidates: string[], shardDirs?: readonly string[]): { plan: Plan; indexed: IndexedShards } | { plan: Plan; indexed: null } {
  if (spec.error) {
    spec.dispose();
    throw spec.error;
  }
  const index = spec.index!;
  let shards: string[];
  try {
    const roots = shardRoots(abs, shardDirs);
    shards = index.shards.map((name) => resolveShard(roots, name, indexFile));
  } catch (err) {
    spec.dispose();
    throw err;
  }
  const plan: Plan = { dir: abs, indexFile, index, shards };
  const order = shards.map((p) => candidates.indexOf(p));
  if (order.some((i) => i < 0)) {
    spec.dispose();
    return { plan, indexed: null };
  }
  return { plan, indexed: spec.finish(Uint32Array.from(order), shards, indexFile) };
}

export function openCheckpointWith(backend: Backend, dir: string, options: OpenOptions = {}): Checkpoint {
  if (options.allowMissingShards) return openPartialSync(dir, options);
  const { abs, indexFile } = locate(dir);
  if (indexFile && backend.speculate) {
    const candidates = speculativeCandidates(abs);
    const r = finishSpeculation(backend.speculate(indexFile, candidates), abs, indexFile, candidates, options.shardDirs);
    if (r.indexed) return finish(r.plan, r.indexed, backend, options);
  }
  const plan = planSync(dir, backend, options.shardDirs);
  const indexed = backend.indexShardsSync(plan.shards, plan.index, plan.indexFile ?? undefined);
  return finish(plan, indexed, backend, options);
}

export async function openCheckpointAsyncWith(backend: Backend, dir: string, options: OpenOptions = {}): Promise<Checkpoint> {
  if (options.allowMissingShards) return openPartialSync(dir, options);
  const { abs, indexFile } = locate(dir);
  if (indexFile && backend.speculateAsync) {
    const candidates = speculativeCandidates(abs);
    const r = finishSpeculation(await backend.speculateAsync(indexFile, candidates), abs, indexFile, candidates, options.shardDirs);
    if (r.indexed) return finish(r.plan, r.indexed, backend, options);
  }
  const plan = planSync(dir, backend, options.shardDirs);
  const indexed = await backend.indexShards(plan.shards, plan.index, plan.indexFile ?? undefined);
  return finish(plan, indexed, backend, options);
}

export function openFileWith(backend: Backend, file: string): Checkpoint {
  const abs = resolve(file);
  const indexed = backend.indexShardsSync([abs], null);
  return new Checkpoint({ dir: null, sources: [{ kind: "file", path: abs }], indexed, backend: backend.kind, indexMetadata: null, warnings: [] });
}

export async function openFileAsyncWith(backend: Backend, file: string): Promise<Checkpoint> {
  const abs = resolve(file);
  const indexed = await backend.indexShards([abs], null);
  return new Checkpoint({ dir: null, sources: [{ kind: "file", path: abs }], indexed, backend: backend.kind, indexMetadata: null, warnings: [] });
}

export function parseBufferWith(backend: Backend, bytes: Uint8Array, name = "<memory>"): Checkpoint {
  const indexed = backend.parseFile(bytes, name);
  return new Checkpoint({ dir: null, sources: [{ kind: "memory", bytes, path: name }], indexed, backend: backend.kind, indexMetadata: null, warnings: [] });
}

export { classifyName };
