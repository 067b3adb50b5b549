/**
 * The MLA latent cache: per position exactly kv_lora + rope values (576 for K3/48B): the
 * RMS-normalised latent c followed by the shared, never-rotated k_pe. f32, or bf16 bits (half the
 * memory; entries rounded to nearest even when written). Saves and restores byte-exactly.
 */
import { f32ToBf16 } from "@k3/dense";
import { checkConfig, type MlaConfig } from "./config.js";
import { MlaError } from "./errors.js";

export type CacheDtype = "f32" | "bf16";

const MAGIC = "K3MLAKV1";
const HEADER_BYTES = 64;

function fnv1a(bytes: Uint8Array): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < bytes.length; i++) h = Math.imul(h ^ bytes[i], 0x01000193) >>> 0;
  return h >>> 0;
}

export class MlaCache {
  readonly config: MlaConfig;
  readonly dtype: CacheDtype;
  readonly capacity: number;
  /** Values per position: kvLoraRank + qkRope. */
  readonly width: number;
  /** [capacity][width]: Float32Array or Uint16Array of bf16 bits. */
  readonly data: Float32Array | Uint16Array;
  /** Positions filled. */
  length = 0;

  constructor(config: MlaConfig, capacityTokens: number, dtype: CacheDtype = "f32") {
    this.config = checkConfig(config);
    if (!Number.isSafeInteger(capacityTokens) || capacityTokens < 1) throw new MlaError("cache", `capacity must be a positive integer, got ${capacityTokens}`);
    if (dtype !== "f32" && dtype !== "bf16") throw new MlaError("cache", `cache dtype must be 'f32' or 'bf16', got ${JSON.stringify(dtype)}`);
    this.width = config.kvLoraRank + config.qkRope;
    const n = capacityTokens * this.width;
    if (n * (dtype === "f32" ? 4 : 2) > 2 ** 34) throw new MlaError("cache", `a ${capacityTokens}-token cache needs ${n * (dtype === "f32" ? 4 : 2)} bytes; refusing more than 16 GiB in one cache`);
    this.capacity = capacityTokens;
    this.dtype = dtype;
    this.data = dtype === "f32" ? new Float32Array(n) : new Uint16Array(n);
  }

  /** Bytes per cached position (576 x 4 = 2304 f32, 1152 bf16 for K3). */
  get bytesPerPosition(): number {
    return this.width * (this.dtype === "f32" ? 4 : 2);
  }

  /** Appends T rows [T][width] (f32); refuses to overflow the capacity. */
  append(rows: Float32Array): void {
    if (rows.length % this.width !== 0) throw new MlaError("input", `cache.append: ${rows.length} values is not a multiple of the row width ${this.width}`);
    const T = rows.length / this.width;
    if (this.length + T > this.capacity)
      throw new MlaError("cache", `cache full: ${this.length} + ${T} positions exceed the capacity of ${this.capacity}`);
    const at = this.length * this.width;
    if (this.data instanceof Float32Array) this.data.set(rows, at);
    else this.data.set(f32ToBf16(rows), at);
    this.length += T;
  }

  /** Drops positions from `length` on (rollback, e.g. after rejected speculative tokens). */
  truncate(length: number): void {
    if (!Number.isInteger(length) || length < 0 || length > this.length) throw new MlaError("input", `cache.truncate: ${length} is outside [0, ${this.length}]`);
    this.length = length;
  }

  /** Header + the filled rows (the capacity is not stored: load picks its own). */
  save(): Uint8Array {
    const used = this.data.subarray(0, this.length * this.width);
    const out = new Uint8Array(HEADER_BYTES + used.byteLength);
    out.set(new Uint8Array(used.buffer, used.byteOffset, used.byteLength), HEADER_BYTES);
    const dv = new DataView(out.buffer);
    for (let i = 0; i < 8; i++) out[i] = MAGIC.charCodeAt(i);
    const c = this.config;
    dv.setUint32(8, 1, true);
    dv.setUint32(12, HEADER_BYTES, true);
    dv.setUint32(16, c.numHeads, true);
    dv.setUint32(20, c.kvLoraRank, true);
    dv.setUint32(24, c.qkRope, true);
    dv.setUint32(28, c.qkNope, true);
    dv.setUint32(32, this.dtype === "f32" ? 0 : 1, true);
    dv.setFloat64(40, this.length, true);
    dv.setUint32(48, fnv1a(out.subarray(HEADER_BYTES)), true);
    return out;
  }

  /** Restores a saved cache into a new one of `capacityTokens` (default: exactly the saved length). */
  static load(bytes: Uint8Array, config: MlaConfig, capacityTokens?: number): MlaCache {
    if (!(bytes instanceof Uint8Array)) throw new MlaError("cache", "MlaCache.load: bytes must be a Uint8Array");
    if (bytes.length < HEADER_BYTES) throw new MlaError("cache", `MlaCache.load: ${bytes.length} bytes is shorter than the ${HEADER_BYTES}-byte header`);
    for (let i = 0; i < 8; i++) if (bytes[i] !== MAGIC.charCodeAt(i)) throw new MlaError("cache", `MlaCache.load: bad magic (not a saved MLA cache; expected '${MAGIC}')`);
    const dv = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    if (dv.getUint32(8, true) !== 1) throw new MlaError("cache", `MlaCache.load: version ${dv.getUint32(8, true)}, expected 1`);
    const c = checkConfig(config);
    const fields: Array<[string, number, number]> = [
      ["numHeads", dv.getUint32(16, true), c.numHeads],
      ["kvLoraRank", dv.getUint32(20, true), c.kvLoraRank],
      ["qkRope", dv.getUint32(24, true), c.qkRope],
      ["qkNope", dv.getUint32(28, true), c.qkNope],
    ];
    for (const [name, saved, want] of fields) if (saved !== want) throw new MlaError("cache", `MlaCache.load: cache was saved with ${name}=${saved}, config has ${want}`);
    const code = dv.getUint32(32, true);
    if (code > 1) throw new MlaError("cache", `MlaCache.load: unknown cache dtype code ${code}`);
    const length = dv.getFloat64(40, true);
    if (!Number.isSafeInteger(length) || length < 0) throw new MlaError("cache", `MlaCache.load: bad position count ${length}`);
    const dtype: CacheDtype = code === 0 ? "f32" : "bf16";
    const width = c.kvLoraRank + c.qkRope;
    const need = HEADER_BYTES + length * width * (dtype === "f32" ? 4 : 2);
    if (bytes.length !== need) throw new MlaError("cache", `MlaCache.load: ${bytes.length} bytes, expected ${need} for ${length} positions (truncated or padded)`);
    if (fnv1a(bytes.subarray(HEADER_BYTES)) !== dv.getUint32(48, true)) throw new MlaError("cache", "MlaCache.load: payload checksum mismatch (corrupted cache)");
    const capacity = capacityTokens ?? Math.max(1, length);
    if (capacity < length) throw new MlaError("cache", `MlaCache.load: capacity ${capacity} is smaller than the ${length} saved positions`);
    const cache = new MlaCache(c, capacity, dtype);
    new Uint8Array(cache.data.buffer, 0, need - HEADER_BYTES).set(bytes.subarray(HEADER_BYTES));
    cache.length = length;
    return cache;
  }
}
