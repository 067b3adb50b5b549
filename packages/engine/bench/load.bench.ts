// Resident load speed against three ceilings of the same bytes, measured in the same run:
//   disk      the same blocks in the same pieces read by the same engine at the same depth into a
//             reused buffer, O_DIRECT (the disk alone; in-process, before and after the load);
//   fresh     the same reads into fresh memory of the same size: O_DIRECT with the destination
//             faulted by the reads, and buffered (a `cat` into memory); the better of the two;
//   backing   fresh memory of the same size faulted in alone (MADV_POPULATE_WRITE, one thread per core);
// and bound = min(disk, backing): what a load overlapping the two perfectly reaches. Each of fresh
// direct, fresh buffered and backing runs in its own process after its own memory-state preparation
// (below), so each meets memory the way the load did; the load's process also measures them in-process
// after the load (the "in-process" columns; memory unmapped by one is reused by the next). Per round
// the phases run load, fresh-direct, fresh-buffered, backing, each shard's page cache dropped
// (POSIX_FADV_DONTNEED) before each read. Per run: load GB/s and its ratio to each ceiling, the
// populate threads' summed faulting seconds, the seconds with a read in flight, minor faults,
// user/sys CPU, peak RSS.
//
// The memory state before a run decides what fresh pages cost, so it is a mode:
//   drop  `sync; echo 3 > /proc/sys/vm/drop_caches` (root) then 4 s: free memory the VM has reported
//         back to its host (free page reporting), so every fresh page is also backed by the host.
//   full  files read through the page cache first (RAM full of cache, as on a machine that has run a
//         while): K3_LOAD_FILL (colon-separated paths), else the shards; the load's memory then comes
//         from cache the kernel reclaims (or the shards' cache, which the ceiling drops just before).
//
//   node --import tsx bench/load.bench.ts DIR [runs=2] [mode=drop|full] [populate threads=0] [prefault=populate[,huge,...]]
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
const populate = (process.argv[5] ?? "0").split(",").map(Number);
// Page faulting of the load's memory, alternated per round (K3_LOAD_PREFAULT values).
const prefaults = (process.argv[6] ?? "populate").split(",");
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

function child(args: string[], threads: number): string {
  return execFileSync(process.execPath, ["--import", "tsx", join(import.meta.dirname, "load-child.ts"), dir!, ...args], {
    encoding: "utf8",
    env: { ...process.env, K3_LOAD_POPULATE_THREADS: String(threads) },
    stdio: ["ignore", "pipe", "inherit"],
  });
}
const lastJson = <T>(out: string): T => JSON.parse(out.trim().split("\n").at(-1)!);

const rows = [];
let prep = "";
const t0 = new Date().toISOString().slice(11, 16);
for (let i = 0; i < runs; i++) {
  // The ceilings alone once per round, each in its own process after its own preparation.
  const alone: Record<string, number> = {};
  for (const kind of ["fresh-direct", "fresh-buffered", "backing"]) {
    prep = prepare();
    alone[kind] = lastJson<{ gbps: number }>(child(["ceiling", kind], populate[0])).gbps;
  }
  const fresh = Math.max(alone["fresh-direct"], alone["fresh-buffered"]);
  for (const pf of prefaults)
    for (const threads of pf === "populate" ? populate : [0]) {
      prep = prepare();
      const c = lastJson<Child>(child(["pool", pf, "ceiling"], threads));
      const gbps = c.bytes / c.readSeconds / 1e9;
      const [before, after] = c.ceilingRunsGbps ?? [];
      const disk = c.ceilingGbps!;
      const bound = Math.min(disk, alone.backing);
      const f = c.fresh!;
      rows.push({
        run: `${i + 1}`,
        prefault: pf,
        "populate threads": c.populateThreads ?? threads,
        GB: c.bytes / 1e9,
        "load s": c.readSeconds,
        "load GB/s": gbps,
        "disk (reused buffer) before / after GB/s": `${before.toFixed(2)} / ${after.toFixed(2)}`,
        "fresh read direct / buffered GB/s": `${alone["fresh-direct"].toFixed(2)} / ${alone["fresh-buffered"].toFixed(2)}`,
        "backing GB/s": alone.backing,
        "bound min(disk, backing) GB/s": bound,
        "x disk": gbps / disk,
        "x fresh read": gbps / fresh,
        "x backing": gbps / alone.backing,
        "x bound": gbps / bound,
        "in-process after the load: fresh direct / buffered / backing GB/s": `${f.readDirectGbps.toFixed(2)} / ${f.readBufferedGbps.toFixed(2)} / ${f.backingGbps.toFixed(2)}`,
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
  title: `Resident load of ${dir}, memory state "${mode}" (${prep}) before each phase, ${t0} UTC`,
  command: `node --import tsx bench/load.bench.ts ${dir} ${runs} ${mode} ${populate.join(",")} ${prefaults.join(",")}`,
  rows,
  notes: [
    "load s = the native load (mapping, faulting, reading); GB = 1e9 bytes read from the shards. disk: the same blocks in the same pieces, read by the same engine at the same depth, O_DIRECT, into a reused buffer, page cache dropped per file (POSIX_FADV_DONTNEED), before and after the load (x disk against the better).",
    "fresh read: the same reads into fresh memory of the same size (O_DIRECT, pages faulted by the reads; buffered), each in its own process after the same memory preparation; backing: fresh memory of the same size faulted in alone (MADV_POPULATE_WRITE, one thread per core); bound = min(disk, backing).",
    "faulting s = seconds the populate threads spent in MADV_POPULATE_WRITE, summed over them; reads in flight s = wall seconds with at least one read in flight.",
  ],
});
