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
