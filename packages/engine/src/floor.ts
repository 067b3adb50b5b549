/**
 * The ceilings a run's floor is measured against (docs/io.md §2), measured in the same process
 * as the run they judge, with the run's own access pattern, before the model loads and again after
 * the run (Engine.floorAfterRun); the higher of the two is the ceiling, so a run cannot silently be
 * faster than the ceiling that judges it:
 *
 *  - memory: @k3/dense's memoryReadCeiling (a plain streaming sum) on 2 threads over a buffer of
 *    memCeilingBytes(): at least 512 MiB and 4x the last-level cache, so that it measures the DRAM the
 *    run streams its weights from (bench/stream-shapes.bench.ts on a Xeon VM with 480 MiB of L3:
 *    512 MiB read 35.6-36.3 GB/s where 2 and 4 GiB read 34.0-34.1), best of 8 passes of 512 MiB or of 3 larger ones (on the
 *    Zen 5 VM the first few ms of a pass ran at about half speed: 256 MiB x 3 measured 28-36 GB/s
 *    where 512 MiB x 5 and 1 GiB x 3 gave 53-59); the buffer is backed like the weights (2 MiB
 *    aligned, MADV_HUGEPAGE) and holds varied data;
 *  - disk, one ceiling per source the run reads (DISK_SOURCES), each with that source's files,
 *    request (piece) sizes, O_DIRECT-ness and queue depth, on the run's read engine (@k3/moe-stream
 *    measureReadEngine: the read pool driven from C, io_uring else pread threads, no JS in the
 *    loop), at most SOURCE_CEILING_BYTES per measurement:
 *      experts  routed experts spread over the MoE layers and ids (after the run: the experts the
 *               run was routed to, whose bytes the host may now cache as it did for the run), each
 *               split into the store's pieces, at the store's reader count;
 *      trunk    a contiguous window of ring chunks of each streamed layer of trunk.bin (at least two
 *               rounds of its reader count), in the ring's chunks, at its reader count;
 *      lm_head  the whole streamed lm_head, its row chunks in order, as every token reads it
 *               (RangeReader pieces, its reader count; up to HEAD_CEILING_BYTES): K3's is
 *               2.35 GB, and on the virtio disk here a 0.6 GB sample of it read faster than
 *               the run then streamed the whole (realwidth bench, 2026-12-02: ceiling samples up
 *               to 2.79 GB/s, head streamed at 2.05-2.08), so the whole is what is measured;
 *      embed    streamed embedding rows, one at a time (the run reads them one by one).
 *
 * Per layer kind the floor is max(bytes touched / memory ceiling, bytes read / the ceiling of the
 * source that kind reads: KIND_SOURCE); over a phase it is max(sum touched / memory ceiling,
 * sum over sources of bytes read from it / its ceiling).
 */
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { memoryReadCeiling } from "@k3/dense";
import { measureReadEngine, openCheckpointIndex, readTrunkManifest, TRUNK_FILE, type ExpertLocation } from "@k3/moe-stream";
import { splitPieces } from "@k3/moe-stream/sizing";
import { moeLayersOf, type ModelConfig } from "./config.js";
import { cgroupMemory, readMemInfo } from "./presets.js";
import { WeightError } from "./weights.js";
import type { ReportKind } from "./report.js";

/** Bytes of the memory-ceiling buffer. */
export const MEM_CEILING_BYTES = 512 * 2 ** 20;
/** Passes of the memory ceiling over MEM_CEILING_BYTES (the best is kept; larger buffers: 3). */
export const MEM_CEILING_REPS = 8;
/** Largest memory-ceiling buffer. */
export const MEM_CEILING_MAX_BYTES = 4 * 2 ** 30;
/** Most bytes one disk-source measurement reads (experts, trunk, lm_head). */
export const SOURCE_CEILING_BYTES = 0.6e9;
/** Most bytes the lm_head measurement reads (the whole head up to this: K3's is 2.35 GB). */
export const HEAD_CEILING_BYTES = 4e9;
/** Embedding rows one embed measurement reads. */
export const EMBED_CEILING_ROWS = 256;

/** Where a run's disk reads come from. */
export const DISK_SOURCES = ["experts", "trunk", "lm_head", "embed"] as const;
export type DiskSource = (typeof DISK_SOURCES)[number];

