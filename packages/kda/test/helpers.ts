/**
 * Test helpers: the reference fixtures read through @k3/safetensors, the MANIFEST tolerances,
 * comparison, deterministic random data.
 */
import { existsSync, readFileSync } from "node:fs";
import { openSafetensorsSync } from "@k3/safetensors";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

export const repoRoot = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
export const componentsDir = join(repoRoot, "fixtures", "components");

export interface FixtureTensor {
  dtype: string;
  shape: number[];
  /** F32 -> Float32Array, F64 -> Float64Array, I64 -> Float64Array (exact below 2^53), BF16 -> widened. */
  data: Float32Array | Float64Array;
  /** BF16 only: the raw bits. */
  bits?: Uint16Array;
}

export function fixtureExists(file: string): boolean {
  return existsSync(join(componentsDir, file));
}

export function readFixture(file: string): Map<string, FixtureTensor> {
  // @k3/safetensors' strict TS header parser (no native code needed for these small files)
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

/** A tensor by name; throws naming the file when it is missing. */
export function get(m: Map<string, FixtureTensor>, name: string): FixtureTensor {
  const t = m.get(name);
  if (!t) throw new Error(`fixture tensor '${name}' missing (have: ${[...m.keys()].join(", ")})`);
  return t;
}

export function f32(m: Map<string, FixtureTensor>, name: string): Float32Array {
  const t = get(m, name);
  return t.data instanceof Float32Array ? t.data.slice() : Float32Array.from(t.data);
}

export interface Tol {
  atol: number;
  rtol: number;
}

/** The tolerance of a fixture file from MANIFEST.json. */
export function manifestTol(file: string, key?: string): Tol {
  const manifest = JSON.parse(readFileSync(join(componentsDir, "MANIFEST.json"), "utf8")) as { fixtures: Array<{ file: string; tolerance: Record<string, unknown> }> };
  const entry = manifest.fixtures.find((f) => f.file === file);
  if (!entry) throw new Error(`MANIFEST has no entry for ${file}`);
  const t = (key && entry.tolerance[key] ? entry.tolerance[key] : entry.tolerance) as Tol;
  if (typeof t.atol !== "number" || typeof t.rtol !== "number") throw new Error(`MANIFEST tolerance of ${file} is not {atol, rtol}`);
  return t;
}

/** Index of the first element outside atol + rtol*|expected|, or -1. */
export function firstMismatch(got: ArrayLike<number>, expected: ArrayLike<number>, tol: Tol): number {
  if (got.length !== expected.length) return 0;
  for (let i = 0; i < got.length; i++) {
    const e = expected[i];
    if (!(Math.abs(got[i] - e) <= tol.atol + tol.rtol * Math.abs(e))) return i;
  }
  return -1;
}

/** Passes iff every element is within tolerance; otherwise reports the first bad element. */
export function closeTo(got: ArrayLike<number>, expected: ArrayLike<number>, tol: Tol): { ok: boolean; detail: string } {
  if (got.length !== expected.length) return { ok: false, detail: `length ${got.length} vs ${expected.length}` };
  const i = firstMismatch(got, expected, tol);
  return { ok: i < 0, detail: i < 0 ? "ok" : `element ${i}: got ${got[i]}, expected ${expected[i]}` };
}

/** max |a - b| / max |b|. */
export function relErr(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let num = 0;
  let den = 0;
  for (let i = 0; i < b.length; i++) {
    num = Math.max(num, Math.abs(a[i] - b[i]));
    den = Math.max(den, Math.abs(b[i]));
  }
  return den === 0 ? num : num / den;
}

/** Deterministic uniform values in [lo, hi) (xorshift32). */
export function uniform(n: number, lo: number, hi: number, seed: number): Float32Array {
  const out = new Float32Array(n);
  let s = (seed * 2654435761) >>> 0 || 1;
  for (let i = 0; i < n; i++) {
    s ^= s << 13;
    s >>>= 0;
    s ^= s >>> 17;
    s ^= s << 5;
    s >>>= 0;
    out[i] = lo + (s / 4294967296) * (hi - lo);
  }
  return out;
}

/** Rows of `dim` scaled to unit L2 norm (times `scale`). */
export function unitRows(x: Float32Array, dim: number, scale = 1): Float32Array {
  for (let r = 0; r < x.length / dim; r++) {
    let s = 0;
    for (let d = 0; d < dim; d++) s += x[r * dim + d] ** 2;
    const f = scale / Math.sqrt(s + 1e-6);
    for (let d = 0; d < dim; d++) x[r * dim + d] *= f;
  }
  return x;
}

export function bytesEqual(a: ArrayBufferView, b: ArrayBufferView): boolean {
  return Buffer.from(a.buffer, a.byteOffset, a.byteLength).equals(Buffer.from(b.buffer, b.byteOffset, b.byteLength));
}
