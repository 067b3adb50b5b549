/**
 * Reusable f32 work buffers, by name, grown on demand (no per-call allocation: at K3's widths a
 * fresh [T, width] array per call costs zeroing and page faults). Contents are stale: callers fully
 * overwrite what they take. Buffers above `maxBytes` are not kept (a one-off long prefill does not
 * pin its peak). Not reentrant: one user at a time. One per layer kind (KDA, MLA, MLP, MoE), shared
 * by its instances, since layers run one after another.
 */
export class Scratch {
  private readonly bufs = new Map<string, Float32Array>();
  constructor(private readonly maxBytes = 64 << 20) {}

  /** A buffer of exactly n floats (a view of the kept one), stale contents. */
  get(name: string, n: number): Float32Array {
    if (n * 4 > this.maxBytes) return new Float32Array(n);
    let b = this.bufs.get(name);
    if (!b || b.length < n) this.bufs.set(name, (b = new Float32Array(Math.max(n, Math.min(this.maxBytes / 4, (b?.length ?? 0) * 2)))));
    return b.subarray(0, n);
  }
}
