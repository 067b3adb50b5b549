/**
 * Weight access for the model: named tensors of a sharded safetensors checkpoint, checked against
 * the shapes the config implies, turned into the forms the kernels take (bf16 bits for GEMV,
 * f32 vectors for norms and gates).
 *
 * Reading is @k3/safetensors: a header-only index of the shards, strict validation, positioned reads.
 */
import { gemmBf16, gemmF32, gemvBf16, gemvF32 } from "@k3/dense";
import { openCheckpointSync, openSafetensorsSync, SafetensorsError, type Checkpoint } from "@k3/safetensors";
import { K3Error, EXIT_USAGE } from "./errors.js";

/** A checkpoint tensor that is missing, has the wrong dtype or shape, or cannot be read. */
export class WeightError extends K3Error {
  constructor(message: string) {
    super(message, EXIT_USAGE);
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
  constructor(readonly dir: string, private readonly ckpt: Checkpoint) {}
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

/** Wraps @k3/safetensors' typed errors so the CLI maps them to exit 2 with the file named. */
function wrap<T>(what: string, fn: () => T): T {
  try {
    return fn();
  } catch (err) {
    if (err instanceof SafetensorsError) throw new WeightError(`${what}: ${err.message}`);
    throw err;
  }
}

/**
 * Opens a sharded checkpoint (model.safetensors.index.json) or the *.safetensors files in `dir`.
 * `allowMissingShards`: a partly downloaded checkpoint (`--layers N`); a tensor of an absent shard fails naming it.
 * `shardDirs`: further directories holding shards (a checkpoint spread over several drives).
 */
export function openWeights(dir: string, options: { allowMissingShards?: boolean; shardDirs?: readonly string[] } = {}): WeightSource {
  return wrap(dir, () => new CheckpointSource(dir, openCheckpointSync(dir, { allowMissingShards: options.allowMissingShards, shardDirs: options.shardDirs })));
}

/** Opens one safetensors file (e.g. expected.safetensors). */
export function openSafetensorsFile(file: string): WeightSource {
  return wrap(file, () => new CheckpointSource(file, openSafetensorsSync(file)));
}

// ---------------------------------------------------------------- typed views

/** A matrix [rows, cols] stored row-major in bf16 bits or f32. */
export interface Matrix {
  name: string;
  rows: number;
  cols: number;
  bf16?: Uint16Array;
  f32?: Float32Array;
}

function checkShape(info: TensorInfo, want: number[]): void {
  const got = info.shape;
  const same = got.length === want.length && got.every((x, i) => x === want[i]);
  if (!same) throw new WeightError(`tensor ${info.name}: shape ${JSON.stringify(got)} but the config implies ${JSON.stringify(want)}`);
}

/** Loads a 2-D weight as bf16 (or f32) after checking its shape against the config. */
export function loadMatrix(src: WeightSource, name: string, rows: number, cols: number): Matrix {
  const info = src.info(name);
  checkShape(info, [rows, cols]);
  let bytes = src.read(name);
  if (bytes.byteOffset % 4 !== 0) bytes = bytes.slice();
  if (info.dtype === "BF16") return { name, rows, cols, bf16: new Uint16Array(bytes.buffer, bytes.byteOffset, rows * cols) };
  if (info.dtype === "F32") return { name, rows, cols, f32: new Float32Array(bytes.buffer, bytes.byteOffset, rows * cols) };
  throw new WeightError(`tensor ${name}: dtype ${info.dtype}, expected BF16 or F32`);
}

/** Loads a vector (any of the accepted shapes, e.g. [C,1,K] for a conv) as f32, checking the element count. */
export function loadVector(src: WeightSource, name: string, elements: number, shapes?: number[][]): Float32Array {
  const info = src.info(name);
  const count = info.shape.reduce((a, x) => a * x, 1);
  if (count !== elements || (shapes && !shapes.some((s) => s.length === info.shape.length && s.every((x, i) => x === info.shape[i])))) {
    throw new WeightError(`tensor ${name}: shape ${JSON.stringify(info.shape)} but the config implies ${shapes ? shapes.map((s) => JSON.stringify(s)).join(" or ") : elements + " elements"}`);
  }
  let bytes = src.read(name);
  if (bytes.byteOffset % 4 !== 0) bytes = bytes.slice();
  if (info.dtype === "F32") return new Float32Array(bytes.buffer, bytes.byteOffset, elements);
  if (info.dtype === "BF16") {
    const bits = new Uint16Array(bytes.buffer, bytes.byteOffset, elements);
    const out = new Float32Array(elements);
    const wide = new Uint32Array(out.buffer);
    for (let i = 0; i < elements; i++) wide[i] = bits[i] << 16;
    return out;
  }
  throw new WeightError(`tensor ${name}: dtype ${info.dtype}, expected F32 or BF16`);
}

/** y = W x. */
export function matvec(m: Matrix, x: Float32Array, y: Float32Array): Float32Array {
  if (m.bf16) return gemvBf16(m.bf16, x, y, { rows: m.rows, cols: m.cols });
  return gemvF32(m.f32!, x, y, { rows: m.rows, cols: m.cols });
}

/** Y[b] = W X[b] for `batch` rows; bit-identical to matvec per row. */
export function matmul(m: Matrix, X: Float32Array, Y: Float32Array, batch: number): Float32Array {
  if (batch === 1) return matvec(m, X.subarray(0, m.cols), Y.subarray(0, m.rows)), Y;
  if (m.bf16) return gemmBf16(m.bf16, X, Y, { rows: m.rows, cols: m.cols, batch });
  return gemmF32(m.f32!, X, Y, { rows: m.rows, cols: m.cols, batch });
}