/** The one source each layer kind's bytes_read come from (null: the kind reads nothing). */
export const KIND_SOURCE: Record<ReportKind, DiskSource | null> = {
  embed: "embed",
  kda: "trunk",
  mla: "trunk",
  dense_mlp: "trunk",
  moe_trunk: "trunk",
  moe_experts: "experts",
  attn_res: null,
  lm_head: "lm_head",
};

/** How the run reads one source: its files, each request split into pieces, reads in flight, O_DIRECT. */
export interface ReadPattern {
  source: DiskSource;
  files: string[];
  /** Piece size each request is split into (0 = one read per request). */
  pieceBytes: number;
  /** Bytes of one request before splitting (an expert, a trunk chunk, a head chunk, an embedding row). */
  requestBytes: number;
  queueDepth: number;
  direct: boolean;
}

export interface Read {
  file: string;
  offset: number;
  length: number;
}

/** A source's pattern and the reads its ceiling measurement makes. */
export interface SourcePlan extends ReadPattern {
  what: string;
  reads: Read[];
}

/** What the run will read, known before the model loads (from the plan and the load options). */
export interface FloorSetup {
  dir: string;
  cfg: ModelConfig;
  shardDirs?: readonly string[];
  /** A partly downloaded checkpoint (--layers N): absent shards are allowed. */
  allowMissingShards?: boolean;
  /** Routed experts (null without MoE layers): the store's piece size, readers and O_DIRECT. */
  experts: { pieceBytes: number; readers: number; direct: boolean } | null;
  /** The streamed trunk (null when resident): packed trunk dir, streamed layers, ring chunk, readers. */
  trunk: { dir: string; streamedLayers: readonly number[]; chunkBytes: number; readers: number; direct: boolean } | null;
  /** The streamed embed/head (null when resident): lm_head rows per chunk, RangeReader pieces and readers. */
  embedHead: { headChunkRows: number; pieceBytes: number; readers: number; direct: boolean } | null;
}

/** file[offset, offset + length) cut into reads as ExpertStore and RangeReader cut it (their one formula). */
export { splitPieces };

/** `n` indices spread evenly over 0..len-1. */
function spread(len: number, n: number): number[] {
  const k = Math.max(0, Math.min(len, n));
  return Array.from({ length: k }, (_, i) => Math.floor((i * len) / k));
}

function expertsPlan(s: FloorSetup, cap: number, from?: { experts: readonly ExpertLocation[]; what: string }): SourcePlan | null {
  if (!s.experts) return null;
  const index = openCheckpointIndex(s.dir, { allowMissingShards: s.allowMissingShards, shardDirs: s.shardDirs });
  const layers = moeLayersOf(s.cfg);
  const all = layers.flatMap((l) => index.experts(l));
  if (all.length === 0) return null;
  const pool = from && from.experts.length > 0 ? from.experts : all;
  const per = all[0].byteLength;
  const picked = spread(pool.length, Math.max(1, Math.floor(cap / per))).map((i) => pool[i]);
  const reads: Read[] = [];
  for (const e of picked) for (const [offset, length] of splitPieces(e.offset, e.byteLength, s.experts.pieceBytes)) reads.push({ file: e.file, offset, length });
  return {
    source: "experts",
    what: from && from.experts.length > 0 ? `${picked.length} of the ${pool.length} experts ${from.what}` : `${picked.length} routed experts of ${all.length} (${layers.length} MoE layers)`,
    files: [...new Set(all.map((e) => e.file))],
    pieceBytes: s.experts.pieceBytes,
    requestBytes: per,
    queueDepth: s.experts.readers,
    direct: s.experts.direct,
    reads,
  };
}

/**
 * The after-run plans: the same as before for every source but the experts, which read (a spread
 * of) the experts the run was routed to (`routed`: locations), when there are any.
 */
export function afterPlans(s: FloorSetup, before: readonly SourcePlan[], routed: readonly ExpertLocation[], cap = SOURCE_CEILING_BYTES): SourcePlan[] {
  return before.map((p) => (p.source === "experts" && routed.length > 0 ? (expertsPlan(s, cap, { experts: [...routed].sort((a, b) => a.layer - b.layer || a.id - b.id), what: "the run was routed to" }) ?? p) : p));
}

