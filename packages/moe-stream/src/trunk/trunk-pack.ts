/**
 * packTrunk: rewrites every non-expert weight of a checkpoint into ONE 4 KiB-aligned trunk file
 * (`trunk.bin`) plus a JSON manifest (`trunk.json`), so a layer's trunk loads with one aligned
 * read (or a few chunked ones) instead of dozens of small unaligned ones.
 *
 * Layout: one group per layer (every tensor of `...layers.{L}.` that is not a routed expert), then
 * a `global` group (embeddings, final norm, lm_head, output AttnRes). Each group starts on a 4 KiB
 * boundary and its length is padded to 4 KiB; tensors inside are 64-byte aligned. The manifest
 * records, per group, {offset, byteLength} and per tensor {offset (within the group), byteLength,
 * dtype, shape, crc32}. Vision-tower / mm_projector tensors are left out (text engine).
 *
 * Safety:
 *  - atomic: data goes to `trunk.bin.partial`; the manifest and the final name appear only after
 *    every group has been verified (re-read and checksummed);
 *  - resumable: each finished group is fsync'ed, then appended to `trunk.journal` (JSON lines,
 *    fsync'ed). A later run with the same source (shard names, sizes, mtimes) and the same plan
 *    skips the journaled groups;
 *  - disk full / any write error: a PackError naming the group and the free space; the journal
 *    stays, so the next run resumes.
 *
 * I/O: the source is read, and the trunk written and read back, with O_DIRECT (DirectFileReader,
 * DirectFileWriter), so neither passes through the page cache: on this VM a buffered GB costs
 * ~1.7 s of kernel CPU to read and ~1.6 s to write, which was most of a pack's time. The read-back
 * therefore checks what the disk returns, not a cached copy.
 */
import { closeSync, existsSync, fsync, fsyncSync, ftruncateSync, mkdirSync, openSync, readFileSync, readSync, renameSync, rmSync, statfsSync, statSync, writeFileSync, writeSync } from "node:fs";
import { basename, join } from "node:path";
import { createHash } from "node:crypto";
import { crc32 } from "node:zlib";
import { openCheckpointIndex, type TensorInfo } from "../store/checkpoint.js";
import { dtypeBits, isDtype } from "@k3/safetensors";
import { ChecksumError, CheckpointError, PackError, formatBytes } from "../errors.js";
import { ProgressMeter, type Progress } from "@k3/native";
import { DirectFileReader, alignedReadBuffer } from "../io/direct-read.js";
import { DIRECT_BUFFER_BYTES, DirectFileWriter, StagingBuffers } from "../io/direct-write.js";

const TRUNK_ALIGN = 4096;
const TENSOR_ALIGN = 64;
export const TRUNK_FILE = "trunk.bin";
export const TRUNK_MANIFEST = "trunk.json";
const JOURNAL = "trunk.journal";

export interface TrunkTensor {
  /** Offset within the group. */
  offset: number;
  byteLength: number;
  dtype: string;
  shape: number[];
  crc32: number;
}

export interface TrunkGroup {
  name: string;
  /** Layer number, or null for the global group. */
  layer: number | null;
  /** Absolute offset in trunk.bin (multiple of 4096). */
  offset: number;
  /** Padded to a multiple of 4096. */
  byteLength: number;
  tensors: Record<string, TrunkTensor>;
}

export interface TrunkManifest {
  format: "k3-trunk";
  version: 1;
  align: number;
  file: string;
  bytes: number;
  /**
   * The checkpoint it was packed from: its shards (name, size, mtime) and the sha256 of their
   * headers (checkTrunkSource compares names, sizes and the hash; absent in trunks packed before it).
   */
  source: { shards: Array<{ name: string; size: number; mtimeMs: number }>; headersSha256?: string };
  groups: TrunkGroup[];
}

