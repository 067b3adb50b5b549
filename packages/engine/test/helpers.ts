/** Paths shared by the engine tests. */
import { closeSync, openSync, readFileSync, readSync, writeSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

export const REPO = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
export const TINY_K3 = join(REPO, "fixtures", "models", "tiny-k3");
export const TINY_48B = join(REPO, "fixtures", "models", "tiny-kimi-linear");

export function rawConfig(dir: string): Record<string, any> {
  return JSON.parse(readFileSync(join(dir, "config.json"), "utf8"));
}

/** The published K3 config (docs/architecture.md §0); the one copy lives in src/published.ts. */
export { publishedK3Config } from "../src/published.js";

/** Runs the `k3` CLI in this process and captures what it writes (stdout, stderr) and its exit code. */
export async function captureCli(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const { main } = await import("../src/cli.js");
  let stdout = "";
  let stderr = "";
  const o = process.stdout.write.bind(process.stdout);
  const e = process.stderr.write.bind(process.stderr);
  process.stdout.write = ((c: string | Uint8Array) => ((stdout += String(c)), true)) as typeof process.stdout.write;
  process.stderr.write = ((c: string | Uint8Array) => ((stderr += String(c)), true)) as typeof process.stderr.write;
  try {
    return { code: await main(args), stdout, stderr };
  } finally {
    process.stdout.write = o;
    process.stderr.write = e;
  }
}

/** The trained tiny K3 (the embedded default; reference/train_tiny.py) with its reference outputs. */
export const TRAINED_K3 = join(REPO, "fixtures", "models", "trained-k3");

/**
 * Overwrites bytes of tensor `name` in the checkpoint at `dir`, in place (a test's corrupt copy):
 * `patch(dtype, byteLength)` returns [byte offset inside the tensor's data, bytes] pairs to write.
 */
export function patchTensor(dir: string, name: string, patch: (dtype: string, byteLength: number) => Array<[number, Uint8Array]>): void {
  const index = JSON.parse(readFileSync(join(dir, "model.safetensors.index.json"), "utf8")) as { weight_map: Record<string, string> };
  const fd = openSync(join(dir, index.weight_map[name]), "r+");
  try {
    const len = Buffer.alloc(8);
    readSync(fd, len, 0, 8, 0);
    const n = Number(len.readBigUInt64LE(0));
    const header = Buffer.alloc(n);
    readSync(fd, header, 0, n, 8);
    const t = JSON.parse(header.toString("utf8"))[name] as { dtype: string; data_offsets: [number, number] };
    const [begin, end] = t.data_offsets;
    for (const [at, bytes] of patch(t.dtype, end - begin)) writeSync(fd, bytes, 0, bytes.length, 8 + n + begin + at);
  } finally {
    closeSync(fd);
  }
}
