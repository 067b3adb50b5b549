/**
 * @k3/test-utils (private): what the k3 packages' tests and benches share.
 * - random: `uniform`, `randomBytes`, `unitRows` (deterministic xorshift32 data), `mulberry32`
 * - paths: `repoRoot`, `fixturesDir`, `componentsDir`, `testDataDir` (K3_TEST_DATA)
 * - fixtures: `readFixture` (through @k3/safetensors), `get`, `f32`, `manifestTol`
 * - fixture-file (no @k3 imports): `fixtureExists`, `decodeTensor`, `readFixtureMinimal` (for @k3/dense)
 * - compare: `closeTo`, `firstMismatch`, `relErr`, `bytesEqual`
 * - levels: `availableSimdLevels`, `forEachSimdLevelAndThreads`, `expectBitIdentical`
 * - settings (no @k3 imports): `testedSimdLevels` (levels, settings restored after the file), `settingsSetter`
 * - bench: typed `timeIt`, `writeReport` of scripts/bench-report.mjs; `AdjacentCeiling` (no @k3 imports)
 * native/fake_dense.c: a stand-in k3_dense_api for sanitizer runs of an addon's kernels.
 */
export { mulberry32, randomBytes, uniform, unitRows } from "./random.js";
export { componentsDir, fixturesDir, hasTestData, repoRoot, testDataDir } from "./paths.js";
export { f32, get, manifestTol, readFixture } from "./fixtures.js";
export { decodeTensor, fixtureExists, readFixtureMinimal, type FixtureTensor } from "./fixture-file.js";
export { bytesEqual, closeTo, firstMismatch, relErr, type Tol } from "./compare.js";
export { settingsSetter, simdLevelsUpTo, testedSimdLevels, type DenseSettings } from "./settings.js";
export { availableSimdLevels, expectBitIdentical, forEachSimdLevelAndThreads, THREAD_COUNTS } from "./levels.js";
export { AdjacentCeiling, timeIt, writeReport, type TimeOptions, type Timing } from "./bench.js";
