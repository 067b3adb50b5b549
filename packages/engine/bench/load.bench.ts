// Resident load speed against the disk: the per-tensor path (before) and the read-pool path (after,
// with each page pre-fault mode), best of 3 cold runs each in a fresh process, next to the ceiling:
// the same blocks in the same pieces read by the same engine at the same depth, page cache dropped
// per file with POSIX_FADV_DONTNEED (O_DIRECT where the filesystem allows), before and after the load.
// Cold cache before every run: `echo 3 > /proc/sys/vm/drop_caches` when root, else fadvise per file.
//
//   node --import tsx bench/load.bench.ts DIR [runs] [configs]   (each run takes `flock -x /tmp/k3-bench.lock`)
import { execFileSync } from "node:child_process";
import { readdirSync } from "node:fs";
import { join } from "node:path";
import { dropPageCache } from "@k3/moe-stream";
// @ts-expect-error: plain .mjs helper shared by every package's bench
import { writeReport } from "../../../scripts/bench-report.mjs";

const dir = process.argv[2] ?? process.env.K3_LOAD_DIR;
if (!dir) throw new Error("usage: load.bench.ts CHECKPOINT_DIR [runs]");
const runs = Number(process.argv[3] ?? 3);
const only = process.argv[4]?.split(",");
const shards = readdirSync(dir).filter((f) => f.endsWith(".safetensors")).map((f) => join(dir, f));

interface Child {
  seconds: number;
  readSeconds: number;
  bytes: number;
  ceilingGbps: number | null;
  pageFaultsMinor: number;
  userSeconds: number;
  systemSeconds: number;
  method: string;
  peakRss: number;
}

// Each run takes the exclusive bench lock itself (cold cache + one load, tens of seconds), so the
// lock is never held for the whole bench.
function once(args: string[]): Child {
  const child = [process.execPath, "--import", "tsx", join(import.meta.dirname, "load-child.ts"), dir, ...args].map((a) => `'${a}'`).join(" ");
  const out = execFileSync("flock", ["-x", "/tmp/k3-bench.lock", "sh", "-c", `sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null; ${child}`], { encoding: "utf8", stdio: ["ignore", "pipe", "inherit"] });
  return JSON.parse(out.trim().split("\n").at(-1)!);
}

const configs: [string, string[]][] = [
  ["per-tensor (before)", ["per-tensor"]],
  ["pool, prefault none (4 KiB)", ["pool", "none"]],
  ["pool, prefault huge (THP)", ["pool", "huge"]],
  ["pool, prefault populate (THP + POPULATE_WRITE)", ["pool", "populate", "ceiling"]],
];
const rows = [];
let dropMode = "";
const ceilings: number[] = [];
for (const [label, args] of configs.filter(([, a]) => !only || only.includes(a.slice(0, 2).join(":")))) {
  const all: Child[] = [];
  for (let i = 0; i < runs; i++) {
    for (const f of shards) dropPageCache(f);
    dropMode = process.getuid?.() === 0 ? "drop_caches + fadvise DONTNEED" : "fadvise DONTNEED";
    const c = once(args);
    all.push(c);
    if (c.ceilingGbps) ceilings.push(c.ceilingGbps);
    console.error(`${label} run ${i + 1}: ${(c.bytes / c.seconds / 1e9).toFixed(3)} GB/s, ${c.seconds.toFixed(2)} s${c.ceilingGbps ? `, ceiling ${c.ceilingGbps.toFixed(3)} GB/s` : ""}`);
  }
  const best = all.reduce((a, b) => (b.seconds < a.seconds ? b : a));
  rows.push({
    load: label,
    GB: best.bytes / 1e9,
    seconds: best.seconds,
    "read s": best.readSeconds,
    "GB/s": best.bytes / best.seconds / 1e9,
    "minor faults": best.pageFaultsMinor,
    "user s": best.userSeconds,
    "sys s": best.systemSeconds,
    "peak RSS GB": best.peakRss / 1e9,
    method: best.method,
  });
}
// The ceiling is measured in the populate runs; without them (a subset of configs) there is none.
const ceiling = ceilings.length > 0 ? Math.max(...ceilings) : null;
for (const r of rows) Object.assign(r, { "ceiling GB/s": ceiling ?? "n/a", "x ceiling": ceiling ? (r["GB/s"] as number) / ceiling : "n/a" });
writeReport("engine-load", {
  title: `Resident load of ${dir} (best of ${runs} cold runs)`,
  command: `node --import tsx bench/load.bench.ts ${dir} ${runs}${only ? " " + only.join(",") : ""}`,
  rows,
  notes: [
    `Ceiling: the same blocks in the same 8 MiB pieces, read by the same engine at depth 8, O_DIRECT, page cache dropped per file (POSIX_FADV_DONTNEED) before each; measured before and after each populate run (best of ${ceilings.length}). Cold cache before every run: ${dropMode}.`,
    "seconds = reads + building the layers (Model.load minus the expert store); GB = 1e9 bytes read from the shards.",
  ],
});

