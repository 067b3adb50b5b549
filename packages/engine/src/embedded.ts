/** The tiny K3-layout model shipped in the package (random weights), or the repo fixture in development. */
import { existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { UsageError } from "./errors.js";

const here = dirname(fileURLToPath(import.meta.url));

/** Directory of the embedded tiny model (assets/tiny-k3 in the package; fixtures/models/tiny-k3 in the repo). */
export function embeddedModelDir(): string {
  for (const dir of [join(here, "..", "assets", "tiny-k3"), join(here, "..", "..", "..", "fixtures", "models", "tiny-k3")]) {
    if (existsSync(join(dir, "config.json"))) return dir;
  }
  throw new UsageError("no --model given and the embedded tiny model is missing from this install");
}
