// The readers' slot and piece formulas (src/sizing.ts): the one home the stores and the engine's
// memory plan share. The superset formula must agree with the C side that the reader threads fill.
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { native } from "../src/native.js";
import { ringSlotBytesFor, splitPieces, supersetBytes, TRUNK_CHUNK_BYTES, trunkChunkBytesFor, wholePieces } from "../src/sizing.js";

describe("sizing", () => {
  it("supersetBytes is the C side's k3_file_superset_bytes", () => {
    for (const align of [512, 4096, 1 << 20])
      for (const length of [0, 1, 511, 512, 4095, 4096, 4097, 1_000_000, 17_547_264, 2 ** 40 + 5])
        expect(supersetBytes(length, align), `${length} @ ${align}`).toBe(native.supersetBytes(length, align));
    // A K3 expert (whole pages) takes one extra page; one byte more takes two.
    expect(supersetBytes(17_547_264)).toBe(17_547_264 + 4096);
    expect(supersetBytes(17_547_265)).toBe(17_547_264 + 2 * 4096);
  });

  it("pieces are cut at multiples of the piece from the aligned base, clipped to the range", () => {
    expect(splitPieces(100, 50, 4096)).toEqual([[100, 50]]);
    expect(splitPieces(100, 10000, 0)).toEqual([[100, 10000]]);
    // A range no longer than a piece is one read even where it crosses a piece boundary.
    expect(splitPieces(4000, 4096, 4096)).toEqual([[4000, 4096]]);
    expect(splitPieces(5000, 10000, 4096)).toEqual([[5000, 3192], [8192, 4096], [12288, 2712]]);
    const p = splitPieces(3 * 4096 + 17, 17547264, 4 << 20);
    expect(p.reduce((a, [, l]) => a + l, 0)).toBe(17547264);
    for (const [o] of p.slice(1)) expect(o % (4 << 20)).toBe(3 * 4096 % (4 << 20));
  });

  it("trunk ring slots are the largest layer in whole read pieces of at most 64 MiB", () => {
    expect(TRUNK_CHUNK_BYTES).toBe(64 << 20);
    expect(trunkChunkBytesFor(10_000)).toBe(12_288);
    expect(ringSlotBytesFor(10_000)).toBe(12_288);
    expect(trunkChunkBytesFor(1e9)).toBe(64 << 20);
    expect(ringSlotBytesFor(1e9)).toBe(15 * (64 << 20));
    expect(ringSlotBytesFor(1e9, 4 << 20)).toBe(wholePieces(1e9, 4 << 20));
    expect(wholePieces(1e9, 4 << 20)).toBe(239 * (4 << 20));
  });

  it("imports nothing, so `@k3/moe-stream/sizing` loads no native addon", () => {
    const src = readFileSync(new URL("../src/sizing.ts", import.meta.url), "utf8");
    expect(src).not.toMatch(/^\s*(import|export .* from)\b/m);
  });
});
