/**
 * The expert cache's replacement rule, shared by ExpertStore and the simulator (cache-sim.ts):
 *
 * - "lfu" (the default): every layer counts how often each of its experts was requested (one per
 *   request that lists it), halving every count each COUNT_HALVING_REQUESTS requests of the layer
 *   so that old popularity fades. A missed expert joins a full layer only if it was requested MORE
 *   often than the victim, the least-requested resident expert not in use (ties: the least
 *   recently used of them); otherwise it is used once and freed, and the resident experts stay.
 * - "lru": a miss always joins, evicting the least recently used resident expert not in use.
 *
 * Why counts: a layer's routing is skewed (some experts are chosen far more often than others), and
 * a small cache under LRU keeps whatever came last. Replaying recorded traces (`k3 cache-sim`):
 * Kimi-Linear-48B synthetic checkpoint, 23 of 256 experts per layer, 132 tokens: LRU 30.0 %, lfu
 * 37.2 %, S3-FIFO 36.0 % resident hits (the hottest 23 pinned from the whole trace: 44.5 %); the
 * trained tiny K3, 2 / 4 / 8 / 16 slots, 277 tokens: LRU 7.6 / 15.5 / 48.9 / 68.3 %, lfu 17.0 /
 * 30.2 / 50.0 / 73.2 %. The halving period changed those by at most 0.5 points (0, 64, 256, 1024
 * requests tried).
 */

export type ExpertCachePolicy = "lfu" | "lru";
export const EXPERT_CACHE_POLICIES: readonly ExpertCachePolicy[] = ["lfu", "lru"];

/** Requests of a layer between two halvings of its counts. */
export const COUNT_HALVING_REQUESTS = 1024;

/** One layer's request counts. */
export class RequestCounts {
  private readonly counts = new Map<number, number>();
  private requests = 0;

  /** Counts one request of the layer (its unique experts). */
  record(ids: Iterable<number>): void {
    if (++this.requests % COUNT_HALVING_REQUESTS === 0) for (const [id, c] of this.counts) this.counts.set(id, c / 2);
    for (const id of ids) this.counts.set(id, (this.counts.get(id) ?? 0) + 1);
  }

  of(id: number): number {
    return this.counts.get(id) ?? 0;
  }

  /** Adds counts from elsewhere (a profile of earlier runs): they then age like the layer's own. */
  add(id: number, count: number): void {
    this.counts.set(id, this.of(id) + count);
  }

  /** Every counted expert and its count. */
  entries(): IterableIterator<[number, number]> {
    return this.counts.entries();
  }
}

/**
 * The resident expert a miss would replace: under "lru" the first of `residents` (given least
 * recently used first) that `evictable` allows, under "lfu" the least requested of those (the
 * earliest on ties). Undefined when none is evictable.
 */
export function chooseVictim<T>(policy: ExpertCachePolicy, residents: Iterable<[number, T]>, evictable: (id: number, entry: T) => boolean, counts: RequestCounts): [number, T] | undefined {
  let best: [number, T] | undefined;
  let bestCount = Infinity;
  for (const r of residents) {
    if (!evictable(r[0], r[1])) continue;
    if (policy === "lru") return r;
    const c = counts.of(r[0]);
    if (c < bestCount) {
      best = r;
      bestCount = c;
    }
  }
  return best;
}

/** Whether the missed expert `id` takes the victim's slot (always under "lru"). */
export function admits(policy: ExpertCachePolicy, id: number, victim: number, counts: RequestCounts): boolean {
  return policy === "lru" || counts.of(id) > counts.of(victim);
}