function trunkPlan(s: FloorSetup, cap: number): SourcePlan | null {
  const t = s.trunk;
  if (!t || t.streamedLayers.length === 0) return null;
  const manifest = readTrunkManifest(t.dir);
  const file = join(t.dir, TRUNK_FILE);
  const streamed = new Set(t.streamedLayers);
  const groups = manifest.groups.filter((g) => g.layer !== null && streamed.has(g.layer));
  // Every chunk of every streamed layer, as the ring reads them (in file order within a layer).
  const chunks: Read[] = [];
  for (const g of groups)
    for (let off = 0; off < g.byteLength; off += t.chunkBytes) chunks.push({ file, offset: g.offset + off, length: Math.min(t.chunkBytes, g.byteLength - off) });
  if (chunks.length === 0) return null;
  // A contiguous window of chunks from each streamed layer (the ring reads layers whole, in order),
  // at least two rounds of the queue depth in all (a single partial round would measure its tail).
  const per = Math.max(1, Math.ceil(Math.max(cap / t.chunkBytes, 2 * t.readers) / groups.length));
  const reads: Read[] = [];
  for (const g of groups) {
    const mine = chunks.filter((c) => c.offset >= g.offset && c.offset < g.offset + g.byteLength);
    const start = Math.max(0, Math.floor((mine.length - per) / 2));
    reads.push(...mine.slice(start, start + per));
  }
  return {
    source: "trunk",
    what: `${reads.length} ring chunks of ${chunks.length} (${groups.length} streamed layers of ${TRUNK_FILE})`,
    files: [file],
    pieceBytes: t.chunkBytes,
    requestBytes: t.chunkBytes,
    queueDepth: t.readers,
    direct: t.direct,
    reads,
  };
}

function headInfo(s: FloorSetup, name: string): { file: string; offset: number } {
  const index = openCheckpointIndex(s.dir, { allowMissingShards: s.allowMissingShards, shardDirs: s.shardDirs });
  const info = index.tensors.get(s.cfg.tensorPrefix + name);
  if (!info) throw new WeightError(`${s.dir}: no tensor ${s.cfg.tensorPrefix + name} (the streamed embed/head's ceiling reads it)`);
  return { file: info.file, offset: info.offset };
}

function lmHeadPlan(s: FloorSetup): SourcePlan | null {
  const e = s.embedHead;
  if (!e) return null;
  const D = s.cfg.hiddenSize;
  const V = s.cfg.vocabSize;
  const head = headInfo(s, "lm_head.weight");
  const chunks = Math.ceil(V / e.headChunkRows);
  const chunkBytes = e.headChunkRows * D * 2;
  const reads: Read[] = [];
  // Every chunk in order, as each token reads them.
  const picked = Math.max(1, Math.min(chunks, Math.floor(HEAD_CEILING_BYTES / chunkBytes)));
  for (let c = 0; c < picked; c++) {
    const length = Math.min(e.headChunkRows, V - c * e.headChunkRows) * D * 2;
    for (const [offset, len] of splitPieces(head.offset + c * chunkBytes, length, e.pieceBytes)) reads.push({ file: head.file, offset, length: len });
  }
  return { source: "lm_head", what: `lm_head chunks 0..${picked - 1} of ${chunks} in order (${e.headChunkRows} rows each)`, files: [head.file], pieceBytes: e.pieceBytes, requestBytes: chunkBytes, queueDepth: e.readers, direct: e.direct, reads };
}

function embedPlan(s: FloorSetup): SourcePlan | null {
  const e = s.embedHead;
  if (!e) return null;
  const D = s.cfg.hiddenSize;
  const emb = headInfo(s, "model.embed_tokens.weight");
  const rows = spread(s.cfg.vocabSize, EMBED_CEILING_ROWS).map((i, k) => (i * 7919 + k * 104729) % s.cfg.vocabSize);
  const reads = rows.map((id) => ({ file: emb.file, offset: emb.offset + id * D * 2, length: D * 2 }));
  // The run awaits each row before the next: one read in flight.
  return { source: "embed", what: `${rows.length} embedding rows, one at a time`, files: [emb.file], pieceBytes: 0, requestBytes: D * 2, queueDepth: 1, direct: e.direct, reads };
}

