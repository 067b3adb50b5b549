// RangeReader: arbitrary ranges through the store's read engine (O_DIRECT supersets, pieces in one slot).
import { mkdirSync, mkdtempSync, rmSync, statfsSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { MoeStreamError, StoreStateError } from "../src/errors.js";
import { RangeReader } from "../src/io/range-reader.js";
import { diskDir, pattern } from "./fixtures.js";


let dir: string;
let a: string;
let b: string;
let bytesA: Uint8Array;
let bytesB: Uint8Array;

beforeAll(() => {
  dir = diskDir("k3-range-");
  a = join(dir, "a.bin");
  b = join(dir, "b.bin");
  bytesA = pattern(3_000_123, 1);
  bytesB = pattern(200_001, 2);
  writeFileSync(a, bytesA);
  writeFileSync(b, bytesB);
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe("RangeReader", () => {
  it("reads unaligned ranges of two files, in pieces, into named slots, byte for byte", async () => {
    const r = RangeReader.open({ files: [a, b], maxRangeBytes: 1_000_000, slots: 2, pieceBytes: 64 << 10 });
    try {
      expect(r.arenaBytes).toBe(RangeReader.arenaBytesFor(1_000_000, 2));
      const ranges: Array<[string, Uint8Array, number, number]> = [
        [a, bytesA, 12_345, 999_999],
        [b, bytesB, 7, 14_336],
        [a, bytesA, 2_000_123, 1_000_000],
        [b, bytesB, 199_000, 1_001],
      ];
      // Two reads in flight at once, one per slot.
      for (let i = 0; i < ranges.length; i += 2) {
        const got = await Promise.all([0, 1].map((s) => r.read(ranges[i + s][0], ranges[i + s][2], ranges[i + s][3], s)));
        got.forEach((g, s) => {
          const [, src, off, len] = ranges[i + s];
          expect(g.length).toBe(len);
          expect(Buffer.compare(Buffer.from(g), Buffer.from(src.subarray(off, off + len)))).toBe(0);
        });
      }
      const st = r.stats();
      const want = ranges.reduce((x, q) => x + q[3], 0);
      expect(st.bytesRequested).toBe(want);
      // The device moves each piece's aligned superset: at least the bytes asked, at most one page more per piece.
      expect(st.deviceBytes).toBeGreaterThanOrEqual(want);
      expect(st.deviceBytes).toBeLessThan(want + st.reads * 2 * 4096);
      if (r.fileInfo().every((f) => f.direct)) expect(st.bufferedReads).toBe(0);
    } finally {
      r.close();
    }
  });

  it("refuses bad reads naming what is wrong, and use after close", async () => {
    const r = RangeReader.open({ files: [a], maxRangeBytes: 100_000, slots: 1 });
    await expect(r.read(a, 0, 10, 1)).rejects.toThrow(/slot 1 is outside 0\.\.0/);
    await expect(r.read(b, 0, 10, 0)).rejects.toThrow(/b\.bin is not one of the reader's files/);
    await expect(r.read(a, 2_999_000, 10_000, 0)).rejects.toThrow(/\[2999000, 3009000\) lie outside the 3000123-byte file/);
    await expect(r.read(a, 0, 200_000, 0)).rejects.toThrow(/200000 bytes \(plus alignment\) do not fit/);
    const first = r.read(a, 0, 10, 0);
    await expect(r.read(a, 10, 10, 0)).rejects.toThrow(/slot 0 already has a read in flight/);
    await first;
    r.close();
    expect(r.stats().bytesRequested).toBe(10);
    await expect(r.read(a, 0, 10, 0)).rejects.toThrow(StoreStateError);
    expect(() => RangeReader.open({ files: [a], maxRangeBytes: 0, slots: 1 })).toThrow(MoeStreamError);
    expect(() => RangeReader.open({ files: [a], maxRangeBytes: 10, slots: 1, pieceBytes: 1000 })).toThrow(/pieceBytes must be 0 or a multiple of 4096/);
  });
});
