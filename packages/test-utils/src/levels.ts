/**
 * Bit-identity across the process-wide SIMD level and thread count of @k3/dense: run a kernel at
 * scalar x1, then at every level this CPU has and 1/2/3 threads, and require the same bytes.
 */
import { bestSimdLevel, setSimdLevel, setThreadCount, simdLevel, threadCount, type SimdLevel } from "@k3/dense";
import { expect } from "vitest";
import { bytesEqual } from "./compare.js";
import { simdLevelsUpTo } from "./settings.js";

/** The SIMD levels this CPU can run, scalar first. */
export function availableSimdLevels(): SimdLevel[] {
  return simdLevelsUpTo(bestSimdLevel());
}

/** The thread counts every kernel is checked at. */
export const THREAD_COUNTS: readonly number[] = [1, 2, 3];

/** Calls fn(level, threads) at every available level x thread count; restores the settings after. */
export function forEachSimdLevelAndThreads(fn: (level: SimdLevel, threads: number) => void): void {
  const level0 = simdLevel();
  const threads0 = threadCount();
  try {
    for (const level of availableSimdLevels())
      for (const threads of THREAD_COUNTS) {
        setSimdLevel(level);
        setThreadCount(threads);
        fn(level, threads);
      }
  } finally {
    setSimdLevel(level0);
    setThreadCount(threads0);
  }
}

/** Runs fn at scalar x1, then everywhere else; every output must be byte-identical to scalar x1. */
export function expectBitIdentical(label: string, fn: () => ArrayBufferView[]): void {
  const level0 = simdLevel();
  const threads0 = threadCount();
  setSimdLevel("scalar");
  setThreadCount(1);
  let ref: ArrayBufferView[];
  try {
    ref = fn();
  } finally {
    setSimdLevel(level0);
    setThreadCount(threads0);
  }
  forEachSimdLevelAndThreads((level, threads) => {
    const got = fn();
    expect(got.length, `${label}: output count at ${level} x${threads}`).toBe(ref.length);
    got.forEach((g, i) => expect(bytesEqual(g, ref[i]), `${label}: output ${i} at ${level} x${threads}`).toBe(true));
  });
}
