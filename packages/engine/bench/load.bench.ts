// Resident load speed against the disk: the read-pool load (prefault populate) with its pages
// faulted in by one thread or one per core, alternated A/B/A/B, each run a fresh process that also
// measures the ceiling in-process (the same blocks in the same pieces read by the same engine at the
// same depth into a reused buffer, O_DIRECT, each shard's page cache dropped with
// POSIX_FADV_DONTNEED, before and after the load). Per run: load GB/s, both ceilings, the ratio to
// the better one, the populate threads' summed faulting seconds, the seconds with a read in flight,
// minor faults, user/sys CPU, peak RSS.
//
// The memory state before a run decides what fresh pages cost, so it is a mode:
//   drop  `sync; echo 3 > /proc/sys/vm/drop_caches` (root) then 4 s: free memory the VM has reported
//         back to its host (free page reporting), so every fresh page is also backed by the host.
//   full  files read through the page cache first (RAM full of cache, as on a machine that has run a
//         while): K3_LOAD_FILL (colon-separated paths), else the shards; the load's memory then comes
//         from cache the kernel reclaims (or the shards' cache, which the ceiling drops just before).
//
//   node --import tsx bench/load.bench.ts DIR [runs=2] [mode=drop|full] [populate threads=0,1]
// Run it whole under the exclusive bench lock (e.g. /work/bin/k3-excl node ...): it takes no lock itself.
import { execFileSync } from "node:child_process";
import { readdirSync } from "node:fs";
import { join } from "node:path";
// @ts-expect-error: plain .mjs helper shared by every package's bench
import { writeReport } from "../../../scripts/bench-report.mjs";
import type { LoadStats } from "../src/model.js";

const dir = process.argv[2] ?? process.env.K3_LOAD_DIR;
if (!dir) throw new Error("usage: load.bench.ts CHECKPOINT_DIR [runs] [drop|full] [populateThreads,...]");
const runs = Number(process.argv[3] ?? 2);
const mode = process.argv[4] ?? "drop";
if (mode !== "drop" && mode !== "full") throw new Error(`mode ${mode}: expected drop or full`);
const populate = (process.argv[5] ?? "0,1").split(",").map(Number);
const shards = readdirSync(dir).filter((f) => f.endsWith(".safetensors")).map((f) => join(dir, f));

type Child = LoadStats & { peakRss: number };

function prepare(): string {
  if (mode === "full") {
    const fill = process.env.K3_LOAD_FILL?.split(":") ?? [];
    execFileSync("sh", ["-c", `cat ${[...fill, ...shards].map((s) => `'${s}'`).join(" ")} > /dev/null`]);
    return `${fill.length > 0 ? `${fill.length} files of K3_LOAD_FILL and ` : ""}the shards read through the page cache first`;
  }
  try {
    execFileSync("sh", ["-c", "sync; echo 3 > /proc/sys/vm/drop_caches"], { stdio: "ignore" });
  } catch {
    return "drop_caches refused (not root): page cache as it was";
  }
  execFileSync("sleep", ["4"]);
  return "drop_caches + 4 s";
}

function once(threads: number): Child {
  const out = execFileSync(process.execPath, ["--import", "tsx", join(import.meta.dirname, "load-child.ts"), dir!, "pool", "populate", "ceiling"], {
    encoding: "utf8",
    env: { ...process.env, K3_LOAD_POPULATE_THREADS: String(threads) },
    stdio: ["ignore", "pipe", "inherit"],
  });
  return JSON.parse(out.trim().split("\n").at(-1)!);
}

const rows = [];
let prep = "";
const t0 = new Date().toISOString().slice(11, 16);
for (let i = 0; i < runs; i++) {
  for (const threads of populate) {
    prep = prepare();
    const c = once(threads);
    const gbps = c.bytes / c.readSeconds / 1e9;
    const [before, after] = c.ceilingRunsGbps ?? [];
    rows.push({
      run: `${i + 1}`,
      "populate threads": c.populateThreads ?? threads,
      GB: c.bytes / 1e9,
      "load s": c.readSeconds,
      "load GB/s": gbps,
      "ceiling before GB/s": before,
      "ceiling after GB/s": after,
      "x ceiling": gbps / c.ceilingGbps!,
      "faulting s (summed)": c.populateSeconds ?? 0,
      "reads in flight s": c.readBusySeconds ?? 0,
      "minor faults": c.pageFaultsMinor,
      "user s": c.userSeconds,
      "sys s": c.systemSeconds,
      "peak RSS GB": c.peakRss / 1e9,
    });
    // Every run as it ends (a long stretch cut short keeps what it measured).
    console.error(JSON.stringify(rows.at(-1)), c.method);
  }
}
writeReport(`engine-load-${mode}`, {
  title: `Resident load of ${dir}, memory state "${mode}" (${prep}), ${t0} UTC`,
  command: `node --import tsx bench/load.bench.ts ${dir} ${runs} ${mode} ${populate.join(",")}`,
  rows,
  notes: [
    "load s = the native load (mapping, faulting, reading); GB = 1e9 bytes read from the shards. Ceiling: the same blocks in the same pieces, read by the same engine at the same depth, O_DIRECT, into a reused buffer, page cache dropped per file (POSIX_FADV_DONTNEED), before and after the load; x ceiling is against the better of the two.",
    "faulting s = seconds the populate threads spent in MADV_POPULATE_WRITE, summed over them; reads in flight s = wall seconds with at least one read in flight.",
  ],
});
