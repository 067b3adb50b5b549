// `pnpm bench`: runs each package's bench one after another (never in parallel: they measure the
// machine), then joins their reports into bench-results/SUMMARY.md.
import { spawnSync } from "node:child_process";
import { existsSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { renderMarkdown } from "./bench-report.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const outDir = process.env.K3_BENCH_OUT ?? join(root, "bench-results");
let failed = 0;
for (const dir of readdirSync(join(root, "packages")).sort()) {
  const pkg = JSON.parse(readFileSync(join(root, "packages", dir, "package.json"), "utf8"));
  if (!pkg.scripts?.bench) continue;
  console.log(`\n=== ${pkg.name}: ${pkg.scripts.bench}`);
  const r = spawnSync("pnpm", ["run", "bench"], { cwd: join(root, "packages", dir), stdio: "inherit", env: { ...process.env, K3_BENCH_OUT: outDir } });
  if (r.status !== 0) failed++;
}
if (existsSync(outDir)) {
  const reports = readdirSync(outDir).filter((f) => f.endsWith(".json")).sort();
  const md = reports.map((f) => renderMarkdown(JSON.parse(readFileSync(join(outDir, f), "utf8")))).join("\n");
  writeFileSync(join(outDir, "SUMMARY.md"), `# k3 benchmarks\n\n${md}`);
  console.log(`\nwrote ${join(outDir, "SUMMARY.md")} (${reports.length} reports)`);
}
process.exit(failed ? 1 : 0);
