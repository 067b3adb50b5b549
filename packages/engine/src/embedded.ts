/**
 * The embedded default model: a tiny K3 (K3's exact graph and released layout at hidden 128, 7.9 M
 * parameters) trained on The Rust Programming Language book by reference/train_tiny.py. It was
 * trained on raw text only, not on chat transcripts, so `k3 run` continues a raw prompt by default.
 */
import { existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { UsageError } from "./errors.js";

const here = dirname(fileURLToPath(import.meta.url));

/** The raw-completion prompt `k3 run` gives the embedded model when no prompt is given. */
export const EMBEDDED_DEFAULT_PROMPT = "Rust is";

/** Directory of the embedded model (assets/trained-k3 in the package; fixtures/models/trained-k3 in the repo). */
export function embeddedModelDir(): string {
  for (const dir of [join(here, "..", "assets", "trained-k3"), join(here, "..", "..", "..", "fixtures", "models", "trained-k3")]) {
    if (existsSync(join(dir, "config.json"))) return dir;
  }
  throw new UsageError("no --model given and the embedded tiny model is missing from this install");
}
