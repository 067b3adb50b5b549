/**
 * Reads the PyTorch reference fixtures (fixtures/components/*.safetensors) for tests. A minimal
 * safetensors reader on purpose: @k3/dense sits below @k3/safetensors in the dependency graph.
 */
import { existsSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const repoRoot = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
export const componentsDir = join(repoRoot, "fixtures", "components");

export type FixtureTensor = Float64Array | Float32Array | Uint8Array;

/** All tensors of a component fixture by name, or null (with the reason) when it is absent. */
export function loadFixture(name: string): { tensors: Map<string, { data: FixtureTensor; shape: number[] }> } | null {
  const file = join(componentsDir, `${name}.safetensors`);
  if (!existsSync(file)) return null;
  const bytes = readFileSync(file);
  const headerLength = Number(bytes.readBigUInt64LE(0));
  const header = JSON.parse(bytes.subarray(8, 8 + headerLength).toString("utf8")) as Record<
    string,
    { dtype: string; shape: number[]; data_offsets: [number, number] }
  >;
  const base = 8 + headerLength;
  const tensors = new Map<string, { data: FixtureTensor; shape: number[] }>();
  for (const [key, info] of Object.entries(header)) {
    if (key === "__metadata__") continue;
    const [begin, end] = info.data_offsets;
    const raw = bytes.buffer.slice(bytes.byteOffset + base + begin, bytes.byteOffset + base + end);
    const data =
      info.dtype === "F64" ? new Float64Array(raw) : info.dtype === "F32" ? new Float32Array(raw) : new Uint8Array(raw);
    tensors.set(key, { data, shape: info.shape });
  }
  return { tensors };
}

/** |got - expected| <= atol + rtol*|expected| elementwise; returns the first failing index or -1. */
export function firstMismatch(got: ArrayLike<number>, expected: ArrayLike<number>, atol: number, rtol: number): number {
  if (got.length !== expected.length) return 0;
  for (let i = 0; i < got.length; i++) {
    if (!(Math.abs(got[i] - expected[i]) <= atol + rtol * Math.abs(expected[i]))) return i;
  }
  return -1;
}
