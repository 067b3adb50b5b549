/**
 * Offline expert-cache simulator: replays a trace of MoE requests (one per layer forward: the
 * layer and its unique experts in first-use order) through a per-layer cache of `slotsPerLayer`
 * slots under several policies, so a cache size can be chosen without re-running the model (a K3
 * token takes tens of seconds). Traces come from `k3 run --dump-cache-trace DIR`.
 *
 * Policies (each partitioned per layer, as the ExpertStore is):
 * - "lfu": the ExpertStore's default (cache-policy.ts). A request counts its experts, looks every
 *   one up (hits move to the most-recent end, in request order), then offers its misses: each takes
 *   the slot of the layer's least-requested resident expert outside the request only if requested
 *   more often. The store decides the same way when the request is made, so a replay of a cold
 *   run's trace gives the store's hits exactly (a warm filling the cache first is not replayed).
 * - "lru": the store's `cachePolicy: "lru"`: each miss evicts the layer's least recently used entry
 *   outside the request (the store has the request's own experts pinned).
 * - "s3fifo": S3-FIFO (Yang et al., SOSP 2023): new entries go to a small FIFO, entries found in the
 *   ghost FIFO (recently evicted ids, 90 % of the slots) to the main FIFO; 2-bit access counters.
 *   When the layer is full, the small FIFO gives up an entry while it holds >= 10 % of the slots
 *   (one hit while there sends it to main instead of out), else main does (a non-zero counter
 *   buys another round, decremented).
 * - "belady": Belady's offline MIN rule (evict the entry whose next use is farthest; a miss needed
 *   later than everything cached, or never again, is not admitted): the bound to compare with.
 * - "pinned": a fixed set per layer, the layer's `slotsPerLayer` most requested experts of the whole
 *   trace (ties to the lower id), never changed: what pinning the hottest experts would give.
 */

import { admits, chooseVictim, RequestCounts, type ExpertCachePolicy } from "./cache-policy.js";

export type CachePolicy = "lfu" | "lru" | "s3fifo" | "belady" | "pinned";
export const CACHE_POLICIES: readonly CachePolicy[] = ["lfu", "lru", "s3fifo", "belady", "pinned"];

/** One MoE layer forward: its unique experts in first-use order. */
export interface CacheTraceRequest {
  layer: number;
  experts: number[];
}

export interface CacheSimResult {
  policy: CachePolicy;
  slotsPerLayer: number;
  /** Expert lookups (unique experts per request, summed) and how many were resident. */
  requests: number;
  hits: number;
  hitRate: number;
}

/** Replays `trace` through one policy at one cache size. */
export function simulateCache(trace: CacheTraceRequest[], policy: CachePolicy, slotsPerLayer: number): CacheSimResult {
  if (!Number.isInteger(slotsPerLayer) || slotsPerLayer < 0) throw new RangeError(`simulateCache: slotsPerLayer must be an integer >= 0, got ${slotsPerLayer}`);
  if (!CACHE_POLICIES.includes(policy)) throw new RangeError(`simulateCache: unknown policy ${JSON.stringify(policy)} (expected ${CACHE_POLICIES.join(", ")})`);
  let requests = 0;
  let hits = 0;
  for (const reqs of byLayer(trace).values()) {
    requests += reqs.reduce((n, r) => n + r.length, 0);
    if (slotsPerLayer === 0) continue;
    hits += LAYER_SIMULATORS[policy](reqs, slotsPerLayer);
  }
  return { policy, slotsPerLayer, requests, hits, hitRate: requests > 0 ? hits / requests : 0 };
}

/** Every policy at every size: the table `k3 cache-sim` prints. */
export function simulateCacheSizes(trace: CacheTraceRequest[], slots: number[], policies: readonly CachePolicy[] = CACHE_POLICIES): CacheSimResult[] {
  const out: CacheSimResult[] = [];
  for (const s of slots) for (const p of policies) out.push(simulateCache(trace, p, s));
  return out;
}

