/**
 * Weight access for the model: named tensors of a sharded safetensors checkpoint, checked against
 * the shapes the config implies, turned into the forms the kernels take (bf16 bits for GEMV,
 * f32 vectors for norms and gates).
 *
 * `openWeights` reads the checkpoint's headers and the tensor bytes the engine asks for. It is a
 * deliberately small reader (header JSON, bounds checks, preadSync); @k3/safetensors replaces it.
 */
import { closeSync, existsSync, fstatSync, openSync, readFileSync, readSync } from "node:fs";
import { join } from "node:path";
import { gemmBf16, gemmF32, gemvBf16, gemvF32 } from "@k3/dense";
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
  /** Bytes read from disk so far. */
  readonly bytesRead: number;
  close(): void;
}

const DTYPE_BYTES: Record<string, number> = { F64: 8, F32: 4, F16: 2, BF16: 2, I64: 8, I32: 4, I16: 2, U8: 1, I8: 1, BOOL: 1, U16: 2, U32: 4, U64: 8 };

/** Parses one shard's header; every offset is checked against the file size. */
function readShardHeader(file: string, into: Map<string, TensorInfo>): void {
  let fd: number;
  try {
    fd = openSync(file, "r");
  } catch (err) {
    throw new WeightError(`${file}: cannot open (${(err as NodeJS.ErrnoException).code})`);
  }
  try {
    const size = fstatSync(fd).size;
    const lenBuf = Buffer.alloc(8);
    if (size < 8 || readSync(fd, lenBuf, 0, 8, 0) !== 8) throw new WeightError(`${file}: ${size} bytes is too short for a safetensors header`);
    const len = Number(lenBuf.readBigUInt64LE(0));
    if (len < 2 || len > 100_000_000 || 8 + len > size) throw new WeightError(`${file}: header length ${len} does not fit the ${size}-byte file`);
    const hbuf = Buffer.alloc(len);
    readSync(fd, hbuf, 0, len, 8);
    let header: Record<string, unknown>;
    try {
      header = JSON.parse(hbuf.toString("utf8"));
    } catch (err) {
      throw new WeightError(`${file}: header is not valid JSON (${(err as Error).message})`);
    }
    for (const [name, v] of Object.entries(header)) {
      if (name === "__metadata__") continue;
      const t = v as { dtype?: string; shape?: number[]; data_offsets?: number[] };
      const width = DTYPE_BYTES[t.dtype ?? ""];
      if (!width || !Array.isArray(t.shape) || !Array.isArray(t.data_offsets) || t.data_offsets.length !== 2) {
        throw new WeightError(`${file}: tensor ${name} has a malformed header entry`);
      }
      const [b, e] = t.data_offsets;
      const elements = t.shape.reduce((a, x) => a * x, 1);
      if (!(Number.isSafeInteger(b) && Number.isSafeInteger(e) && b <= e && 8 + len + e <= size && e - b === elements * width)) {
        throw new WeightError(`${file}: tensor ${name} data [${b}, ${e}) does not match shape ${JSON.stringify(t.shape)} ${t.dtype} or lies outside the file`);
      }
      into.set(name, { name, dtype: t.dtype!, shape: t.shape, file, offset: 8 + len + b, nbytes: e - b });
    }
  } finally {
    closeSync(fd);
  }
}

class SafetensorsDir implements WeightSource {
  bytesRead = 0;
  private readonly fds = new Map<string, number>();
  constructor(readonly dir: string, private readonly tensors: Map<string, TensorInfo>) {}

  has(name: string): boolean {
    return this.tensors.has(name);
  }
  names(): string[] {
    return [...this.tensors.keys()];
  }
  info(name: string): TensorInfo {
    const t = this.tensors.get(name);
    if (!t) throw new WeightError(`${this.dir}: tensor ${name} is missing from the checkpoint`);
    return t;
  }
  read(name: string): Uint8Array {
    const t = this.info(name);
    let fd = this.fds.get(t.file);
    if (fd === undefined) {
      fd = openSync(t.file, "r");
      this.fds.set(t.file, fd);
    }
    const out = new Uint8Array(t.nbytes);
    let done = 0;
    while (done < t.nbytes) {
      const n = readSync(fd, out, done, t.nbytes - done, t.offset + done);
      if (n <= 0) throw new WeightError(`${t.file}: short read of ${name} (${done} of ${t.nbytes} bytes)`);
      done += n;
    }
    this.bytesRead += t.nbytes;
    return out;
  }
  close(): void {
    for (const fd of this.fds.values()) closeSync(fd);
    this.fds.clear();
  }
}

/** Opens `model.safetensors.index.json` (or a single `model.safetensors`) in `dir`. */
export function openWeights(dir: string): WeightSource {
  const tensors = new Map<string, TensorInfo>();
  const indexFile = join(dir, "model.safetensors.index.json");
  if (existsSync(indexFile)) {
    let index: { weight_map?: Record<string, string> };
    try {
      index = JSON.parse(readFileSync(indexFile, "utf8"));
    } catch (err) {
      throw new WeightError(`${indexFile}: not valid JSON (${(err as Error).message})`);
    }
    if (!index.weight_map || typeof index.weight_map !== "object") throw new WeightError(`${indexFile}: weight_map is missing`);
    const shards = [...new Set(Object.values(index.weight_map))].sort();
    for (const s of shards) {
      if (typeof s !== "string" || s.includes("/") || s.includes("\\") || s.startsWith(".")) throw new WeightError(`${indexFile}: unsafe shard name ${JSON.stringify(s)}`);
      readShardHeader(join(dir, s), tensors);
    }
    for (const [name, shard] of Object.entries(index.weight_map)) {
      const t = tensors.get(name);
      if (!t || t.file !== join(dir, shard)) throw new WeightError(`${indexFile}: ${name} is mapped to ${shard} but that shard does not hold it`);
    }
  } else if (existsSync(join(dir, "model.safetensors"))) {
    readShardHeader(join(dir, "model.safetensors"), tensors);
  } else {
    throw new WeightError(`${dir}: no model.safetensors.index.json or model.safetensors`);
  }
  return new SafetensorsDir(dir, tensors);
}

/** Opens one safetensors file (e.g. expected.safetensors). */
export function openSafetensorsFile(file: string): WeightSource {
  const tensors = new Map<string, TensorInfo>();
  readShardHeader(file, tensors);
  return new SafetensorsDir(file, tensors);
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
  const bytes = src.read(name);
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
  const bytes = src.read(name);
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
