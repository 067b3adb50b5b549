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
 */
import { closeSync, existsSync, fstatSync, fsyncSync, ftruncateSync, mkdirSync, openSync, readFileSync, readSync, renameSync, rmSync, statfsSync, statSync, writeFileSync, writeSync } from "node:fs";
import { basename, join } from "node:path";
import { crc32 } from "node:zlib";
import { openCheckpointIndex, type TensorInfo } from "./checkpoint.js";
import { ChecksumError, CheckpointError, PackError, formatBytes } from "./errors.js";
import { ProgressMeter, type Progress } from "./progress.js";

export const TRUNK_ALIGN = 4096;
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
  source: { shards: Array<{ name: string; size: number; mtimeMs: number }> };
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
   * Bytes moved per read/write call (default 64 MiB; at most 1 GiB, a multiple of 4096). Data is
   * copied one tensor at a time in pieces of this size through one reused buffer, whatever the
   * tensor or group size: Node's readSync/writeSync take < 2 GiB per call and a typed array
   * <= 4 GiB, while K3's global group (embed_tokens + lm_head) is 4.70 GB.
   */
  pieceBytes?: number;
}

export interface PackTrunkResult {
  manifest: TrunkManifest;
  file: string;
  manifestFile: string;
  /** Groups skipped because a previous run had finished them. */
  resumedGroups: number;
  writtenBytes: number;
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
export function planTrunk(checkpointDir: string, shardDirs?: readonly string[]): { groups: Array<TrunkGroup & { sources: TensorInfo[] }>; bytes: number; shards: TrunkManifest["source"]["shards"] } {
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
  return { groups, bytes: at, shards };
}

export const DEFAULT_PACK_PIECE = 64 << 20;
const MAX_PACK_PIECE = 1 << 30;

function checkPiece(piece: number): number {
  if (!Number.isInteger(piece) || piece < TRUNK_ALIGN || piece > MAX_PACK_PIECE || piece % TRUNK_ALIGN !== 0)
    throw new PackError(`pieceBytes must be a multiple of ${TRUNK_ALIGN} in [${TRUNK_ALIGN}, ${MAX_PACK_PIECE}], got ${piece}`);
  return piece;
}

/**
 * Calls `each(piece, at)` for the `length` bytes at `offset` of `fd`, in order, each piece at most
 * `buf.length` bytes (read into `buf`, valid only during the call); returns the bytes' crc32.
 */
function readPieces(fd: number, file: string, offset: number, length: number, buf: Uint8Array, each?: (piece: Uint8Array, at: number) => void): number {
  let crc = 0;
  for (let at = 0; at < length; at += buf.length) {
    const piece = buf.subarray(0, Math.min(buf.length, length - at));
    readExact(fd, piece, offset + at, file);
    crc = crc32(piece, crc);
    each?.(piece, at);
  }
  return crc >>> 0;
}

/** Reads `length` bytes at `offset` of an open fd, or fails naming the file. */
function readExact(fd: number, buf: Uint8Array, offset: number, file: string): void {
  let got = 0;
  while (got < buf.length) {
    const n = readSync(fd, buf, got, buf.length - got, offset + got);
    if (n === 0) throw new CheckpointError(file, `short read: ${got} of ${buf.length} bytes at offset ${offset} (file truncated?)`);
    got += n;
  }
}

const ZERO_BLOCK = 256 << 10;

/**
 * Writes `buf` at `position` except its all-zero 256 KiB blocks: those stay holes, which read as
 * zeros (the region was never written in this run, and the file was truncated before it), so a
 * sparse checkpoint packs into a sparse trunk. Real weights are one write per piece (the non-zero
 * runs coalesce). `zeros` is a never-written buffer >= ZERO_BLOCK: memcmp against zero pages.
 */
function writeNonZero(fd: number, buf: Uint8Array, position: number, zeros: Uint8Array): void {
  let run = -1;
  for (let o = 0; o < buf.length; o += ZERO_BLOCK) {
    const end = Math.min(o + ZERO_BLOCK, buf.length);
    const nonZero = Buffer.compare(buf.subarray(o, end), zeros.subarray(0, end - o)) !== 0;
    if (nonZero && run < 0) run = o;
    if (!nonZero && run >= 0) {
      writeExact(fd, buf.subarray(run, o), position + run);
      run = -1;
    }
  }
  if (run >= 0) writeExact(fd, buf.subarray(run), position + run);
}

function writeExact(fd: number, buf: Uint8Array, position: number): void {
  let off = 0;
  while (off < buf.length) off += writeSync(fd, buf, off, buf.length - off, position + off);
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
export function packTrunk(checkpointDir: string, outDir: string, opts: PackTrunkOptions = {}): PackTrunkResult {
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

  const out = openSync(partial, existsSync(partial) && resumedGroups > 0 ? "r+" : "w");
  const journal = openSync(journalFile, resumedGroups > 0 ? "a" : "w");
  const meter = new ProgressMeter("pack", plan.bytes, resumedBytes);
  const piece = new Uint8Array(checkPiece(opts.pieceBytes ?? DEFAULT_PACK_PIECE));
  const zeros = new Uint8Array(Math.min(piece.length, ZERO_BLOCK)); // never written
  let written = 0;
  const sourceFds = new Map<string, number>();
  const fdOf = (file: string) => {
    let fd = sourceFds.get(file);
    if (fd === undefined) sourceFds.set(file, (fd = openSync(file, "r")));
    return fd;
  };
  try {
    ftruncateSync(out, resumedBytes); // drop whatever a killed run left after the last journaled group
    for (const g of plan.groups.slice(resumedGroups)) {
      opts.beforeGroup?.(g.name);
      const crcs: Record<string, number> = {};
      const fail = (e: unknown): never => {
        const err = e as NodeJS.ErrnoException;
        const free = freeBytes(outDir);
        throw new PackError(
          err.code === "ENOSPC"
            ? `disk full writing ${g.name} of the trunk to ${partial}: needs ${formatBytes(plan.bytes - g.offset)} more, ${formatBytes(free)} free; free space and re-run to resume (${done.size} of ${plan.groups.length} groups kept)`
            : `cannot write ${g.name} of the trunk to ${partial}: ${err.message}`,
          err.code,
        );
      };
      const write = (data: Uint8Array, position: number) => {
        try {
          if (opts.injectEnospcAfterBytes !== undefined && written + data.length > opts.injectEnospcAfterBytes) {
            const e = new Error("ENOSPC: no space left on device, write (injected)") as NodeJS.ErrnoException;
            e.code = "ENOSPC";
            throw e;
          }
          writeNonZero(out, data, position, zeros);
        } catch (e) {
          fail(e);
        }
        written += data.length;
        meter.add(data.length);
      };
      // One tensor at a time, piece by piece, straight to its place; the alignment gaps stay holes
      // (the file was truncated to the last journaled group, so they read as zeros).
      for (const t of g.sources) {
        const at = g.offset + g.tensors[t.name].offset;
        crcs[t.name] = readPieces(fdOf(t.file), t.file, t.offset, t.byteLength, piece, (p, off) => {
          write(p, at + off);
          if (t.byteLength > piece.length) opts.onProgress?.(meter.snapshot(g.name));
        });
      }
      try {
        const end = g.offset + g.byteLength;
        if (fstatSync(out).size < end) ftruncateSync(out, end); // the group's tail padding
        fsyncSync(out);
        const line: JournalLine = { group: g.name, offset: g.offset, byteLength: g.byteLength, crcs, fingerprint };
        writeSync(journal, JSON.stringify(line) + "\n");
        fsyncSync(journal);
        done.set(g.name, line);
      } catch (e) {
        fail(e);
      }
      meter.add(g.byteLength - Object.values(g.tensors).reduce((a, t) => a + t.byteLength, 0)); // padding
      opts.onProgress?.(meter.snapshot(g.name));
    }
  } finally {
    for (const fd of sourceFds.values()) closeSync(fd);
    closeSync(journal);
    closeSync(out);
  }

  // Verify every group against the checksums taken from the source, then publish atomically.
  const groups: TrunkGroup[] = plan.groups.map((g) => {
    const crcs = done.get(g.name)!.crcs;
    const tensors: Record<string, TrunkTensor> = {};
    for (const [name, t] of Object.entries(g.tensors)) tensors[name] = { ...t, crc32: crcs[name] };
    return { name: g.name, layer: g.layer, offset: g.offset, byteLength: g.byteLength, tensors };
  });
  const manifest: TrunkManifest = { format: "k3-trunk", version: 1, align: TRUNK_ALIGN, file: TRUNK_FILE, bytes: plan.bytes, source: { shards: plan.shards }, groups };
  verifyTrunkFile(partial, manifest, opts.onProgress, piece);
  const manifestTmp = join(outDir, TRUNK_MANIFEST + ".partial");
  writeFileSync(manifestTmp, JSON.stringify(manifest, null, 1));
  const mfd = openSync(manifestTmp, "r");
  fsyncSync(mfd);
  closeSync(mfd);
  renameSync(partial, join(outDir, TRUNK_FILE));
  renameSync(manifestTmp, join(outDir, TRUNK_MANIFEST));
  rmSync(journalFile, { force: true });
  opts.onProgress?.({ ...meter.snapshot("done", true), phase: "pack" });
  return { manifest, file: join(outDir, TRUNK_FILE), manifestFile: join(outDir, TRUNK_MANIFEST), resumedGroups, writtenBytes: written };
}

function freeBytes(dir: string): number {
  try {
    const s = statfsSync(dir);
    return s.bavail * s.bsize;
  } catch {
    return 0;
  }
}

/** Re-reads the trunk file and checks every tensor's crc32; throws ChecksumError naming the tensor. */
export function verifyTrunkFile(file: string, manifest: TrunkManifest, onProgress?: (p: Progress) => void, buffer?: Uint8Array): void {
  const fd = openSync(file, "r");
  try {
    const size = fstatSync(fd).size;
    if (size !== manifest.bytes) throw new CheckpointError(file, `trunk file has ${size} bytes, the manifest says ${manifest.bytes}`);
    const meter = new ProgressMeter("verify", manifest.bytes);
    const piece = buffer ?? new Uint8Array(DEFAULT_PACK_PIECE);
    for (const g of manifest.groups) {
      // Tensor by tensor in pieces (a group may be larger than any one buffer).
      for (const [name, t] of Object.entries(g.tensors)) {
        const got = readPieces(fd, file, g.offset + t.offset, t.byteLength, piece);
        if (got !== t.crc32) throw new ChecksumError(file, name, t.crc32, got);
      }
      meter.add(g.byteLength);
      onProgress?.(meter.snapshot(g.name));
    }
  } finally {
    closeSync(fd);
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
    throw new CheckpointError(file, `not valid JSON (${(e as Error).message})`);
  }
  const bad = (what: string) => new CheckpointError(file, what);
  if (m?.format !== "k3-trunk" || m.version !== 1) throw bad(`format must be k3-trunk version 1`);
  if (m.align !== TRUNK_ALIGN) throw bad(`align must be ${TRUNK_ALIGN}, got ${m.align}`);
  if (m.file !== TRUNK_FILE) throw bad(`file must be ${TRUNK_FILE}`);
  if (!Number.isSafeInteger(m.bytes) || m.bytes < 0) throw bad("bytes must be a non-negative integer");
  if (!Array.isArray(m.groups)) throw bad("groups must be an array");
  let at = 0;
  for (const g of m.groups) {
    if (typeof g?.name !== "string") throw bad("a group has no name");
    if (g.offset !== at || !Number.isSafeInteger(g.byteLength) || g.byteLength % TRUNK_ALIGN !== 0)
      throw bad(`group ${g.name}: offset ${g.offset} / byteLength ${g.byteLength} break the 4 KiB tiling (expected offset ${at})`);
    if (g.layer !== null && !(Number.isInteger(g.layer) && g.layer >= 0)) throw bad(`group ${g.name}: layer must be a non-negative integer or null`);
    for (const [name, t] of Object.entries(g.tensors ?? {})) {
      if (!Number.isSafeInteger(t.offset) || !Number.isSafeInteger(t.byteLength) || t.offset < 0 || t.byteLength < 0 || t.offset + t.byteLength > g.byteLength)
        throw bad(`group ${g.name}: tensor ${name} range [${t.offset}, +${t.byteLength}) is outside the group`);
      if (!Array.isArray(t.shape) || typeof t.dtype !== "string" || !Number.isInteger(t.crc32)) throw bad(`group ${g.name}: tensor ${name} needs dtype, shape, crc32`);
    }
    at += g.byteLength;
  }
  if (at !== m.bytes) throw bad(`groups cover ${at} bytes, bytes says ${m.bytes}`);
  return m;
}