export interface PackTrunkOptions {
  onProgress?: (p: Progress) => void;
  /** Further directories holding the checkpoint's shards (spread over several drives). */
  shardDirs?: readonly string[];
  /** Test hook: called before each group is written (e.g. to slow a child process down). */
  beforeGroup?: (group: string) => void;
  /** Test hook: a write fails with ENOSPC once this many bytes have been written in this run. */
  injectEnospcAfterBytes?: number;
  /**
   * Bytes moved per read call (default 64 MiB; at most 1 GiB, a multiple of 4096). Data is
   * copied one tensor at a time in pieces of this size through two reused buffers, whatever the
   * tensor or group size: Node's readSync/writeSync take < 2 GiB per call and a typed array
   * <= 4 GiB, while K3's global group (embed_tokens + lm_head) is 4.70 GB.
   */
  pieceBytes?: number;
  /**
   * false: buffered reads and writes (through the page cache) instead of O_DIRECT. Default true:
   * the source is read and the trunk written and read back with O_DIRECT, buffered only where the
   * filesystem refuses it (PackTrunkResult.io says which).
   */
  direct?: boolean;
}

export interface PackTrunkResult {
  manifest: TrunkManifest;
  file: string;
  manifestFile: string;
  /** Groups skipped because a previous run had finished them. */
  resumedGroups: number;
  writtenBytes: number;
  /** How the source was read and the trunk written (O_DIRECT, or buffered and why). */
  io: { read: string; write: string };
}

const LAYER_RE = /(?:^|\.)layers\.(\d+)\./;
const EXPERT_RE = /\.experts\.\d+\./;
const VISION_RE = /(^|\.)(vision_tower|mm_projector|multi_modal_projector)\./;

const alignUp = (n: number, a: number) => Math.ceil(n / a) * a;

function computeRank(name: string): number {
  if (/\.(input_layernorm|self_attention_res_(norm|proj))\./.test(name)) return 0;
  if (/\.self_attn\./.test(name)) return 1;
  if (/\.(post_attention_layernorm|mlp_res_(norm|proj))\./.test(name)) return 2;
  if (/\.block_sparse_moe\.gate\./.test(name)) return 3;
  if (/\.(mlp|block_sparse_moe)\./.test(name)) return 4;
  return 5;
}

