/**
 * Fixture files without any @k3 import: the tensor decoding every reader shares, and a minimal
 * safetensors reader for @k3/dense's tests (dense sits below @k3/safetensors in the dependency
 * graph, so it cannot use fixtures.ts, which parses through @k3/safetensors' strict reader).
 */
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { componentsDir } from "./paths.js";

export interface FixtureTensor {
  dtype: string;
  shape: number[];
  /**
   * F32 -> Float32Array, F64 -> Float64Array, I64 -> Float64Array (exact below 2^53), BF16 -> widened
   * to Float32Array, U8 -> the bytes as a Uint8Array (e.g. MXFP4 packed nibbles and E8M0 scales).
   */
  data: Float32Array | Float64Array | Uint8Array;
  /** BF16 only: the raw bits. */
  bits?: Uint16Array;
}

/** True when fixtures/components/<file> exists. */
export function fixtureExists(file: string): boolean {
  return existsSync(join(componentsDir, file));
}

/** One tensor's bytes as a FixtureTensor; `where` names file:tensor in the error for an unread dtype. */
export function decodeTensor(where: string, dtype: string, shape: number[], bytes: Uint8Array): FixtureTensor {
  // A copy: typed views need an aligned offset, and the caller's buffer may be reused or closed.
  const raw = bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength) as ArrayBuffer;
  if (dtype === "F32") return { dtype, shape, data: new Float32Array(raw) };
  if (dtype === "F64") return { dtype, shape, data: new Float64Array(raw) };
  if (dtype === "U8") return { dtype, shape, data: new Uint8Array(raw) };
  if (dtype === "I64") return { dtype, shape, data: Float64Array.from(new BigInt64Array(raw), (v) => Number(v)) };
  if (dtype === "BF16") {
    const bits = new Uint16Array(raw);
    const wide = new Uint32Array(bits.length);
    for (let i = 0; i < bits.length; i++) wide[i] = bits[i] << 16;
    return { dtype, shape, data: new Float32Array(wide.buffer), bits };
  }
  throw new Error(`${where} has dtype ${dtype}, which the tests do not read`);
}

/**
 * Every tensor of fixtures/components/<file>, by name, parsed with a minimal reader (header length,
 * JSON, offsets inside the data section). Only for packages that cannot depend on @k3/safetensors;
 * everyone else uses readFixture.
 */
export function readFixtureMinimal(file: string): Map<string, FixtureTensor> {
  const bytes = readFileSync(join(componentsDir, file));
  const headerLength = bytes.length >= 8 ? Number(bytes.readBigUInt64LE(0)) : -1;
  if (headerLength < 2 || 8 + headerLength > bytes.length) {
    throw new Error(`${file}: header length ${headerLength} does not fit in the file's ${bytes.length} bytes`);
  }
  const header = JSON.parse(bytes.subarray(8, 8 + headerLength).toString("utf8")) as Record<
    string,
    { dtype: string; shape: number[]; data_offsets: [number, number] }
  >;
  const data = bytes.subarray(8 + headerLength);
  const out = new Map<string, FixtureTensor>();
  for (const [name, info] of Object.entries(header)) {
    if (name === "__metadata__") continue;
    const [begin, end] = info.data_offsets;
    if (!(Number.isInteger(begin) && Number.isInteger(end) && 0 <= begin && begin <= end && end <= data.length)) {
      throw new Error(`${file}:${name}: data_offsets [${begin}, ${end}] outside the ${data.length}-byte data section`);
    }
    out.set(name, decodeTensor(`${file}:${name}`, info.dtype, info.shape, data.subarray(begin, end)));
  }
  return out;
}
