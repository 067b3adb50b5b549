// Loads fixtures/components/*.safetensors (written by the PyTorch reference) into typed arrays.
import { existsSync, mkdirSync, mkdtempSync, readFileSync, statfsSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { openSafetensorsSync } from "@k3/safetensors";

export const repoRoot = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
export const componentsDir = join(repoRoot, "fixtures", "components");
export const tinyK3Dir = join(repoRoot, "fixtures", "models", "tiny-k3");

export type Arr = Float32Array | Float64Array | BigInt64Array | Uint8Array | Uint16Array;
export interface Fixture {
  get(name: string): Arr;
  f32(name: string): Float32Array;
  f64(name: string): Float64Array;
  shape(name: string): number[];
  names(): string[];
}

export function fixtureExists(name: string): boolean {
  return existsSync(join(componentsDir, name));
}

export function loadFixture(name: string): Fixture {
  const file = join(componentsDir, name);
  const bytes = readFileSync(file);
  const infos = new Map([...openSafetensorsSync(file).tensors].map((t) => [t.name, t]));
  const view = (n: string): Arr => {
    const t = infos.get(n);
    if (!t) throw new Error(`${name}: no tensor ${n}`);
    const copy = new Uint8Array(bytes.subarray(t.offset, t.offset + t.byteLength)); // a copy: Buffer.slice would alias
    switch (t.dtype) {
      case "F32": return new Float32Array(copy.buffer);
      case "F64": return new Float64Array(copy.buffer);
      case "I64": return new BigInt64Array(copy.buffer);
      case "BF16": return new Uint16Array(copy.buffer);
      default: return new Uint8Array(copy.buffer);
    }
  };
  return {
    get: view,
    f32: (n) => {
      const a = view(n);
      if (a instanceof Float32Array) return a;
      if (a instanceof Float64Array) return Float32Array.from(a);
      throw new Error(`${n} is not float`);
    },
    f64: (n) => {
      const a = view(n);
      if (a instanceof Float64Array) return a;
      if (a instanceof Float32Array) return Float64Array.from(a);
      throw new Error(`${n} is not float`);
    },
    shape: (n) => infos.get(n)!.shape,
    names: () => [...infos.keys()],
  };
}

/** |got - want| <= atol + rtol |want| everywhere; returns the worst violation ratio (<= 1 passes). */
export function worstRatio(got: ArrayLike<number>, want: ArrayLike<number>, atol = 1e-5, rtol = 1e-4): number {
  if (got.length !== want.length) throw new Error(`length ${got.length} vs ${want.length}`);
  let worst = 0;
  for (let i = 0; i < got.length; i++) {
    const r = Math.abs(got[i] - want[i]) / (atol + rtol * Math.abs(want[i]));
    if (!(r <= worst)) worst = Number.isNaN(r) ? Infinity : r;
  }
  return worst;
}

export const TMPFS_MAGIC = 0x01021994;

/** A scratch dir on a real disk (O_DIRECT must be exercised; tmpfs would not show it): the OS temp
    dir, else /var/tmp, else the package's own .tmp (a disk wherever the repo is checked out). */
export function diskDir(prefix: string): string {
  const onDisk = (d: string) => {
    try {
      return statfsSync(d).type !== TMPFS_MAGIC;
    } catch {
      return false;
    }
  };
  const base = [tmpdir(), "/var/tmp"].find(onDisk) ?? fileURLToPath(new URL("../.tmp", import.meta.url));
  mkdirSync(base, { recursive: true });
  return mkdtempSync(join(base, prefix));
}

/** n deterministic bytes (an LCG's top byte) for I/O tests: the same seed gives the same bytes. */
export function pattern(n: number, seed: number): Uint8Array {
  const out = new Uint8Array(n);
  let x = seed >>> 0;
  for (let i = 0; i < n; i++) {
    x = (Math.imul(x, 1664525) + 1013904223) >>> 0;
    out[i] = x >>> 24;
  }
  return out;
}