/** The ceiling reads of every source the run will read (experts, trunk, lm_head, embed; those present). */
export function ceilingPlans(s: FloorSetup, cap = SOURCE_CEILING_BYTES): SourcePlan[] {
  return [expertsPlan(s, cap), trunkPlan(s, cap), lmHeadPlan(s), embedPlan(s)].filter((p): p is SourcePlan => p !== null);
}

/** One source's ceiling, before and after the run. GB = 1e9 bytes. */
export interface SourceCeiling {
  source: DiskSource;
  what: string;
  files: number;
  /** Bytes of one request and of its pieces (0 = unsplit), reads in flight, O_DIRECT. */
  request_bytes: number;
  piece_bytes: number;
  queue_depth: number;
  direct: boolean;
  /** Device bytes one measurement reads (aligned supersets included). */
  sample_bytes: number;
  /** The read engine the measurement ran on ("io_uring" or "pread"). */
  engine: string;
  before_gbps: number;
  /** Null until measured after the run (or when it could not be: Ceilings.after_note). */
  after_gbps: number | null;
  /** What the after-run measurement read when it differs from `what` (the experts the run used). */
  after_what: string | null;
}

/** The ceilings measured in the same run. */
export interface Ceilings {
  mem_before_gbps: number;
  mem_after_gbps: number | null;
  /** The memory-ceiling buffer (memCeilingBytes; absent in ceilings given rather than measured). */
  mem_buffer_bytes?: number;
  sources: SourceCeiling[];
  /** Why the after-run measurement is missing or partial (null when it was made in full). */
  after_note: string | null;
}

/** The ceiling used: the higher of before and after. */
export const ceilingGbps = (c: { before_gbps: number; after_gbps: number | null }): number => Math.max(c.before_gbps, c.after_gbps ?? 0);
export const memCeilingGbps = (c: Ceilings): number => Math.max(c.mem_before_gbps, c.mem_after_gbps ?? 0);

/** Test ceilings: one memory figure and one disk figure for every source. */
export function uniformCeilings(memGbps: number, diskGbps: number): Ceilings {
  const src = (source: DiskSource): SourceCeiling => ({ source, what: "given", files: 0, request_bytes: 0, piece_bytes: 0, queue_depth: 0, direct: true, sample_bytes: 0, engine: "given", before_gbps: diskGbps, after_gbps: null, after_what: null });
  return { mem_before_gbps: memGbps, mem_after_gbps: null, sources: DISK_SOURCES.map(src), after_note: null };
}

function measureSource(p: SourcePlan): { gbps: number; engine: string } {
  const r = measureReadEngine(p.reads, { engine: "io_uring", queueDepth: p.queueDepth, direct: p.direct });
  return { gbps: r.gbPerSec, engine: r.engine };
}

/** The last-level cache of CPU 0 in bytes (Linux sysfs), or 0 when unknown. */
export function lastLevelCacheBytes(root = "/"): number {
  const dir = join(root, "sys/devices/system/cpu/cpu0/cache");
  let best = { level: 0, bytes: 0 };
  try {
    for (const e of readdirSync(dir)) {
      if (!/^index\d+$/.test(e)) continue;
      const level = Number(readFileSync(join(dir, e, "level"), "utf8").trim());
      const m = /^(\d+)([KMG]?)$/.exec(readFileSync(join(dir, e, "size"), "utf8").trim());
      if (!m || !(level > best.level)) continue;
      best = { level, bytes: Number(m[1]) * { "": 1, K: 1024, M: 2 ** 20, G: 2 ** 30 }[m[2] as "" | "K" | "M" | "G"] };
    }
  } catch {
    return 0;
  }
  return best.bytes;
}

/**
 * The memory-ceiling buffer: 4x the last-level cache, at least MEM_CEILING_BYTES, at most
 * MEM_CEILING_MAX_BYTES, `maxBytes` (the engine passes half its plan: the buffer counts in the
 * process's peak RSS, which must stay within the plan) and a quarter of the memory available now
 * (2 MiB multiples).
 */
