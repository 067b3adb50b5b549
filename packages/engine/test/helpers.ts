/** Paths shared by the engine tests. */
import { readFileSync } from "node:fs";
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
