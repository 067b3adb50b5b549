/**
 * A header-only view of a (sharded) safetensors checkpoint: where every tensor lives.
 *
 * Stopgap until @k3/safetensors' `openCheckpoint` is wired in: it reads `model.safetensors.index.json`
 * (or a lone `model.safetensors`), validates each shard's header (length bound, UTF-8 JSON,
 * offsets tiling the data section exactly, file size) and keeps absolute byte offsets.
 * It never reads tensor data.
 */
import { closeSync, existsSync, fstatSync, openSync, readFileSync, readSync } from "node:fs";
import { basename, join, resolve } from "node:path";
import { CheckpointError } from "./errors.js";

export type Dtype = "F64" | "F32" | "BF16" | "F16" | "U8" | "I8" | "I64" | "I32" | "U16" | "I16" | "F8_E4M3" | "F8_E8M0" | "BOOL" | "U32" | "U64";
const DTYPE_BYTES: Record<string, number> = {
  F64: 8, I64: 8, U64: 8, F32: 4, I32: 4, U32: 4, BF16: 2, F16: 2, U16: 2, I16: 2,
  U8: 1, I8: 1, BOOL: 1, F8_E4M3: 1, F8_E5M2: 1, F8_E8M0: 1,
};
const MAX_HEADER = 100_000_000;

/** One tensor: its shard and absolute byte range in that file. */
export interface TensorInfo {
  name: string;
  file: string;
  dtype: Dtype;
  shape: number[];
  /** Absolute offset in `file` (8 + header length + data_offsets[0]). */
  offset: number;
  byteLength: number;
}

/** One routed expert: all of its tensors as ONE contiguous byte range of one shard. */
export interface ExpertLocation {
  layer: number;
  id: number;
  file: string;
  offset: number;
  byteLength: number;
  /** Tensor suffix (`w1.weight_packed`, ...) -> offset relative to the expert start, dtype, shape. */
  tensors: Record<string, { offset: number; byteLength: number; dtype: Dtype; shape: number[] }>;
}

export interface CheckpointIndex {
  dir: string;
  files: string[];
  tensors: Map<string, TensorInfo>;
  /** Experts of `layer` ordered by id; [] for a dense layer. Throws if an expert is not contiguous. */
  experts(layer: number): ExpertLocation[];
}

/** Reads and validates one shard header. */
export function readShardHeader(file: string): TensorInfo[] {
  if (!existsSync(file)) throw new CheckpointError(file, "missing shard (listed by the index but not on disk)");
  const fd = openSync(file, "r");
  try {
    const size = fstatSync(fd).size;
    if (size < 8) throw new CheckpointError(file, `truncated: ${size} bytes, a safetensors file has at least 8`);
    const lenBuf = Buffer.alloc(8);
    readSync(fd, lenBuf, 0, 8, 0);
    const n = Number(lenBuf.readBigUInt64LE(0));
    if (n > MAX_HEADER) throw new CheckpointError(file, `header length ${n} exceeds ${MAX_HEADER}`);
    if (8 + n > size) throw new CheckpointError(file, `truncated: header needs ${8 + n} bytes, file has ${size}`);
    const header = Buffer.alloc(n);
    readSync(fd, header, 0, n, 8);
    let json: unknown;
    try {
      json = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(header));
    } catch (e) {
      throw new CheckpointError(file, `header is not valid UTF-8 JSON (${(e as Error).message})`);
    }
    if (typeof json !== "object" || json === null || Array.isArray(json))
      throw new CheckpointError(file, "header is not a JSON object");
    const out: TensorInfo[] = [];
    for (const [name, v] of Object.entries(json as Record<string, unknown>)) {
      if (name === "__metadata__") continue;
      const e = v as { dtype?: unknown; shape?: unknown; data_offsets?: unknown };
      const width = typeof e?.dtype === "string" ? DTYPE_BYTES[e.dtype] : undefined;
      if (width === undefined) throw new CheckpointError(file, `tensor ${name}: unknown dtype ${JSON.stringify(e?.dtype)}`);
      if (!Array.isArray(e.shape) || !e.shape.every((d) => Number.isSafeInteger(d) && d >= 0))
        throw new CheckpointError(file, `tensor ${name}: shape must be an array of non-negative integers`);
      const offs = e.data_offsets;
      if (!Array.isArray(offs) || offs.length !== 2 || !offs.every((d) => Number.isSafeInteger(d) && d >= 0) || offs[1] < offs[0])
        throw new CheckpointError(file, `tensor ${name}: data_offsets must be [begin, end] with begin <= end`);
      const elements = (e.shape as number[]).reduce((a, b) => a * b, 1);
      if (offs[1] - offs[0] !== elements * width)
        throw new CheckpointError(file, `tensor ${name}: ${offs[1] - offs[0]} bytes for shape [${e.shape}] of ${e.dtype} (expected ${elements * width})`);
      out.push({ name, file, dtype: e.dtype as Dtype, shape: e.shape as number[], offset: 8 + n + offs[0], byteLength: offs[1] - offs[0] });
    }
    const sorted = [...out].sort((a, b) => a.offset - b.offset || a.byteLength - b.byteLength);
    let at = 8 + n;
    for (const t of sorted) {
      if (t.offset !== at) throw new CheckpointError(file, `tensor ${t.name}: offsets leave a gap or overlap at byte ${at}`);
      at += t.byteLength;
    }
    if (at !== size)
      throw new CheckpointError(file, at > size ? `truncated: the header describes ${at} bytes but the file has ${size}` : `${size - at} trailing bytes after the last tensor`);
    return out;
  } finally {
    closeSync(fd);
  }
}

