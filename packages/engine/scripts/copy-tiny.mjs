// Build step: copies the tiny K3-layout checkpoint (fixtures/models/tiny-k3, random weights) into
// assets/tiny-k3 so `npx @k3/engine run` works offline with no model. Expected-output files stay out.
import { copyFileSync, existsSync, mkdirSync, readdirSync, rmSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const pkg = join(dirname(fileURLToPath(import.meta.url)), "..");
const src = join(pkg, "..", "..", "fixtures", "models", "tiny-k3");
const dst = join(pkg, "assets", "tiny-k3");
if (!existsSync(join(src, "config.json"))) {
  if (existsSync(join(dst, "config.json"))) process.exit(0); // building from a published tarball
  console.error(`copy-tiny: ${src} is missing`);
  process.exit(1);
}
rmSync(dst, { recursive: true, force: true });
mkdirSync(dst, { recursive: true });
for (const f of readdirSync(src)) {
  if (f.startsWith("expected")) continue;
  copyFileSync(join(src, f), join(dst, f));
}
console.log(`copy-tiny: ${readdirSync(dst).length} files → assets/tiny-k3`);
