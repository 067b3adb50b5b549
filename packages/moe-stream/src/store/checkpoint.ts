/**
 * Where every tensor and routed expert of a (sharded) safetensors checkpoint lives, from the
 * headers alone: a thin view over @k3/safetensors' `openCheckpointSync` (strict header validation,
 * index.json, shard paths) shaped for streaming: each expert as ONE byte range of one shard.
 */
import { openCheckpointSync, SafetensorsError, type Checkpoint } from "@k3/safetensors";
import { resolve } from "node:path";
import { CheckpointError } from "../errors.js";

export type Dtype = string;

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

function wrap(dir: string, e: unknown): never {
  if (e instanceof SafetensorsError) throw new CheckpointError(e.file ?? dir, e.message, { cause: e });
  throw e;
}

const SUFFIX_RE = /\.experts\.\d+\.(.+)$/;

/**
 * Opens a checkpoint directory (index + shards, or one model.safetensors). `backend` picks
 * @k3/safetensors' header parser ("native" by default when its addon loads, or "ts").
 */
export function openCheckpointIndex(dir: string, options: { backend?: "native" | "ts"; allowMissingShards?: boolean; shardDirs?: readonly string[] } = {}): CheckpointIndex {
  const root = resolve(dir);
  let ck: Checkpoint;
  try {
    ck = openCheckpointSync(root, { ...(options.backend ? { backend: options.backend } : {}), allowMissingShards: options.allowMissingShards, shardDirs: options.shardDirs });
  } catch (e) {
    wrap(root, e);
  }
  return checkpointIndex(ck, root);
}

/**
 * The index of a checkpoint someone already opened (the engine's weight source): its headers are
 * parsed once and its shards opened once. `dir` names it in errors (default: the checkpoint's own).
 */
export function checkpointIndex(ck: Checkpoint, dir: string = ck.dir ?? ck.files[0] ?? ""): CheckpointIndex {
  const root = resolve(dir);
  const tensors = new Map<string, TensorInfo>();
  for (const t of ck.tensors) tensors.set(t.name, { name: t.name, file: t.file, dtype: t.dtype, shape: t.shape, offset: t.offset, byteLength: t.byteLength });
  const layers = new Set(ck.layerNumbers());
  const cache = new Map<number, ExpertLocation[]>();
  return {
    dir: root,
    files: [...ck.files],
    tensors,
    experts(layer: number): ExpertLocation[] {
      const hit = cache.get(layer);
      if (hit) return hit;
      let infos;
      try {
        infos = layers.has(layer) ? ck.experts(layer) : [];
      } catch (e) {
        wrap(root, e);
      }
      const out = infos.map((x): ExpertLocation => {
        if (!x.contiguous || x.tensors.some((t) => t.file !== x.file))
          throw new CheckpointError(x.file, `layer ${layer} expert ${x.id}: its tensors are not one contiguous run in one shard (one read per expert needs them adjacent)`);
        const rel: ExpertLocation["tensors"] = {};
        for (const t of x.tensors) rel[SUFFIX_RE.exec(t.name)?.[1] ?? t.name] = { offset: t.offset - x.offset, byteLength: t.byteLength, dtype: t.dtype, shape: t.shape };
        return { layer, id: x.id, file: x.file, offset: x.offset, byteLength: x.byteLength, tensors: rel };
      });
      cache.set(layer, out);
      return out;
    },
  };
}