/** The requests of each layer, in trace order (layers never share a cache partition). */
function byLayer(trace: CacheTraceRequest[]): Map<number, number[][]> {
  const m = new Map<number, number[][]>();
  for (const r of trace) {
    if (new Set(r.experts).size !== r.experts.length) throw new RangeError(`simulateCache: a request of layer ${r.layer} lists an expert twice`);
    let l = m.get(r.layer);
    if (!l) m.set(r.layer, (l = []));
    l.push(r.experts);
  }
  return m;
}

type LayerSimulator = (requests: number[][], slots: number) => number;

// ---------------------------------------------------------------- the store's policies (lfu, lru)

/**
 * The ExpertStore's rule under `policy` (cache-policy.ts): count, look every expert up (hits move
 * to the most-recent end), then offer each miss; the request's own experts are never the victim
 * (the store has them pinned).
 */
function storePolicy(policy: ExpertCachePolicy, requests: number[][], slots: number): number {
  const cache = new Map<number, true>(); // insertion order = recency, oldest first
  const counts = new RequestCounts();
  let hits = 0;
  for (const req of requests) {
    counts.record(req);
    const inRequest = new Set(req);
    const misses: number[] = [];
    for (const id of req) {
      if (cache.has(id)) {
        hits++;
        cache.delete(id);
        cache.set(id, true);
      } else misses.push(id);
    }
    for (const id of misses) {
      if (cache.size < slots) {
        cache.set(id, true);
        continue;
      }
      const victim = chooseVictim(policy, cache.entries(), (vid) => !inRequest.has(vid), counts);
      if (victim === undefined || !admits(policy, id, victim[0], counts)) continue;
      cache.delete(victim[0]);
      cache.set(id, true);
    }
  }
  return hits;
}

const lfu: LayerSimulator = (requests, slots) => storePolicy("lfu", requests, slots);
const lru: LayerSimulator = (requests, slots) => storePolicy("lru", requests, slots);

// ---------------------------------------------------------------- S3-FIFO

function s3fifo(requests: number[][], slots: number): number {
  const smallTarget = Math.max(1, Math.floor(slots / 10));
  const ghostCap = Math.max(1, slots - smallTarget);
  const small: number[] = []; // FIFO queues: new entries at the tail, eviction from the head
  const main: number[] = [];
  const ghost = new Map<number, true>(); // recently evicted ids, oldest first
  const freq = new Map<number, number>(); // resident ids -> 0..3
  let hits = 0;

  /** Evicts from main until one entry leaves: a non-zero counter buys another round. */
  const evictMain = () => {
    while (main.length > 0) {
      const id = main.shift()!;
      const f = freq.get(id)!;
      if (f > 0) {
        freq.set(id, f - 1);
        main.push(id);
      } else return void freq.delete(id);
    }
  };
  /** Evicts from small until one entry leaves the cache (hit ones move to main instead). */
  const evictSmall = () => {
    while (small.length > 0) {
      const id = small.shift()!;
      if (freq.get(id)! > 0) {
        freq.set(id, 0);
        main.push(id);
        continue;
      }
      freq.delete(id);
      ghost.set(id, true);
      if (ghost.size > ghostCap) ghost.delete(ghost.keys().next().value!);
      return;
    }
  };
  /** Frees one slot: from small while it holds its 10 % share, else from main. */
  const evict = () => (small.length >= smallTarget || main.length === 0 ? evictSmall() : evictMain());

  for (const req of requests) {
    const misses: number[] = [];
    for (const id of req) {
      if (freq.has(id)) {
        hits++;
        freq.set(id, Math.min(3, freq.get(id)! + 1));
      } else misses.push(id);
    }
    for (const id of misses) {
      while (small.length + main.length >= slots) evict();
      freq.set(id, 0);
      if (ghost.delete(id)) main.push(id);
      else small.push(id);
    }
  }
  return hits;
}

// ---------------------------------------------------------------- Belady (offline optimum)

