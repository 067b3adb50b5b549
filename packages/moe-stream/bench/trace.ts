/**
 * A routing trace with temporal locality, for cache benchmarks (documented in the README).
 *
 * K3's router is trained to be flat (Quantile Balancing), so there is no global popularity skew
 * beyond a mild one; what reuse exists is short-range. Per layer and token, each of the k slots is
 *  - with probability `reuse` (default 0.25): an expert chosen by one of the last `window` (8)
 *    tokens in this layer, the most recent tokens favoured (geometric, p = 0.5);
 *  - otherwise: drawn from a mildly skewed distribution over all experts (Zipf exponent 0.3).
 * Duplicates within a token are redrawn. Deterministic for a seed (mulberry32).
 */
// A dependency-free module of @k3/test-utils (not a dependency of this package), imported by path.
import { mulberry32 } from "../../test-utils/src/random.js";

export interface TraceOptions {
  layers: number;
  experts: number;
  k: number;
  tokens: number;
  reuse?: number;
  window?: number;
  zipf?: number;
  seed?: number;
}


/** trace[token][layer] = k distinct expert ids. */
export function routingTrace(o: TraceOptions): number[][][] {
  const rnd = mulberry32(o.seed ?? 42);
  const reuse = o.reuse ?? 0.25;
  const window = o.window ?? 8;
  const s = o.zipf ?? 0.3;
  // Mild popularity: a per-layer random permutation of Zipf(s) weights.
  const cdfs: Float64Array[] = [];
  const perms: Int32Array[] = [];
  for (let l = 0; l < o.layers; l++) {
    const w = Float64Array.from({ length: o.experts }, (_, i) => 1 / Math.pow(i + 1, s));
    const cdf = new Float64Array(o.experts);
    let acc = 0;
    for (let i = 0; i < o.experts; i++) cdf[i] = acc += w[i];
    for (let i = 0; i < o.experts; i++) cdf[i] /= acc;
    const perm = Int32Array.from({ length: o.experts }, (_, i) => i);
    for (let i = o.experts - 1; i > 0; i--) {
      const j = Math.floor(rnd() * (i + 1));
      [perm[i], perm[j]] = [perm[j], perm[i]];
    }
    cdfs.push(cdf);
    perms.push(perm);
  }
  const draw = (l: number) => {
    const u = rnd();
    let lo = 0;
    let hi = o.experts - 1;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (cdfs[l][mid] < u) lo = mid + 1;
      else hi = mid;
    }
    return perms[l][lo];
  };
  const trace: number[][][] = [];
  for (let t = 0; t < o.tokens; t++) {
    const tok: number[][] = [];
    for (let l = 0; l < o.layers; l++) {
      const chosen = new Set<number>();
      while (chosen.size < o.k) {
        let id: number;
        if (t > 0 && rnd() < reuse) {
          let back = 1;
          while (back < Math.min(window, t) && rnd() < 0.5) back++;
          const prev = trace[t - back][l];
          id = prev[Math.floor(rnd() * prev.length)];
        } else id = draw(l);
        chosen.add(id);
      }
      tok.push([...chosen]);
    }
    trace.push(tok);
  }
  return trace;
}

/** Hit rate of ONE global LRU of `capacity` experts over the trace, layers visited in order (simulation). */
export function globalLruHitRate(trace: number[][][], capacity: number): number {
  const lru = new Map<number, true>();
  let hits = 0;
  let requests = 0;
  for (const tok of trace)
    tok.forEach((ids, l) => {
      for (const id of ids) {
        const key = l * 1_000_000 + id;
        requests++;
        if (lru.has(key)) {
          hits++;
          lru.delete(key);
        } else if (lru.size >= capacity) lru.delete(lru.keys().next().value!);
        if (capacity > 0) lru.set(key, true);
      }
    });
  return requests ? hits / requests : 0;
}
