/** `k3 cache-sim`: replay a recorded expert trace through other cache sizes and policies (no model). */
import { resolve } from "node:path";
import { EXIT_OK, UsageError } from "../errors.js";
import type { Args, Command } from "./command.js";
import { writeJson } from "./shared.js";

export const command: Command = {
  usage: "usage: k3 cache-sim --trace DIR [--slots 0,4,16,...] [--policy lru,s3fifo,belady,pinned] [--json FILE]",
  about: `Replays the expert requests a run recorded (k3 run --dump-cache-trace DIR) through per-layer caches
of other sizes: the hit rate of the store's LRU, S3-FIFO, Belady's offline bound and a fixed set of
each layer's hottest experts, the cache size in GB and the expert bytes read per token under LRU,
so --cache-gb can be chosen without re-running the model. Default sizes: 0, 1, 2, 4, ... experts
per layer and the run's own.`,
  sections: [{ options: ["trace", "slots", "policy", ["json", { help: 'write the table as JSON ("-" = stdout)' }]] }],
  run,
};

async function run({ values }: Args): Promise<number> {
  if (typeof values.trace !== "string") throw new UsageError("k3 cache-sim: --trace DIR is required (a directory written by k3 run --dump-cache-trace DIR)");
  const { CACHE_POLICIES } = await import("@k3/moe-stream");
  const { cacheSimReport, formatCacheSim } = await import("../cache-trace.js");
  type Policy = (typeof CACHE_POLICIES)[number];
  const policies = values.policy === undefined ? [...CACHE_POLICIES] : String(values.policy).split(",").map((p) => p.trim());
  for (const p of policies) if (!(CACHE_POLICIES as readonly string[]).includes(p)) throw new UsageError(`--policy ${p}: expected some of ${CACHE_POLICIES.join(", ")}`);
  const report = cacheSimReport(resolve(values.trace), values.slots ?? null, policies as Policy[]);
  process.stdout.write(formatCacheSim(report, policies as Policy[]) + "\n");
  writeJson(values.json, report);
  return EXIT_OK;
}
