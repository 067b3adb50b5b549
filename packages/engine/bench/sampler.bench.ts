/**
 * One sampler draw over K3's 163,840 logits (temperature 1; top-p 1 and 0.95; top-k 40), side by
 * side in the same run with the comparator sort the sampler used before (`ids.sort((a, b) =>
 * logits[b] - logits[a] || a - b)`, the same order) and with one pass over the row (its floor).
 * Run: /work/bin/k3-excl node --import tsx bench/sampler.bench.ts
 */
// @ts-expect-error: plain .mjs helper shared by every package's bench
import { timeIt, writeReport } from "../../../scripts/bench-report.mjs";
import { Pcg32, Sampler, sortByLogit } from "../src/sampler.js";

type Timing = { best: number; median: number; runs: number };
const time = timeIt as (fn: () => unknown, o?: { minRuns?: number; minMs?: number; warmup?: number }) => Promise<Timing>;

const V = 163840;
const rng = new Pcg32(1, 1);
const row = new Float32Array(V).map(() => (rng.nextUnit() - 0.5) * 10);
const ids = Array.from({ length: V }, (_, i) => i);
const comparator = await time(() => [...ids].sort((a, b) => row[b] - row[a] || a - b), { minRuns: 10 });
const packed = await time(() => sortByLogit(row, ids), { minRuns: 10 });
let sink = 0;
const pass = await time(() => {
  for (let i = 0; i < V; i++) sink += row[i];
}, { minRuns: 20 });
const rows: Record<string, string | number>[] = [
  { what: "sort of 163,840 ids: comparator (before)", "ms best": comparator.best, "ms median": comparator.median, "/ one pass": comparator.best / pass.best },
  { what: "sort of 163,840 ids: radix sort of order keys (now)", "ms best": packed.best, "ms median": packed.median, "/ one pass": packed.best / pass.best, "speed-up": comparator.best / packed.best },
];
for (const [label, o] of [["draw, temperature 1", { temperature: 1 }], ["draw, temperature 1, top-p 0.95", { temperature: 1, topP: 0.95 }], ["draw, temperature 1, top-k 40", { temperature: 1, topK: 40 }]] as const) {
  const s = new Sampler({ ...o, seed: 3 });
  const t = await time(() => s.sample(row), { minRuns: 10 });
  rows.push({ what: label, "ms best": t.best, "ms median": t.median, "/ one pass": t.best / pass.best });
}
writeReport("sampler", {
  title: "Sampler draw over the K3 vocabulary (163,840 logits)",
  command: "/work/bin/k3-excl node --import tsx bench/sampler.bench.ts",
  rows,
  notes: [`One pass over the row (sum): ${pass.best.toFixed(3)} ms best. (${sink > 0 ? "+" : "-"})`],
});
