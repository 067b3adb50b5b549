/**
 * `k3 run --dump-cache-trace DIR`: records every MoE layer forward's expert request (the layer and
 * its unique experts in first-use order, exactly what the expert store is asked for) and writes
 *   DIR/expert_trace.bin   int32 LE triples (request, layer, expert) (@k3/moe-stream parseCacheTrace)
 *   DIR/expert_hist.json   how often each layer's experts were requested, plus the run's figures
 * for `k3 cache-sim DIR`, which replays the trace through other cache sizes and policies.
 */
import { formatBytes } from "@k3/native";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { encodeCacheTrace, parseCacheTrace, simulateCache, simulateCacheSizes, type CachePolicy, type CacheTraceRequest, type ExpertCachePolicy } from "@k3/moe-stream";
import { UsageError } from "./errors.js";

export const TRACE_FILE = "expert_trace.bin";
export const HIST_FILE = "expert_hist.json";

/** What expert_hist.json holds besides the counts (cache-sim prints and uses it). */
export interface TraceMeta {
  format: "k3-expert-trace-v1";
  model: string;
  fingerprint: string;
  /** Bytes of one routed expert (w1 + w2 + w3 with scales), for bytes-per-token estimates. */
  expert_bytes: number;
  num_experts: number;
  top_k: number;
  /** The expert cache the run had (slots per MoE layer, policy) and its measured resident hit rate. */
  slots_per_layer: number;
  /** Absent in traces written before the policy was recorded (those runs used "lru"). */
  cache_policy?: ExpertCachePolicy;
  resident_hit_rate: number | null;
  tokens: number;
  requests: number;
}

export class ExpertTraceRecorder {
  readonly requests: CacheTraceRequest[] = [];

  record(layer: number, experts: ArrayLike<number>): void {
    this.requests.push({ layer, experts: [...new Set(Array.from(experts))] });
  }

  /** Writes the trace and the histogram into `dir` (created if missing). */
  write(dir: string, meta: Omit<TraceMeta, "format" | "requests">): void {
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, TRACE_FILE), encodeCacheTrace(this.requests));
    const hist: Record<string, Record<string, number>> = {};
    for (const r of this.requests) {
      const h = (hist[r.layer] ??= {});
      for (const e of r.experts) h[e] = (h[e] ?? 0) + 1;
    }
    const full: TraceMeta & { histogram: typeof hist } = { format: "k3-expert-trace-v1", ...meta, requests: this.requests.length, histogram: hist };
    writeFileSync(join(dir, HIST_FILE), JSON.stringify(full, null, 1) + "\n");
  }
}

// ---------------------------------------------------------------- k3 cache-sim

export interface CacheSimRow {
  slots_per_layer: number;
  cache_bytes: number;
  hit_rate: Record<string, number>;
  /** Expert bytes read per token at this size under `policy`. */
  expert_bytes_per_token: number;
  /** The store's default policy ("lfu"), whose misses expert_bytes_per_token counts. */
  policy: ExpertCachePolicy;
}

export interface CacheSimReport {
  meta: TraceMeta;
  moe_layers: number;
  rows: CacheSimRow[];
}

/** Reads DIR's trace and histogram and replays them at each size under each policy. */
export function cacheSimReport(dir: string, slots: number[] | null, policies: readonly CachePolicy[]): CacheSimReport {
  const read = (f: string) => {
    try {
      return readFileSync(join(dir, f));
    } catch (e) {
      throw new UsageError(`--trace ${dir}: cannot read ${f} (${(e as NodeJS.ErrnoException).code}); write one with k3 run --dump-cache-trace ${dir}`);
    }
  };
  let meta: TraceMeta;
  try {
    meta = JSON.parse(read(HIST_FILE).toString("utf8"));
  } catch (e) {
    if (e instanceof UsageError) throw e;
    throw new UsageError(`${join(dir, HIST_FILE)}: not JSON (${(e as Error).message})`, { cause: e });
  }
  if (meta?.format !== "k3-expert-trace-v1") throw new UsageError(`${join(dir, HIST_FILE)}: format ${JSON.stringify(meta?.format)}, expected "k3-expert-trace-v1"`);
  let trace: CacheTraceRequest[];
  try {
    trace = parseCacheTrace(read(TRACE_FILE), join(dir, TRACE_FILE));
  } catch (e) {
    throw e instanceof UsageError ? e : new UsageError((e as Error).message, { cause: e });
  }
  if (trace.length !== meta.requests) throw new UsageError(`${join(dir, TRACE_FILE)}: ${trace.length} requests, but ${HIST_FILE} says ${meta.requests} (files from different runs?)`);
  const moeLayers = new Set(trace.map((r) => r.layer)).size;
  const sizes = slots ?? defaultSizes(meta);
  const sim = simulateCacheSizes(trace, sizes, policies);
  const rows: CacheSimRow[] = sizes.map((s) => {
    const at = sim.filter((r) => r.slotsPerLayer === s);
    const hit = Object.fromEntries(at.map((r) => [r.policy, r.hitRate]));
    const store = at.find((r) => r.policy === STORE_POLICY) ?? simulateCache(trace, STORE_POLICY, s);
    const misses = store.requests - store.hits;
    return {
      slots_per_layer: s,
      cache_bytes: s * moeLayers * meta.expert_bytes,
      hit_rate: hit,
      expert_bytes_per_token: meta.tokens > 0 ? (misses * meta.expert_bytes) / meta.tokens : 0,
      policy: STORE_POLICY,
    };
  });
  return { meta, moe_layers: moeLayers, rows };
}

/** The policy whose reads per token the table prints: the expert store's default. */
const STORE_POLICY: ExpertCachePolicy = "lfu";

/** 0, 1, 2, 4, ... up to the expert count, plus the run's own size. */
function defaultSizes(meta: TraceMeta): number[] {
  const s = new Set<number>([0, meta.slots_per_layer]);
  for (let n = 1; n <= meta.num_experts; n *= 2) s.add(n);
  return [...s].sort((a, b) => a - b);
}

export function formatCacheSim(r: CacheSimReport, policies: readonly CachePolicy[]): string {
  const m = r.meta;
  const pct = (x: number | null | undefined) => (x === null || x === undefined ? "n/a" : `${(100 * x).toFixed(1)}%`);
  const lines = [
    `expert-cache simulation: ${m.requests} requests over ${r.moe_layers} MoE layers, ${m.tokens} tokens (${m.model})`,
    `the run itself: ${m.slots_per_layer} slots/layer (${m.cache_policy ?? "lru"}), measured resident hit rate ${pct(m.resident_hit_rate)}; one expert ${formatBytes(m.expert_bytes)}`,
    "",
    ["slots/layer", "    cache", ...policies.map((p) => p.padStart(8)), `${STORE_POLICY} expert reads/token`].join("  "),
  ];
  for (const row of r.rows)
    lines.push(
      [
        String(row.slots_per_layer).padStart(11),
        formatBytes(row.cache_bytes).padStart(9),
        ...policies.map((p) => pct(row.hit_rate[p]).padStart(8)),
        formatBytes(row.expert_bytes_per_token).padStart(22),
      ].join("  "),
    );
  lines.push(
    "",
    "lfu: the expert store's default (--cache-policy), lru: its alternative (both replay a cold run exactly: the store",
    "decides a request's misses in request order, as here); s3fifo: S3-FIFO; belady: the offline bound for a cache filled on demand; pinned: each layer's hottest experts loaded",
    "before the run and never changed (so their first uses hit too, which is why it can exceed belady).",
  );
  return lines.join("\n");
}
