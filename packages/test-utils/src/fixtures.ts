/**
 * The reference fixtures, read through @k3/safetensors' strict TS parser (no native code needed
 * for these small files), and their tolerances from fixtures/components/MANIFEST.json.
 */
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { openSafetensorsSync } from "@k3/safetensors";
import { componentsDir } from "./paths.js";
import type { Tol } from "./compare.js";

export interface FixtureTensor {
  dtype: string;
  shape: number[];
  /** F32 -> Float32Array, F64 -> Float64Array, I64 -> Float64Array (exact below 2^53), BF16 -> widened. */
  data: Float32Array | Float64Array;
  /** BF16 only: the raw bits. */
  bits?: Uint16Array;
}

/** True when fixtures/components/<file> exists. */
export function fixtureExists(file: string): boolean {
  return existsSync(join(componentsDir, file));
}

/** Every tensor of fixtures/components/<file>, by name. */
export function readFixture(file: string): Map<string, FixtureTensor> {
  const ckpt = openSafetensorsSync(join(componentsDir, file), { backend: "ts" });
  const out = new Map<string, FixtureTensor>();
  try {
    for (const info of ckpt.tensors) {
      const bytes = ckpt.readSync(info.name);
      const raw = bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength);
      let data: Float32Array | Float64Array;
      if (info.dtype === "F32") data = new Float32Array(raw);
      else if (info.dtype === "F64") data = new Float64Array(raw);
      else if (info.dtype === "I64") data = Float64Array.from(new BigInt64Array(raw), (v) => Number(v));
      else if (info.dtype === "BF16") {
        const bits = new Uint16Array(raw);
        const wide = new Uint32Array(bits.length);
        for (let i = 0; i < bits.length; i++) wide[i] = bits[i] << 16;
        out.set(info.name, { dtype: info.dtype, shape: info.shape, data: new Float32Array(wide.buffer), bits });
        continue;
      } else throw new Error(`${file}:${info.name} has dtype ${info.dtype}, which the tests do not read`);
      out.set(info.name, { dtype: info.dtype, shape: info.shape, data });
    }
  } finally {
    ckpt.closeSync();
  }
  return out;
}

/** A tensor by name; throws naming what the file has when it is missing. */
export function get(m: Map<string, FixtureTensor>, name: string): FixtureTensor {
  const t = m.get(name);
  if (!t) throw new Error(`fixture tensor '${name}' missing (have: ${[...m.keys()].join(", ")})`);
  return t;
}

/** A tensor as a fresh Float32Array. */
export function f32(m: Map<string, FixtureTensor>, name: string): Float32Array {
  const t = get(m, name);
  return t.data instanceof Float32Array ? t.data.slice() : Float32Array.from(t.data);
}

/** The tolerance of a fixture file from MANIFEST.json (optionally a named sub-tolerance). */
export function manifestTol(file: string, key?: string): Tol {
  const manifest = JSON.parse(readFileSync(join(componentsDir, "MANIFEST.json"), "utf8")) as { fixtures: Array<{ file: string; tolerance: Record<string, unknown> }> };
  const entry = manifest.fixtures.find((f) => f.file === file);
  if (!entry) throw new Error(`MANIFEST has no entry for ${file}`);
  const t = (key && entry.tolerance[key] ? entry.tolerance[key] : entry.tolerance) as Tol;
  if (typeof t.atol !== "number" || typeof t.rtol !== "number") throw new Error(`MANIFEST tolerance of ${file} is not {atol, rtol}`);
  return t;
}
