// Build step: copies the trained tiny K3 (fixtures/models/trained-k3: K3's graph at hidden 128, trained
// on The Rust Programming Language book by reference/train_tiny.py) into assets/trained-k3, so
// `npx @k3/engine run` works offline with no model. Fixture-only files (expected outputs, the eval
// text, the training report) stay out of the package.
import { copyFileSync, existsSync, mkdirSync, readdirSync, rmSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const FIXTURE_ONLY = new Set(["expected.json", "eval.txt", "training.json"]);
const pkg = join(dirname(fileURLToPath(import.meta.url)), "..");
const src = join(pkg, "..", "..", "fixtures", "models", "trained-k3");
const dst = join(pkg, "assets", "trained-k3");
if (!existsSync(join(src, "config.json"))) {
  if (existsSync(join(dst, "config.json"))) process.exit(0); // building from a published tarball
  console.error(`copy-tiny: ${src} is missing`);
  process.exit(1);
}
rmSync(join(pkg, "assets"), { recursive: true, force: true });
mkdirSync(dst, { recursive: true });
for (const f of readdirSync(src)) {
  if (FIXTURE_ONLY.has(f)) continue;
  copyFileSync(join(src, f), join(dst, f));
}
console.log(`copy-tiny: ${readdirSync(dst).length} files → assets/trained-k3`);