function belady(requests: number[][], slots: number): number {
  // next[r][j]: the request index where requests[r][j] is used next (Infinity if never).
  const nextUse: number[][] = requests.map(() => []);
  const seen = new Map<number, number>();
  for (let r = requests.length - 1; r >= 0; r--) {
    nextUse[r] = requests[r].map((id) => seen.get(id) ?? Infinity);
    for (const id of requests[r]) seen.set(id, r);
  }
  const cache = new Map<number, number>(); // id -> its next use
  let hits = 0;
  for (let r = 0; r < requests.length; r++) {
    const req = requests[r];
    const misses: Array<[number, number]> = [];
    for (let j = 0; j < req.length; j++) {
      if (cache.has(req[j])) {
        hits++;
        cache.set(req[j], nextUse[r][j]);
      } else misses.push([req[j], nextUse[r][j]]);
    }
    const inRequest = new Set(req);
    for (const [id, next] of misses) {
      if (next === Infinity) continue;
      if (cache.size < slots) {
        cache.set(id, next);
        continue;
      }
      // Farthest next use among entries this request does not need.
      let victim = -1;
      let far = -1;
      for (const [c, n] of cache) if (!inRequest.has(c) && n > far) [victim, far] = [c, n];
      if (victim < 0 || far <= next) continue; // keeping what is cached is at least as good
      cache.delete(victim);
      cache.set(id, next);
    }
  }
  return hits;
}

// ---------------------------------------------------------------- pinned (static hottest set)

function pinned(requests: number[][], slots: number): number {
  const count = new Map<number, number>();
  for (const req of requests) for (const id of req) count.set(id, (count.get(id) ?? 0) + 1);
  const hot = [...count.entries()].sort((a, b) => b[1] - a[1] || a[0] - b[0]).slice(0, slots);
  const set = new Set(hot.map(([id]) => id));
  let hits = 0;
  // The pinned set is loaded before the run, so even its first use is a hit.
  for (const req of requests) for (const id of req) if (set.has(id)) hits++;
  return hits;
}

const LAYER_SIMULATORS: Record<CachePolicy, LayerSimulator> = { lfu, lru, s3fifo, belady, pinned };

// ---------------------------------------------------------------- trace files

/**
 * The binary trace `k3 run --dump-cache-trace` writes (expert_trace.bin): int32 little-endian
 * triples (request, layer, expert), requests numbered from 0 in order, experts of a request in
 * first-use order. Returns the requests; throws a message naming the file on a malformed trace.
 */
export function parseCacheTrace(bytes: Uint8Array, file = "expert_trace.bin"): CacheTraceRequest[] {
  if (bytes.byteLength % 12 !== 0) throw new RangeError(`${file}: ${bytes.byteLength} bytes is not a whole number of (request, layer, expert) int32 triples`);
  const v = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const out: CacheTraceRequest[] = [];
  let current = -1;
  for (let o = 0; o < bytes.byteLength; o += 12) {
    const request = v.getInt32(o, true);
    const layer = v.getInt32(o + 4, true);
    const expert = v.getInt32(o + 8, true);
    if (layer < 0 || expert < 0) throw new RangeError(`${file}: triple ${o / 12} has a negative layer or expert (${layer}, ${expert})`);
    if (request === current) {
      const r = out[out.length - 1];
      if (r.layer !== layer) throw new RangeError(`${file}: request ${request} mixes layers ${r.layer} and ${layer}`);
      r.experts.push(expert);
    } else if (request === current + 1) {
      out.push({ layer, experts: [expert] });
      current = request;
    } else throw new RangeError(`${file}: triple ${o / 12} has request ${request} after ${current} (requests must be numbered 0, 1, 2, ... in order)`);
  }
  return out;
}

/** The inverse of parseCacheTrace. */
export function encodeCacheTrace(trace: CacheTraceRequest[]): Uint8Array {
  const n = trace.reduce((s, r) => s + r.experts.length, 0);
  const out = new Uint8Array(n * 12);
  const v = new DataView(out.buffer);
  let o = 0;
  trace.forEach((r, i) => {
    for (const e of r.experts) {
      v.setInt32(o, i, true);
      v.setInt32(o + 4, r.layer, true);
      v.setInt32(o + 8, e, true);
      o += 12;
    }
  });
  return out;
}
