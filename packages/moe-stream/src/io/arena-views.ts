/**
 * Views of a native store's arena. The arena is never one JS buffer (an expert cache or a trunk
 * ring can pass 4 GiB, and Node 20 caps one external ArrayBuffer / typed array at 2^32 bytes):
 * each region (a slot, a pinned layer's chunks) gets its own view, made on first use. A region
 * above the cap is served by one view per requested range instead. Each view keeps the arena
 * alive on its own, so a view outlives close() safely: close() gives the arena's pages back to the
 * kernel at once (the view then reads zeros) and the address range goes when the last view is collected.
 *
 * With `arenaBytes` (the ExpertStore's cache: thousands of slots), the arena is instead covered up
 * front by a few windows of WINDOW_BYTES starting every WINDOW_BYTES / 2, and a range of at most
 * WINDOW_BYTES / 2 is a subarray of the window it falls in: no view is made while the model runs.
 * A view per slot made on first use was a new external ArrayBuffer each time a slot was first
 * used (14 MB at the 48B's widths), which V8 counts as external memory: past 64 MB of it V8 starts
 * a full mark-compact ("external memory pressure"), every 20-50 ms while the cache filled,
 * with its marking threads taking ~15 ms of CPU per decoded token on 2 cores (issue 13 item 3).
 */
import { MoeStreamError } from "../errors.js";
import type { NativeExpertStore } from "../native.js";

/** The most bytes one view may span (Node 20's buffer.constants.MAX_LENGTH). */
export const MAX_VIEW_BYTES = 2 ** 32;
/** Bytes of one window view (arenaBytes mode); windows start every WINDOW_BYTES / 2. */
export const WINDOW_BYTES = 2 ** 31;

export class ArenaViews {
  private readonly regions = new Map<number, Uint8Array>();
  private readonly ranges = new Map<string, Uint8Array>();
  private readonly windows: Uint8Array[] = [];
  private readonly half: number;

  constructor(
    private readonly store: NativeExpertStore,
    private readonly what: string,
    private readonly maxViewBytes = MAX_VIEW_BYTES,
    arenaBytes?: number,
    windowBytes = Math.min(WINDOW_BYTES, maxViewBytes),
  ) {
    this.half = Math.floor(windowBytes / 2);
    if (arenaBytes === undefined || this.half < 1) return;
    for (let start = 0; start < arenaBytes; start += this.half) {
      this.windows.push(new Uint8Array(store.view(start, Math.min(windowBytes, arenaBytes - start))));
      if (start + windowBytes >= arenaBytes) break;
    }
  }

  /** `length` bytes at `offset` within the region [regionStart, regionStart + regionLength) of the arena. */
  bytes(regionStart: number, regionLength: number, offset: number, length: number): Uint8Array {
    if (offset < 0 || length < 0 || offset + length > regionLength)
      throw new MoeStreamError(`${this.what}: range [${offset}, +${length}) is outside its ${regionLength}-byte region`);
    if (length === 0) return new Uint8Array(0);
    const at = regionStart + offset;
    if (this.windows.length > 0 && length <= this.half) {
      // The window starting at or below `at` by less than half a window holds [at, at + length).
      const k = Math.min(Math.floor(at / this.half), this.windows.length - 1);
      const w = this.windows[k];
      const from = at - k * this.half;
      if (from + length <= w.length) return w.subarray(from, from + length);
    }
    if (regionLength <= this.maxViewBytes) {
      let v = this.regions.get(regionStart);
      if (!v || v.length !== regionLength) this.regions.set(regionStart, (v = new Uint8Array(this.store.view(regionStart, regionLength))));
      return v.subarray(offset, offset + length);
    }
    if (length > this.maxViewBytes)
      throw new MoeStreamError(`${this.what}: ${length} bytes cannot be one Uint8Array (at most ${this.maxViewBytes} in this Node)`);
    const key = `${at}+${length}`;
    let v = this.ranges.get(key);
    if (!v) this.ranges.set(key, (v = new Uint8Array(this.store.view(at, length))));
    return v;
  }

  /** Forgets every view (after close: the arena goes once the caller's own views are collected). */
  clear(): void {
    this.regions.clear();
    this.ranges.clear();
    this.windows.length = 0;
  }
}