/** The deterministic layout of the trunk for a checkpoint (no I/O beyond headers). */
export function planTrunk(checkpointDir: string, shardDirs?: readonly string[]): { groups: Array<TrunkGroup & { sources: TensorInfo[] }>; bytes: number; shards: TrunkManifest["source"]["shards"]; headersSha256: string } {
  const ckpt = openCheckpointIndex(checkpointDir, { shardDirs });
  const byGroup = new Map<string, { layer: number | null; tensors: TensorInfo[] }>();
  for (const t of ckpt.tensors.values()) {
    if (EXPERT_RE.test(t.name) || VISION_RE.test(t.name)) continue;
    const m = LAYER_RE.exec(t.name);
    const layer = m ? Number(m[1]) : null;
    const name = layer === null ? "global" : `layer.${layer}`;
    let g = byGroup.get(name);
    if (!g) byGroup.set(name, (g = { layer, tensors: [] }));
    g.tensors.push(t);
  }
  const names = [...byGroup.keys()].sort((a, b) => {
    const la = byGroup.get(a)!.layer ?? Infinity;
    const lb = byGroup.get(b)!.layer ?? Infinity;
    return la - lb;
  });
  let at = 0;
  const groups: Array<TrunkGroup & { sources: TensorInfo[] }> = [];
  for (const name of names) {
    const g = byGroup.get(name)!;
    // Compute order (attention-side norms, attention, FFN-side norms, FFN), then name: a consumer
    // streaming a layer chunk by chunk gets each tensor roughly when it needs it.
    const sources = [...g.tensors].sort((a, b) => computeRank(a.name) - computeRank(b.name) || (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    let inner = 0;
    const tensors: Record<string, TrunkTensor> = {};
    for (const t of sources) {
      inner = alignUp(inner, TENSOR_ALIGN);
      tensors[t.name] = { offset: inner, byteLength: t.byteLength, dtype: t.dtype, shape: t.shape, crc32: 0 };
      inner += t.byteLength;
    }
    const byteLength = alignUp(Math.max(inner, 1), TRUNK_ALIGN);
    groups.push({ name, layer: g.layer, offset: at, byteLength, tensors, sources });
    at += byteLength;
  }
  const shards = ckpt.files.map((f) => {
    const st = statSync(f);
    return { name: basename(f), size: st.size, mtimeMs: Math.floor(st.mtimeMs) };
  });
  return { groups, bytes: at, shards, headersSha256: headersSha256(ckpt.files) };
}

/** Largest safetensors header hashed (the scanners refuse larger ones too). */
const MAX_HEADER = 100 << 20;

/**
 * sha256 over every shard's header (its 8-byte length and the JSON: names, dtypes, shapes and
 * offsets of all its tensors), in shard order: what a trunk is tied to besides the shards' names
 * and sizes. Reads only the headers.
 */
function headersSha256(files: readonly string[]): string {
  const h = createHash("sha256");
  for (const f of files) {
    const fd = openSync(f, "r");
    try {
      const len = Buffer.alloc(8);
      if (readSync(fd, len, 0, 8, 0) !== 8) throw new CheckpointError(f, "shorter than a safetensors header");
      const n = Number(len.readBigUInt64LE(0));
      if (n > MAX_HEADER) throw new CheckpointError(f, `header of ${n} bytes (at most ${MAX_HEADER})`);
      const head = Buffer.alloc(n);
      if (readSync(fd, head, 0, n, 8) !== n) throw new CheckpointError(f, "truncated header");
      h.update(basename(f)).update(len).update(head);
    } finally {
      closeSync(fd);
    }
  }
  return h.digest("hex");
}

/**
 * Refuses a packed trunk whose source is not this checkpoint (a trunk packed from one model, run
 * with a changed copy of it, gave the original's tokens): the shard names and sizes it recorded,
 * and the sha256 of their headers, must be this checkpoint's. The shards' mtimes are not compared
 * (a copy keeps the bytes, not the times). Trunks packed before the hash was recorded are checked
 * on names and sizes only.
 */
export function checkTrunkSource(trunkDir: string, manifest: TrunkManifest, checkpointDir: string, shardDirs?: readonly string[]): void {
  const file = join(trunkDir, TRUNK_MANIFEST);
  const files = openCheckpointIndex(checkpointDir, { shardDirs }).files;
  const was = manifest.source?.shards;
  if (!Array.isArray(was)) throw new CheckpointError(file, "records no source shards: re-pack it from this checkpoint (k3 pack)");
  const now = files.map((f) => ({ name: basename(f), size: statSync(f).size }));
  const names = (xs: Array<{ name: string }>) => xs.map((x) => x.name).join(", ");
  if (names(was) !== names(now)) throw new CheckpointError(file, `packed from shards [${names(was)}], this checkpoint has [${names(now)}]: re-pack it (k3 pack)`);
  for (const [i, s] of now.entries()) {
    if (s.size !== was[i].size) throw new CheckpointError(file, `packed from ${s.name} of ${was[i].size} bytes, this checkpoint's is ${s.size} bytes: re-pack it (k3 pack)`);
  }
  const hash = manifest.source.headersSha256;
  if (hash !== undefined) {
    const got = headersSha256(files);
    if (got !== hash) throw new CheckpointError(file, `packed from shards whose headers hash to sha256 ${hash.slice(0, 16)}..., this checkpoint's hash to ${got.slice(0, 16)}... (other tensors or offsets): re-pack it (k3 pack)`);
  }
}

export const DEFAULT_PACK_PIECE = 64 << 20;
/** Bytes per read when a written group is read back and checksummed. */
const VERIFY_PIECE = 32 << 20;
const MAX_PACK_PIECE = 1 << 30;

function checkPiece(piece: number): number {
  if (!Number.isInteger(piece) || piece < TRUNK_ALIGN || piece > MAX_PACK_PIECE || piece % TRUNK_ALIGN !== 0)
    throw new PackError(`pieceBytes must be a multiple of ${TRUNK_ALIGN} in [${TRUNK_ALIGN}, ${MAX_PACK_PIECE}], got ${piece}`);
  return piece;
}

/** Zeros for the alignment gaps and padding between tensors (each below 4 KiB). */
const GAP_ZEROS = new Uint8Array(TRUNK_ALIGN);

/** Pushes `n` zero bytes at the writer's end. */
async function pushZeros(writer: DirectFileWriter, n: number): Promise<void> {
  for (; n > 0; n -= GAP_ZEROS.length) await writer.push(GAP_ZEROS.subarray(0, Math.min(n, GAP_ZEROS.length)), writer.end);
}

/**
 * crc32 of every tensor of `pieces` read from `reader` through the two buffers `bufs`, the read of
 * the next piece in flight while the current one is checksummed. `pieces` lists [key, offset,
 * length] with a tensor's pieces adjacent and in order; returns key -> crc32.
 */
async function crcPieces(reader: DirectFileReader, pieces: Array<[string, number, number]>, bufs: [Uint8Array, Uint8Array], onPiece?: (key: string, length: number) => void): Promise<Map<string, number>> {
  const crcs = new Map<string, number>();
  const load = (i: number) => reader.read(bufs[i & 1], pieces[i][1], pieces[i][2]);
  let next = pieces.length ? load(0) : null;
  for (let i = 0; i < pieces.length; i++) {
    const piece = await next!;
    next = i + 1 < pieces.length ? load(i + 1) : null;
    const key = pieces[i][0];
    crcs.set(key, crc32(piece, crcs.get(key) ?? 0) >>> 0);
    onPiece?.(key, piece.length);
  }
  return crcs;
}

/** The [key, offset, length] pieces of `length` bytes at `offset`, each at most `piece` bytes (a zero-length tensor is one empty piece). */
function piecesOf(key: string, offset: number, length: number, piece: number): Array<[string, number, number]> {
  const out: Array<[string, number, number]> = [];
  for (let at = 0; at < length || (length === 0 && at === 0); at += piece) {
    out.push([key, offset + at, Math.min(piece, length - at)]);
    if (length === 0) break;
  }
  return out;
}

/** Reads `group` back from the trunk file and compares every tensor's crc32 with `crcs` (ChecksumError naming the tensor). */
async function verifyGroupCrcs(reader: DirectFileReader, g: TrunkGroup, crcs: Record<string, number>, bufs: [Uint8Array, Uint8Array], piece: number): Promise<void> {
  const pieces = Object.entries(g.tensors).flatMap(([name, t]) => piecesOf(name, g.offset + t.offset, t.byteLength, piece));
  const got = await crcPieces(reader, pieces, bufs);
  for (const name of Object.keys(g.tensors)) if (got.get(name) !== crcs[name]) throw new ChecksumError(reader.file, name, crcs[name], got.get(name) ?? 0);
}

interface JournalLine {
  group: string;
  offset: number;
  byteLength: number;
  crcs: Record<string, number>;
  fingerprint: string;
}

function fingerprintOf(shards: TrunkManifest["source"]["shards"], bytes: number): string {
  return JSON.stringify({ shards, bytes, align: TRUNK_ALIGN, tensorAlign: TENSOR_ALIGN, v: 1 });
}

function readJournal(file: string, fingerprint: string): Map<string, JournalLine> {
  const done = new Map<string, JournalLine>();
  if (!existsSync(file)) return done;
  for (const line of readFileSync(file, "utf8").split("\n")) {
    if (!line.trim()) continue;
    let j: JournalLine;
    try {
      j = JSON.parse(line);
    } catch {
      break; // a torn last line from a kill: everything before it is good
    }
    if (j.fingerprint !== fingerprint) return new Map(); // another source or plan: start over
    done.set(j.group, j);
  }
  return done;
}

/**
 * Packs the trunk of `checkpointDir` into `outDir`. Resumes a killed run; returns the manifest.
 * Throws PackError on write errors (disk full included) and CheckpointError on bad sources.
 */
export async function packTrunk(checkpointDir: string, outDir: string, opts: PackTrunkOptions = {}): Promise<PackTrunkResult> {
  const plan = planTrunk(checkpointDir, opts.shardDirs);
  mkdirSync(outDir, { recursive: true });
  const partial = join(outDir, TRUNK_FILE + ".partial");
  const journalFile = join(outDir, JOURNAL);
  const fingerprint = fingerprintOf(plan.shards, plan.bytes);
  let done = existsSync(partial) ? readJournal(journalFile, fingerprint) : new Map<string, JournalLine>();
  if (done.size === 0 && existsSync(journalFile)) rmSync(journalFile);
  // Only a prefix of finished groups counts (they were written in order).
  let resumedBytes = 0;
  let resumedGroups = 0;
  for (const g of plan.groups) {
    const j = done.get(g.name);
    if (!j || j.offset !== g.offset || j.byteLength !== g.byteLength) break;
    resumedBytes = g.offset + g.byteLength;
    resumedGroups++;
  }
  done = new Map([...done].filter(([name]) => plan.groups.findIndex((g) => g.name === name) < resumedGroups));

  const out = openSync(partial, existsSync(partial) && resumedGroups > 0 ? "r+" : "w+");
  const journal = openSync(journalFile, resumedGroups > 0 ? "a" : "w");
  const meter = new ProgressMeter("pack", plan.bytes, resumedBytes);
  const pieceBytes = checkPiece(opts.pieceBytes ?? DEFAULT_PACK_PIECE);
  // Two source buffers (the next piece is read while the current one is checksummed and copied into
  // the writer's staging buffers) and two for reading a written group back.
  const readBufs: [Uint8Array, Uint8Array] = [alignedReadBuffer(pieceBytes), alignedReadBuffer(pieceBytes)];
  const verifyPiece = Math.min(pieceBytes, VERIFY_PIECE);
  const verifyBufs: [Uint8Array, Uint8Array] = [alignedReadBuffer(verifyPiece), alignedReadBuffer(verifyPiece)];
  let written = 0;
  let failure: unknown = null;
  const sources = new Map<string, DirectFileReader>();
  const sourceOf = (file: string) => {
    let r = sources.get(file);
    if (!r) sources.set(file, (r = new DirectFileReader(file, { direct: opts.direct })));
    return r;
  };
  const writer = new DirectFileWriter(out, partial, { staging: new StagingBuffers(DIRECT_BUFFER_BYTES, 4), direct: opts.direct, holes: true });
  const readBack = new DirectFileReader(partial, { direct: opts.direct });
  const packError = (g: { name: string; offset: number }, e: unknown): Error => {
    if (e instanceof PackError || e instanceof ChecksumError || e instanceof CheckpointError) return e;
    const err = e as NodeJS.ErrnoException;
    return new PackError(
      err.code === "ENOSPC"
        ? `disk full writing ${g.name} of the trunk to ${partial}: needs ${formatBytes(plan.bytes - g.offset)} more, ${formatBytes(freeBytes(outDir))} free; free space and re-run to resume (${done.size} of ${plan.groups.length} groups kept)`
        : `cannot write ${g.name} of the trunk to ${partial}: ${err.message}`,
      err.code,
      { cause: e },
    );
  };
  // Groups are read back (O_DIRECT: from the disk, not a cache) and journaled in order, each after
  // its own writes completed and an fsync, while the next group is already being copied.
  let journaled: Promise<void> = Promise.resolve();
  try {
    ftruncateSync(out, resumedBytes); // drop whatever a killed run left after the last journaled group
    ftruncateSync(out, plan.bytes); // the rest reads as zeros: the writer leaves all-zero blocks as holes
    await writer.skipTo(resumedBytes);
    for (const g of plan.groups.slice(resumedGroups)) {
      opts.beforeGroup?.(g.name);
      if (failure) throw failure;
      const crcs: Record<string, number> = {};
      try {
        // One tensor at a time, piece by piece, in file order: the writer is sequential.
        let next: Promise<Uint8Array> | null = null;
        let slot = 0;
        for (const t of g.sources) {
          const at = g.offset + g.tensors[t.name].offset;
          await pushZeros(writer, at - writer.end);
          const src = sourceOf(t.file);
          let crc = 0;
          next = t.byteLength ? src.read(readBufs[slot], t.offset, Math.min(pieceBytes, t.byteLength)) : null;
          for (let off = 0; off < t.byteLength; off += pieceBytes) {
            const piece = await next!;
            slot ^= 1;
            const nextOff = off + pieceBytes;
            next = nextOff < t.byteLength ? src.read(readBufs[slot], t.offset + nextOff, Math.min(pieceBytes, t.byteLength - nextOff)) : null;
            crc = crc32(piece, crc);
            if (opts.injectEnospcAfterBytes !== undefined && written + piece.length > opts.injectEnospcAfterBytes) {
              const e = new Error("ENOSPC: no space left on device, write (injected)") as NodeJS.ErrnoException;
              e.code = "ENOSPC";
              await next?.catch(() => {});
              throw e;
            }
            await writer.push(piece, at + off);
            written += piece.length;
            meter.add(piece.length);
            if (t.byteLength > pieceBytes) opts.onProgress?.(meter.snapshot(g.name));
          }
          crcs[t.name] = crc >>> 0;
        }
        await pushZeros(writer, g.offset + g.byteLength - writer.end);
        await writer.drain();
      } catch (e) {
        throw packError(g, e);
      }
      const group: TrunkGroup = { name: g.name, layer: g.layer, offset: g.offset, byteLength: g.byteLength, tensors: g.tensors };
      journaled = journaled
        .then(async () => {
          if (failure) throw failure;
          try {
            await new Promise<void>((res, rej) => fsync(out, (e) => (e ? rej(e) : res())));
            await verifyGroupCrcs(readBack, group, crcs, verifyBufs, verifyPiece);
            const line: JournalLine = { group: g.name, offset: g.offset, byteLength: g.byteLength, crcs, fingerprint };
            writeSync(journal, JSON.stringify(line) + "\n");
            fsyncSync(journal);
            done.set(g.name, line);
          } catch (e) {
            throw packError(g, e);
          }
          meter.add(g.byteLength - Object.values(g.tensors).reduce((a, x) => a + x.byteLength, 0)); // padding
          opts.onProgress?.(meter.snapshot(g.name));
        })
        .catch((e) => {
          failure ??= e;
        });
    }
    await journaled;
    if (failure) throw failure;
  } catch (e) {
    failure ??= e;
    // Nothing may still be writing to `out` when it is closed.
    await writer.drain().catch(() => {});
    await journaled;
    throw failure;
  } finally {
    for (const r of sources.values()) r.close();
    writer.close();
    readBack.close();
    closeSync(journal);
    closeSync(out);
  }
  const io: PackTrunkResult["io"] = {
    write: writer.direct ? "O_DIRECT" : `buffered (${writer.fallback ?? "asked"})`,
    read: [...sources.values()].some((r) => !r.isDirect) ? `buffered (${[...sources.values()].find((r) => !r.isDirect)!.fallback})` : "O_DIRECT",
  };

  // Verify every group against the checksums taken from the source, then publish atomically.
  const groups: TrunkGroup[] = plan.groups.map((g) => {
    const crcs = done.get(g.name)!.crcs;
    const tensors: Record<string, TrunkTensor> = {};
    for (const [name, t] of Object.entries(g.tensors)) tensors[name] = { ...t, crc32: crcs[name] };
    return { name: g.name, layer: g.layer, offset: g.offset, byteLength: g.byteLength, tensors };
  });
  const manifest: TrunkManifest = { format: "k3-trunk", version: 1, align: TRUNK_ALIGN, file: TRUNK_FILE, bytes: plan.bytes, source: { shards: plan.shards, headersSha256: plan.headersSha256 }, groups };
  // Groups written by this run were verified piece by piece; a resumed run re-reads the groups an
  // earlier run wrote (every crc32 against its journal).
  const resumed = new Set(plan.groups.slice(0, resumedGroups).map((g) => g.name));
  if (statSync(partial).size !== manifest.bytes) throw new CheckpointError(partial, `trunk file does not have the planned ${manifest.bytes} bytes`);
  if (resumed.size) await verifyGroups(partial, manifest, resumed, opts.onProgress, readBufs, opts.direct);
  const manifestTmp = join(outDir, TRUNK_MANIFEST + ".partial");
  writeFileSync(manifestTmp, JSON.stringify(manifest, null, 1));
  const mfd = openSync(manifestTmp, "r");
  fsyncSync(mfd);
  closeSync(mfd);
  renameSync(partial, join(outDir, TRUNK_FILE));
  renameSync(manifestTmp, join(outDir, TRUNK_MANIFEST));
  rmSync(journalFile, { force: true });
  opts.onProgress?.({ ...meter.snapshot("done", true), phase: "pack" });
  return { manifest, file: join(outDir, TRUNK_FILE), manifestFile: join(outDir, TRUNK_MANIFEST), resumedGroups, writtenBytes: written, io };
}

function freeBytes(dir: string): number {
  try {
    const s = statfsSync(dir);
    return s.bavail * s.bsize;
  } catch {
    return 0;
  }
}

/**
 * Re-reads the trunk file and checks every tensor's crc32 (the next piece read while the current
 * one is checksummed); rejects with ChecksumError naming the tensor.
 */
export async function verifyTrunkFile(file: string, manifest: TrunkManifest, onProgress?: (p: Progress) => void, buffers?: [Uint8Array, Uint8Array]): Promise<void> {
  const size = statSync(file).size;
  if (size !== manifest.bytes) throw new CheckpointError(file, `trunk file has ${size} bytes, the manifest says ${manifest.bytes}`);
  await verifyGroups(file, manifest, null, onProgress, buffers);
}

/** verifyTrunkFile of the groups named in `only` (null: all). */
async function verifyGroups(file: string, manifest: TrunkManifest, only: Set<string> | null, onProgress?: (p: Progress) => void, buffers?: [Uint8Array, Uint8Array], direct?: boolean): Promise<void> {
  const reader = new DirectFileReader(file, { direct });
  try {
    const groups = manifest.groups.filter((g) => !only || only.has(g.name));
    const meter = new ProgressMeter("verify", groups.reduce((a, g) => a + g.byteLength, 0));
    const bufs = buffers ?? [alignedReadBuffer(DEFAULT_PACK_PIECE), alignedReadBuffer(DEFAULT_PACK_PIECE)];
    // Tensor by tensor in pieces (a group may be larger than any one buffer).
    const piece = Math.min(bufs[0].length, bufs[1].length) - 4096;
    for (const g of groups) {
      const crcs = Object.fromEntries(Object.entries(g.tensors).map(([name, t]) => [name, t.crc32]));
      await verifyGroupCrcs(reader, g, crcs, bufs, piece);
      meter.add(g.byteLength);
      onProgress?.(meter.snapshot(g.name));
    }
  } finally {
    reader.close();
  }
}

/** Reads and validates trunk.json (hostile input: every field is checked). */
export function readTrunkManifest(dir: string): TrunkManifest {
  const file = join(dir, TRUNK_MANIFEST);
  if (!existsSync(file)) throw new CheckpointError(file, "missing trunk manifest (run packTrunk first)");
  let m: TrunkManifest;
  try {
    m = JSON.parse(readFileSync(file, "utf8"));
  } catch (e) {
    throw new CheckpointError(file, `not valid JSON (${(e as Error).message})`, { cause: e });
  }
  const bad = (what: string) => new CheckpointError(file, what);
  if (m?.format !== "k3-trunk" || m.version !== 1) throw bad(`format must be k3-trunk version 1`);
  if (m.align !== TRUNK_ALIGN) throw bad(`align must be ${TRUNK_ALIGN}, got ${m.align}`);
  if (m.file !== TRUNK_FILE) throw bad(`file must be ${TRUNK_FILE}`);
  if (!Number.isSafeInteger(m.bytes) || m.bytes < 0) throw bad("bytes must be a non-negative integer");
  if (!Array.isArray(m.groups)) throw bad("groups must be an array");
  let at = 0;
  const layers = new Set<number>();
  const isObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);
  for (const g of m.groups) {
    if (!isObject(g) || typeof g.name !== "string") throw bad("a group has no name");
    if (g.offset !== at || !Number.isSafeInteger(g.byteLength) || g.byteLength % TRUNK_ALIGN !== 0)
      throw bad(`group ${g.name}: offset ${g.offset} / byteLength ${g.byteLength} break the 4 KiB tiling (expected offset ${at})`);
    if (g.layer !== null && !(Number.isInteger(g.layer) && g.layer >= 0)) throw bad(`group ${g.name}: layer must be a non-negative integer or null`);
    if (g.layer !== null && layers.has(g.layer)) throw bad(`group ${g.name}: layer ${g.layer} has a group already`);
    if (g.layer !== null) layers.add(g.layer);
    if (!isObject(g.tensors)) throw bad(`group ${g.name}: tensors must be an object of name -> {offset, byteLength, dtype, shape, crc32}`);
    for (const [name, t] of Object.entries(g.tensors as Record<string, TrunkTensor>)) {
      if (!isObject(t)) throw bad(`group ${g.name}: tensor ${name} must be an object`);
      if (!Number.isSafeInteger(t.offset) || !Number.isSafeInteger(t.byteLength) || t.offset < 0 || t.byteLength < 0 || t.offset + t.byteLength > g.byteLength)
        throw bad(`group ${g.name}: tensor ${name} range [${t.offset}, +${t.byteLength}) is outside the group`);
      // The packer puts every tensor at a multiple of TENSOR_ALIGN: kernels read them in place as bf16/f32.
      if (t.offset % TENSOR_ALIGN !== 0) throw bad(`group ${g.name}: tensor ${name} offset ${t.offset} is not a multiple of ${TENSOR_ALIGN}`);
      if (typeof t.dtype !== "string" || !isDtype(t.dtype)) throw bad(`group ${g.name}: tensor ${name} dtype ${JSON.stringify(t.dtype)} is not a safetensors dtype`);
      if (!Array.isArray(t.shape) || !t.shape.every((d) => Number.isSafeInteger(d) && d >= 0)) throw bad(`group ${g.name}: tensor ${name} shape must be an array of non-negative integers`);
      const bits = t.shape.reduce((a, d) => a * d, 1) * dtypeBits(t.dtype);
      if (bits !== t.byteLength * 8) throw bad(`group ${g.name}: tensor ${name} is ${t.byteLength} bytes, its shape [${t.shape.join(", ")}] of ${t.dtype} needs ${bits / 8}`);
      if (!(Number.isInteger(t.crc32) && t.crc32 >= 0 && t.crc32 < 2 ** 32)) throw bad(`group ${g.name}: tensor ${name} crc32 must be a 32-bit unsigned integer`);
    }
    // The packer lays tensors out one after another: two views of the same bytes mean an edited manifest.
    const ranges = Object.entries(g.tensors as Record<string, TrunkTensor>).sort((a, b) => a[1].offset - b[1].offset);
    for (let i = 1; i < ranges.length; i++) {
      const [pn, p] = ranges[i - 1];
      const [n, t] = ranges[i];
      if (t.offset < p.offset + p.byteLength) throw bad(`group ${g.name}: tensors ${pn} and ${n} overlap ([${p.offset}, +${p.byteLength}) and [${t.offset}, +${t.byteLength}))`);
    }
    at += g.byteLength;
  }
  if (at !== m.bytes) throw bad(`groups cover ${at} bytes, bytes says ${m.bytes}`);
  return m;
}
