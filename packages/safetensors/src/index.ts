/**
 * @k3/safetensors: a header-only index of safetensors files and sharded checkpoints, strict
 * validation with typed errors, positioned and zero-copy reads, and streaming writers.
 *
 * The headers are parsed by a native C scanner (shards in parallel, names in one string table,
 * no per-tensor JS objects until asked) or, when the addon cannot load, by a pure-TS parser with
 * the same results and errors. `K3_SAFETENSORS_BACKEND=ts` forces the TS parser.
 */
import type { Backend } from "./backend.js";
import { tsBackend } from "./backend.js";
import {
  Checkpoint,
  openCheckpointAsyncWith,
  openCheckpointWith,
  openFileAsyncWith,
  openFileWith,
  parseBufferWith,
  type OpenOptions,
} from "./checkpoint.js";
import { nativeBackend, nativeLoadError } from "./native.js";

export { Checkpoint };
export type { ExpertInfo, LayerInfo, OpenOptions, RunSpec, TensorInfo, TensorRun } from "./checkpoint.js";
export { SafetensorsError, type SafetensorsErrorCode, type SafetensorsErrorDetails } from "./errors.js";
export { DTYPES, DTYPE_BITS, dtypeBits, isDtype, type Dtype } from "./dtypes.js";
export { classifyName, type NameClass } from "./classify.js";
export { typedView, typedArrayClass, type TypedArrayFor, type AnyTypedArray, type TypedViewOptions } from "./views.js";
export {
  SafetensorsWriter,
  ShardedCheckpointWriter,
  defaultShardName,
  type ShardedWriterOptions,
  type TensorSpec,
  type WriterOptions,
  type AsyncAddOptions,
} from "./writer.js";
export { WriteQueue, DEFAULT_BATCH_BYTES, timeQueuedWrite, type WriteQueueOptions, type ByteQueue, type QueueFactory } from "./write-queue.js";
export { KIND_EXPERT, KIND_FUSED, KIND_GLOBAL, KIND_SHARED, KIND_TRUNK, tableName, tableShape, type HeaderTable } from "./table.js";
export { MAX_HEADER_LENGTH } from "./scan.js";
export { unsafeShardReason } from "./paths.js";
export { summarize, formatSummary, formatBytes, type CheckpointSummary, type LayerSummary } from "./summary.js";

/** The parser in use by default: "native" when the addon loaded, else "ts". */
export function defaultBackend(): "native" | "ts" {
  if (process.env.K3_SAFETENSORS_BACKEND === "ts") return "ts";
  return nativeBackend ? "native" : "ts";
}

/** Why the native parser is not available (null when it is). */
export function nativeUnavailableReason(): string | null {
  return nativeLoadError;
}

function pick(choice?: "native" | "ts"): Backend {
  const want = choice ?? defaultBackend();
  if (want === "native") {
    if (!nativeBackend) throw new Error(`@k3/safetensors: the native parser is not available: ${nativeLoadError}`);
    return nativeBackend;
  }
  return tsBackend;
}

/**
 * Indexes a checkpoint directory: through model.safetensors.index.json when present (every
 * shard path checked, every tensor cross-checked), else every *.safetensors file in it.
 */
export function openCheckpoint(dir: string, options: OpenOptions = {}): Promise<Checkpoint> {
  try {
    return openCheckpointAsyncWith(pick(options.backend), dir, options);
  } catch (err) {
    return Promise.reject(err);
  }
}

export function openCheckpointSync(dir: string, options: OpenOptions = {}): Checkpoint {
  return openCheckpointWith(pick(options.backend), dir, options);
}

/** Indexes one .safetensors file. */
export function openSafetensors(file: string, options: Pick<OpenOptions, "backend"> = {}): Promise<Checkpoint> {
  try {
    return openFileAsyncWith(pick(options.backend), file);
  } catch (err) {
    return Promise.reject(err);
  }
}

export function openSafetensorsSync(file: string, options: Pick<OpenOptions, "backend"> = {}): Checkpoint {
  return openFileWith(pick(options.backend), file);
}

/** Indexes an in-memory file; `view()` then gives zero-copy tensor bytes. */
export function parseSafetensors(bytes: Uint8Array, options: Pick<OpenOptions, "backend"> & { name?: string } = {}): Checkpoint {
  return parseBufferWith(pick(options.backend), bytes, options.name);
}
