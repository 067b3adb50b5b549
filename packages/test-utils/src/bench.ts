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
