/**
 * @k3/dense's process-wide SIMD level and thread count in a test file, without importing
 * @k3/dense: the caller passes its functions in (`import * as dense`), so @k3/dense's own tests,
 * which cannot depend on @k3/test-utils, use this module by path.
 */
import { afterAll } from "vitest";

/** The functions of @k3/dense this module needs. */
export interface DenseSettings<L extends string> {
  bestSimdLevel(): L;
  simdLevel(): L;
  setSimdLevel(level: L): unknown;
  threadCount(): number;
  setThreadCount(threads: number): unknown;
}

const LEVELS = ["scalar", "avx2", "avx512"] as const;

/** The levels up to `best`, scalar first; throws on a level this list does not know (no silent empty loop). */
export function simdLevelsUpTo<L extends string>(best: L): L[] {
  const i = (LEVELS as readonly string[]).indexOf(best);
  if (i < 0) throw new Error(`unknown SIMD level '${best}' (known: ${LEVELS.join(", ")})`);
  return LEVELS.slice(0, i + 1) as readonly string[] as L[];
}

/** A setter of the SIMD level and thread count the next kernel calls run at (`at("avx2", 3)`). */
export function settingsSetter<L extends string>(dense: DenseSettings<L>): (level: L, threads: number) => void {
  return (level, threads) => {
    dense.setSimdLevel(level);
    dense.setThreadCount(threads);
  };
}

/**
 * The SIMD levels this CPU can run, scalar first, for a test file that sets levels and thread
 * counts itself: the level and thread count in force now are restored after the file's tests.
 */
export function testedSimdLevels<L extends string>(dense: DenseSettings<L>): L[] {
  const level0 = dense.simdLevel();
  const threads0 = dense.threadCount();
  afterAll(() => {
    dense.setSimdLevel(level0);
    dense.setThreadCount(threads0);
  });
  return simdLevelsUpTo(dense.bestSimdLevel());
}
