/** Where the repo, its fixtures and the third-party test data are. */
import { existsSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

/** The monorepo root (this file is packages/test-utils/src/paths.ts). */
export const repoRoot = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");

/** fixtures/ of the repo (the PyTorch reference outputs). */
export const fixturesDir = join(repoRoot, "fixtures");

/** fixtures/components: one safetensors file per component, MANIFEST.json with tolerances. */
export const componentsDir = join(fixturesDir, "components");

/** Third-party data (never committed): K3_TEST_DATA, else ../shared/data next to the repo. */
export const testDataDir = process.env.K3_TEST_DATA ?? resolve(repoRoot, "..", "shared", "data");

/** True when the third-party data directory exists. */
export function hasTestData(): boolean {
  return existsSync(testDataDir);
}