export function memCeilingBytes(availableBytes: number, llcBytes = lastLevelCacheBytes(), maxBytes = MEM_CEILING_MAX_BYTES): number {
  const want = Math.min(Math.max(MEM_CEILING_BYTES, 4 * llcBytes), MEM_CEILING_MAX_BYTES, Math.max(MEM_CEILING_BYTES, maxBytes));
  const fit = Math.max(MEM_CEILING_BYTES, Math.floor(availableBytes / 4));
  return Math.floor(Math.min(want, fit) / 2 ** 21) * 2 ** 21;
}

function measureMem(threads: number, bytes: number): number {
  return memoryReadCeiling({ bytes, threads, reps: bytes > MEM_CEILING_BYTES ? 3 : MEM_CEILING_REPS }).gbPerSec;
}

/** Bytes a source measurement allocates: one buffer of its largest read (+ alignment) per read in flight. */
export function sourceBufferBytes(p: SourcePlan): number {
  return p.queueDepth * (Math.max(...p.reads.map((r) => r.length)) + 8192);
}

/** Measures every ceiling before the run (a few seconds). */
export function measureCeilings(s: FloorSetup, o: { threads?: number; memMaxBytes?: number } = {}): { ceilings: Ceilings; plans: SourcePlan[] } {
  const plans = ceilingPlans(s);
  const memBytes = memCeilingBytes(readMemInfo().availableBytes, undefined, o.memMaxBytes);
  const mem = measureMem(o.threads ?? 2, memBytes);
  const sources = plans.map((p) => {
    const m = measureSource(p);
    return {
    source: p.source,
    what: p.what,
    files: p.files.length,
    request_bytes: p.requestBytes,
    piece_bytes: p.pieceBytes,
    queue_depth: p.queueDepth,
    direct: p.direct,
    sample_bytes: p.reads.reduce((a, r) => a + alignedLength(r, p.direct), 0),
    engine: m.engine,
    before_gbps: m.gbps,
    after_gbps: null,
    after_what: null,
    };
  });
  return { ceilings: { mem_before_gbps: mem, mem_after_gbps: null, mem_buffer_bytes: memBytes, sources, after_note: null }, plans };
}

function alignedLength(r: Read, direct: boolean): number {
  if (!direct) return r.length;
  const start = Math.floor(r.offset / 4096) * 4096;
  return Math.ceil((r.offset + r.length) / 4096) * 4096 - start;
}

/** Free bytes under this process's cgroup memory limit (v2 memory.max, else v1), or null when unlimited/unknown. */
export function cgroupHeadroomBytes(): number | null {
  const cg = cgroupMemory();
  return cg ? cg.limitBytes - cg.usageBytes : null;
}

/**
 * Measures every ceiling again after a run, into `c` (after_gbps, mem_after_gbps). Under a cgroup
 * memory limit a measurement whose buffers do not fit the headroom (with 64 MiB to spare) is
 * skipped and named in after_note: the run's memory is still held.
 */
export function measureCeilingsAfter(c: Ceilings, plans: readonly SourcePlan[], o: { threads?: number } = {}): Ceilings {
  const headroom = cgroupHeadroomBytes();
  const fits = (bytes: number) => headroom === null || bytes + 64 * 2 ** 20 < headroom;
  const skipped: string[] = [];
  let mem: number | null = null;
  // The same buffer as before the run when it still fits what is available now.
  const memBytes = Math.min(c.mem_buffer_bytes ?? MEM_CEILING_BYTES, memCeilingBytes(readMemInfo().availableBytes));
  if (fits(memBytes)) mem = measureMem(o.threads ?? 2, memBytes);
  else skipped.push("memory");
  const sources = c.sources.map((s) => {
    const p = plans.find((x) => x.source === s.source);
    if (!p) return s;
    if (!fits(sourceBufferBytes(p))) {
      skipped.push(s.source);
      return s;
    }
    return { ...s, after_gbps: measureSource(p).gbps, after_what: p.what !== s.what ? p.what : null };
  });
  const note = skipped.length ? `not re-measured after the run (their buffers exceed the cgroup headroom of ${((headroom ?? 0) / 1e9).toFixed(2)} GB): ${skipped.join(", ")}` : null;
  return { ...c, mem_after_gbps: mem, sources, after_note: note };
}
