/** scripts/bench-report.mjs with types, for the benches. */
// @ts-expect-error: plain .mjs helper shared by every package's bench
import { timeIt as timeItUntyped, writeReport as writeReportUntyped } from "../../../scripts/bench-report.mjs";

export interface Timing {
  best: number;
  median: number;
  runs: number;
}

export interface TimeOptions {
  minRuns?: number;
  minMs?: number;
  warmup?: number;
}

/** Best and median wall time (ms) of fn after warm-up. */
export const timeIt = timeItUntyped as (fn: () => unknown, options?: TimeOptions) => Promise<Timing>;

/** Prints the markdown table and writes bench-results/<name>.json. */
export const writeReport = writeReportUntyped as (name: string, report: { title: string; command: string; rows: Record<string, string | number>[]; notes?: string[] }) => unknown;

/**
 * The memory-read ceiling measured right before and right after each timed row, because the VM's
 * bandwidth drifts a lot when the host is busy; a row is judged against the mean of the two.
 * `measure(threads)` gives GB/s (e.g. @k3/dense memoryReadCeiling): a parameter, so that this
 * module has no @k3 import and @k3/dense's own bench can use it.
 */
export class AdjacentCeiling {
  /** Every ceiling measured, by thread count. */
  readonly seen = new Map<number, number[]>();

  constructor(private readonly measure: (threads: number) => number) {}

  /** The ceiling now for `threads`, recorded. */
  now(threads: number): number {
    const g = this.measure(threads);
    this.seen.set(threads, [...(this.seen.get(threads) ?? []), g]);
    return g;
  }

  /** Times fn between two ceiling measurements; `ceiling` is their mean (GB/s). */
  async time(threads: number, fn: () => unknown, options?: TimeOptions): Promise<{ timing: Timing; seconds: number; ceiling: number }> {
    const before = this.now(threads);
    const timing = await timeIt(fn, options);
    const ceiling = (before + this.now(threads)) / 2;
    return { timing, seconds: timing.best / 1e3, ceiling };
  }

  /** "1 thread(s) a-b GB/s, 2 thread(s) c-d GB/s": the range over the run, for the report notes. */
  range(): string {
    return [...this.seen].map(([t, g]) => `${t} thread(s) ${Math.min(...g).toFixed(1)}-${Math.max(...g).toFixed(1)} GB/s`).join(", ");
  }
}
