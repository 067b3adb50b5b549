/**
 * Views of a native store's arena. The arena is never one JS buffer (an expert cache or a trunk
 * ring can pass 4 GiB, and Node 20 caps one external ArrayBuffer / typed array at 2^32 bytes):
 * each region (a slot, a pinned layer's chunks) gets its own view, made on first use. A region
 * above the cap is served by one view per requested range instead. Each view keeps the arena
 * alive on its own, so a view outlives close() safely; the arena is freed when the store is closed
 * (or collected) and the last view is collected.
 */
import { MoeStreamError } from "./errors.js";
import type { NativeExpertStore } from "./native.js";

/** The most bytes one view may span (Node 20's buffer.constants.MAX_LENGTH). */
export const MAX_VIEW_BYTES = 2 ** 32;

export class ArenaViews {
  private readonly regions = new Map<number, Uint8Array>();
  private readonly ranges = new Map<string, Uint8Array>();

  constructor(
    private readonly store: NativeExpertStore,
    private readonly what: string,
    private readonly maxViewBytes = MAX_VIEW_BYTES,
  ) {}

  /** `length` bytes at `offset` within the region [regionStart, regionStart + regionLength) of the arena. */
  bytes(regionStart: number, regionLength: number, offset: number, length: number): Uint8Array {
    if (offset < 0 || length < 0 || offset + length > regionLength)
      throw new MoeStreamError(`${this.what}: range [${offset}, +${length}) is outside its ${regionLength}-byte region`);
    if (length === 0) return new Uint8Array(0);
    if (regionLength <= this.maxViewBytes) {
      let v = this.regions.get(regionStart);
      if (!v || v.length !== regionLength) this.regions.set(regionStart, (v = new Uint8Array(this.store.view(regionStart, regionLength))));
      return v.subarray(offset, offset + length);
    }
    if (length > this.maxViewBytes)
      throw new MoeStreamError(`${this.what}: ${length} bytes cannot be one Uint8Array (at most ${this.maxViewBytes} in this Node)`);
    const at = regionStart + offset;
    const key = `${at}+${length}`;
    let v = this.ranges.get(key);
    if (!v) this.ranges.set(key, (v = new Uint8Array(this.store.view(at, length))));
    return v;
  }

  /** Forgets every view (after close: the arena goes once the caller's own views are collected). */
  clear(): void {
    this.regions.clear();
    this.ranges.clear();
  }
}
