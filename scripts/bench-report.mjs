// Shared by every package's benchmark: timing with warm-up, and one report format.
// A bench prints a markdown table and writes bench-results/<name>.json (K3_BENCH_OUT overrides).
import { mkdirSync, writeFileSync } from "node:fs";
import { cpus } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");

/** Best and median wall time (ms) of fn over at least minRuns runs and minMs milliseconds. */
export async function timeIt(fn, { minRuns = 5, minMs = 300, warmup = 1 } = {}) {
  for (let i = 0; i < warmup; i++) await fn();
  const times = [];
  const start = performance.now();
  while (times.length < minRuns || performance.now() - start < minMs) {
    const t0 = performance.now();
    await fn();
    times.push(performance.now() - t0);
  }
  times.sort((a, b) => a - b);
  return { best: times[0], median: times[times.length >> 1], runs: times.length };
}

/** Renders rows as a markdown table: the union of their keys, in first-seen order ("-" where a row lacks one). */
export function markdownTable(rows) {
  if (rows.length === 0) return "";
  const keys = [...new Set(rows.flatMap((r) => Object.keys(r)))];
  const cell = (v) => (v === undefined ? "-" : typeof v === "number" ? (Number.isInteger(v) ? String(v) : v.toPrecision(4)) : String(v));
  return [
    `| ${keys.join(" | ")} |`,
    `|${keys.map(() => "---").join("|")}|`,
    ...rows.map((r) => `| ${keys.map((k) => cell(r[k])).join(" | ")} |`),
  ].join("\n");
}

/** Prints the table and writes the JSON report; returns the report path. */
export function writeReport(name, { title, command, rows, notes = [] }) {
  const outDir = process.env.K3_BENCH_OUT ?? join(root, "bench-results");
  mkdirSync(outDir, { recursive: true });
  const machine = { cpu: cpus()[0]?.model ?? "unknown", cores: cpus().length, node: process.version };
  const report = { name, title, command, date: new Date().toISOString(), machine, rows, notes };
  const file = join(outDir, `${name}.json`);
  writeFileSync(file, JSON.stringify(report, null, 2));
  writeFileSync(join(outDir, `${name}.md`), renderMarkdown(report));
  console.log(renderMarkdown(report));
  return file;
}

export function renderMarkdown(report) {
  const lines = [`### ${report.title}`, "", `\`${report.command}\` on ${report.machine.cpu} (${report.machine.cores} cores), ${report.date.slice(0, 10)}`, "", markdownTable(report.rows)];
  for (const n of report.notes) lines.push("", n);
  return lines.join("\n") + "\n";
}
