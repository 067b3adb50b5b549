/**
 * The reference fixtures, read through @k3/safetensors' strict TS parser (no native code needed
 * for these small files), and their tolerances from fixtures/components/MANIFEST.json.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { openSafetensorsSync } from "@k3/safetensors";
import { componentsDir } from "./paths.js";
import type { Tol } from "./compare.js";
import { decodeTensor, type FixtureTensor } from "./fixture-file.js";

export { fixtureExists, type FixtureTensor } from "./fixture-file.js";

/** Every tensor of fixtures/components/<file>, by name. */
export function readFixture(file: string): Map<string, FixtureTensor> {
  const ckpt = openSafetensorsSync(join(componentsDir, file), { backend: "ts" });
  const out = new Map<string, FixtureTensor>();
  try {
    for (const info of ckpt.tensors) out.set(info.name, decodeTensor(`${file}:${info.name}`, info.dtype, info.shape, ckpt.readSync(info.name)));
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