const EXPERT_RE = /^(.*\.layers\.(\d+)\.(?:block_sparse_moe|mlp)\.experts\.(\d+))\.(.+)$/;

/** Opens a checkpoint directory (index + shards, or one model.safetensors). */
export function openCheckpointIndex(dir: string): CheckpointIndex {
  const root = resolve(dir);
  const indexFile = join(root, "model.safetensors.index.json");
  let files: string[];
  if (existsSync(indexFile)) {
    let idx: { weight_map?: Record<string, string> };
    try {
      idx = JSON.parse(readFileSync(indexFile, "utf8"));
    } catch (e) {
      throw new CheckpointError(indexFile, `not valid JSON (${(e as Error).message})`);
    }
    if (!idx.weight_map || typeof idx.weight_map !== "object") throw new CheckpointError(indexFile, "no weight_map object");
    const names = new Set<string>();
    for (const [t, f] of Object.entries(idx.weight_map)) {
      if (typeof f !== "string" || f !== basename(f) || f.startsWith(".") || f.includes("\\"))
        throw new CheckpointError(indexFile, `weight_map[${t}] = ${JSON.stringify(f)} is not a plain shard file name`);
      names.add(f);
    }
    files = [...names].sort().map((f) => join(root, f));
  } else if (existsSync(join(root, "model.safetensors"))) {
    files = [join(root, "model.safetensors")];
  } else {
    throw new CheckpointError(root, "no model.safetensors.index.json or model.safetensors");
  }
  const tensors = new Map<string, TensorInfo>();
  for (const f of files) for (const t of readShardHeader(f)) tensors.set(t.name, t);
  const byLayer = new Map<number, Map<number, TensorInfo[]>>();
  for (const t of tensors.values()) {
    const m = EXPERT_RE.exec(t.name);
    if (!m) continue;
    const layer = Number(m[2]);
    const id = Number(m[3]);
    let l = byLayer.get(layer);
    if (!l) byLayer.set(layer, (l = new Map()));
    let e = l.get(id);
    if (!e) l.set(id, (e = []));
    e.push(t);
  }
  const cache = new Map<number, ExpertLocation[]>();
  return {
    dir: root,
    files,
    tensors,
    experts(layer: number): ExpertLocation[] {
      const hit = cache.get(layer);
      if (hit) return hit;
      const l = byLayer.get(layer);
      const out: ExpertLocation[] = [];
      if (l) {
        for (const [id, ts] of [...l.entries()].sort((a, b) => a[0] - b[0])) out.push(expertRun(layer, id, ts));
      }
      cache.set(layer, out);
      return out;
    },
  };
}

/** The expert's tensors must be one gap-free run in one shard, so one read gets all of them. */
function expertRun(layer: number, id: number, ts: TensorInfo[]): ExpertLocation {
  const sorted = [...ts].sort((a, b) => a.offset - b.offset);
  const file = sorted[0].file;
  const start = sorted[0].offset;
  let at = start;
  const tensors: ExpertLocation["tensors"] = {};
  for (const t of sorted) {
    if (t.file !== file || t.offset !== at)
      throw new CheckpointError(t.file, `layer ${layer} expert ${id}: tensor ${t.name} is not contiguous with the expert's other tensors (one read per expert needs them adjacent in one shard)`);
    const suffix = EXPERT_RE.exec(t.name)![4];
    tensors[suffix] = { offset: t.offset - start, byteLength: t.byteLength, dtype: t.dtype, shape: t.shape };
    at += t.byteLength;
  }
  return { layer, id, file, offset: start, byteLength: at - start, tensors };
}
