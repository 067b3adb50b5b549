/**
 * How big the readers' slots are and how a read is cut into pieces: the one home of these formulas,
 * used by `ExpertStore`, `RangeReader`, `TrunkStreamer` and `DirectFileReader`, and by the engine's
 * memory plan (docs/io.md §6), which sizes the same slots before anything is opened.
 *
 * Plain TypeScript that imports nothing: it is published as `@k3/moe-stream/sizing`, so a planner
 * can use it without loading this package's native addon.
 */

/** The alignment O_DIRECT reads are rounded to, and of the slots and buffers they land in. */
export const DIRECT_ALIGN = 4096;

/** The trunk ring's default read piece (`TrunkStreamer`'s `chunkBytes`). */
export const TRUNK_CHUNK_BYTES = 64 << 20;

/**
 * Bytes a slot needs to take `length` bytes read at any offset: the aligned superset, whose start
 * rounds down by less than `align` and whose end rounds up (the C side's k3_file_superset_bytes).
 */
export function supersetBytes(length: number, align = DIRECT_ALIGN): number {
  return Math.ceil(length / align) * align + align;
}

/** `bytes` rounded up to whole pieces of `piece` bytes (what a layer takes in trunk arena chunks). */
export function wholePieces(bytes: number, piece: number): number {
  return Math.ceil(bytes / piece) * piece;
}

/**
 * The trunk ring's read piece for a largest layer of `largest` bytes: TRUNK_CHUNK_BYTES, or the
 * layer rounded up to 4 KiB when smaller (the engine passes it to the TrunkStreamer).
 */
export function trunkChunkBytesFor(largest: number): number {
  return Math.min(TRUNK_CHUNK_BYTES, Math.max(1, Math.ceil(largest / DIRECT_ALIGN)) * DIRECT_ALIGN);
}

/** One trunk ring slot: the largest layer it takes, in whole read pieces. */
export function ringSlotBytesFor(largest: number, chunkBytes = trunkChunkBytesFor(largest)): number {
  return wholePieces(largest, chunkBytes);
}

/**
 * file[offset, offset + length) cut as the readers cut it: at multiples of `piece` from the
 * aligned base, clipped to the range, so every piece lands at slot[x - base] whatever path serves
 * it; one read when `piece` is 0 or the range fits one piece.
 */
export function splitPieces(offset: number, length: number, piece: number, align = DIRECT_ALIGN): Array<[number, number]> {
  if (piece === 0 || length <= piece) return [[offset, length]];
  const base = Math.floor(offset / align) * align;
  const end = offset + length;
  const out: Array<[number, number]> = [];
  for (let k = 0; base + k * piece < end; k++) {
    const s = Math.max(offset, base + k * piece);
    out.push([s, Math.min(end, base + (k + 1) * piece) - s]);
  }
  return out;
}
