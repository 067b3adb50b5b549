/**
 * @k3/test-utils (private): what the k3 packages' tests and benches share.
 * - random: `uniform`, `unitRows` (deterministic xorshift32 data)
 * - paths: `repoRoot`, `fixturesDir`, `componentsDir`, `testDataDir` (K3_TEST_DATA)
 * - fixtures: `readFixture`, `fixtureExists`, `get`, `f32`, `manifestTol`
 * - compare: `closeTo`, `firstMismatch`, `relErr`, `bytesEqual`
 * - levels: `availableSimdLevels`, `forEachSimdLevelAndThreads`, `expectBitIdentical`
 * - bench: typed `timeIt`, `writeReport` of scripts/bench-report.mjs
 * native/fake_dense.c: a stand-in k3_dense_api for sanitizer runs of an addon's kernels.
 */
export { uniform, unitRows } from "./random.js";
export { componentsDir, fixturesDir, hasTestData, repoRoot, testDataDir } from "./paths.js";
export { f32, fixtureExists, get, manifestTol, readFixture, type FixtureTensor } from "./fixtures.js";
export { bytesEqual, closeTo, firstMismatch, relErr, type Tol } from "./compare.js";
export { availableSimdLevels, expectBitIdentical, forEachSimdLevelAndThreads, THREAD_COUNTS } from "./levels.js";
export { timeIt, writeReport, type TimeOptions, type Timing } from "./bench.js";
