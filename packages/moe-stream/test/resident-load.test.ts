// loadResidentRanges: byte-exact views at any offset (odd, unaligned, across pieces and blocks), both
// read engines, O_DIRECT and the buffered fallback (tmpfs), a truncated file named, bad input refused.
import { closeSync, existsSync, mkdirSync, mkdtempSync, openSync, rmSync, statfsSync, truncateSync, writeSync } from "node:fs";
import { availableParallelism, tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { MoeStreamError } from "../src/errors.js";
import { loadCeiling, loadResidentRanges, planBlocks, type ResidentRange } from "../src/store/resident-load.js";
import { diskDir, TMPFS_MAGIC } from "./fixtures.js";

const MIB = 1 << 20;

/** A file whose byte p is a hash of (seed, p), so any misplaced byte shows. */
function writePattern(path: string, bytes: number, seed: number): Uint8Array {
  const buf = new Uint8Array(bytes);
  for (let p = 0; p < bytes; p++) {
    let x = (seed * 2654435761 + p * 40503) >>> 0;
    x ^= x >>> 13;
    x = Math.imul(x, 0x5bd1e995) >>> 0;
    buf[p] = (x ^ (x >>> 15)) & 0xff;
  }
  const fd = openSync(path, "w");
  writeSync(fd, buf);
  closeSync(fd);
  return buf;
}

let dir: string;
const files: { path: string; bytes: Uint8Array }[] = [];

beforeAll(() => {
  dir = diskDir("k3-resident-");
  files.push({ path: join(dir, "a.bin"), bytes: writePattern(join(dir, "a.bin"), 21 * MIB + 4093, 1) });
  files.push({ path: join(dir, "b.bin"), bytes: writePattern(join(dir, "b.bin"), 3 * MIB + 17, 2) });
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

// Odd offsets and lengths, a range across several 2 MiB pieces, ranges sharing a block, a range at EOF.
function ranges(): ResidentRange[] {
  const [a, b] = files;
  return [
    { file: a.path, offset: 8 + 4093, length: 1 },
    { file: a.path, offset: 8 + 4093 + 1, length: 999 }, // adjacent: same block
    { file: a.path, offset: 12345, length: 9 * MIB + 3 }, // spans 5 pieces of 2 MiB
    { file: a.path, offset: 15 * MIB + 1, length: 6 * MIB + 4093 - 1 }, // to EOF, far from the rest: own block
    { file: b.path, offset: 7, length: 3 * MIB + 10 },
    { file: b.path, offset: 100, length: 50 }, // inside the previous one
  ];
}

function expectExact(load: ReturnType<typeof loadResidentRanges>, rs: ResidentRange[]): void {
  rs.forEach((r, i) => {
    const v = load.view(i);
    expect(v.length, `range ${i}`).toBe(r.length);
    const want = files.find((f) => f.path === r.file)!.bytes.subarray(r.offset, r.offset + r.length);
    expect(Buffer.compare(Buffer.from(v.buffer, v.byteOffset, v.length), Buffer.from(want)), `range ${i} bytes`).toBe(0);
    // the block keeps the file's alignment modulo 4096 (so 8-aligned tensors are 8-aligned views)
    expect(v.byteOffset % 4096, `range ${i} alignment`).toBe(r.offset % 4096);
  });
}

describe("loadResidentRanges", () => {
  for (const ioEngine of ["io_uring", "pread"] as const) {
    for (const prefault of ["populate", "huge", "none"] as const) {
      it(`${ioEngine}, prefault ${prefault}: every range byte-exact, O_DIRECT on a disk`, () => {
        const rs = ranges();
        const load = loadResidentRanges(rs, { ioEngine, prefault, pieceBytes: 2 * MIB, readers: 3, mergeGapBytes: 64 << 10 });
        expectExact(load, rs);
        expect(load.stats.blocks).toBe(3);
        expect(load.stats.bytes).toBe(rs.reduce((a, r) => a + r.length, 0));
        expect(load.stats.directReads).toBeGreaterThan(0);
        expect(load.stats.bufferedReads).toBe(0);
        expect(load.stats.engine).toBe(ioEngine);
      });
    }
  }

  for (const populateThreads of [1, 3]) {
    it(`${populateThreads} populate thread(s) ahead of the reads: byte-exact, the phases timed`, () => {
      const rs = ranges();
      const load = loadResidentRanges(rs, { prefault: "populate", populateThreads, pieceBytes: 2 * MIB, readers: 2 });
      expectExact(load, rs);
      expect(load.stats.prefault).toBe("populate");
      expect(load.stats.populateThreads).toBe(populateThreads);
      expect(load.stats.populateSeconds).toBeGreaterThan(0);
      expect(load.stats.readBusySeconds).toBeGreaterThan(0);
      expect(load.stats.readBusySeconds).toBeLessThanOrEqual(load.stats.seconds);
    });
  }

  it("populate threads default to one per core; none run without populate; out-of-range counts refused", () => {
    const rs = ranges();
    const d = loadResidentRanges(rs, { pieceBytes: 2 * MIB });
    expect(d.stats.populateThreads).toBe(Math.min(8, availableParallelism()));
    const h = loadResidentRanges(rs, { prefault: "huge", pieceBytes: 2 * MIB });
    expectExact(h, rs);
    expect(h.stats.populateThreads).toBe(0);
    expect(h.stats.populateSeconds).toBe(0);
    expect(() => loadResidentRanges(rs, { populateThreads: 9 })).toThrowError(/9 populate threads, expected 0 \(one per core\) \.\. 8/);
    expect(() => loadResidentRanges(rs, { populateThreads: 1.5 })).toThrowError(/1\.5 populate threads/);
  });

  it("a short read or an I/O error while populate threads run ahead fails the load, naming the file", () => {
    const rs = ranges();
    for (const populateThreads of [1, 3]) {
      expect(() => loadResidentRanges(rs, { pieceBytes: 2 * MIB, populateThreads, injectFault: { after: 3, kind: "short" } })).toThrowError(/\.bin: short read/);
      expect(() => loadResidentRanges(rs, { pieceBytes: 2 * MIB, populateThreads, injectFault: { after: 1, kind: "eio" } })).toThrowError(/\.bin: read error .*injected EIO/);
    }
  });

  it("reports progress up to the total, and blocks never exceed maxBlockBytes unless one range is larger", () => {
    const rs = ranges();
    const seen: number[] = [];
    const load = loadResidentRanges(rs, { pieceBytes: 2 * MIB, maxBlockBytes: 4 * MIB, onProgress: (p) => seen.push(p.bytesDone) });
    expectExact(load, rs);
    expect(seen.at(-1)).toBe(load.stats.blockBytes);
    for (const b of load.blocks) expect(b.end - b.start <= 4 * MIB || rs.some((r) => r.file === b.file && r.offset === b.start && r.offset + r.length === b.end)).toBe(true);
  });

  it("tmpfs: byte-exact whether or not the kernel takes O_DIRECT there (Linux >= 6.6 does), and with direct off", () => {
    if (!existsSync("/dev/shm") || statfsSync("/dev/shm").type !== TMPFS_MAGIC) return void console.log("skipping: no tmpfs at /dev/shm");
    const shm = mkdtempSync("/dev/shm/k3-resident-");
    try {
      const f = join(shm, "t.bin");
      const bytes = writePattern(f, 5 * MIB + 3, 9);
      const rs = [
        { file: f, offset: 1, length: 2 * MIB + 5 },
        { file: f, offset: 4 * MIB + 3, length: MIB },
      ];
      for (const direct of [true, false]) {
        const load = loadResidentRanges(rs, { pieceBytes: 2 * MIB, direct });
        rs.forEach((r, i) => expect(Buffer.compare(Buffer.from(load.view(i)), Buffer.from(bytes.subarray(r.offset, r.offset + r.length))), `direct ${direct} range ${i}`).toBe(0));
        expect(load.stats.directReads + load.stats.bufferedReads).toBe(load.stats.reads);
        if (!direct) expect(load.stats.directReads).toBe(0);
      }
    } finally {
      rmSync(shm, { recursive: true, force: true });
    }
  });

  for (const ioEngine of ["io_uring", "pread"] as const) {
    it(`${ioEngine}: a filesystem refusing O_DIRECT at read time (EINVAL) falls back to buffered reads, byte-exact`, () => {
      const rs = ranges();
      const load = loadResidentRanges(rs, { ioEngine, pieceBytes: 2 * MIB, readers: 2, injectFault: { after: 1, kind: "direct-einval" } });
      expectExact(load, rs);
      expect(load.stats.bufferedReads).toBeGreaterThan(0);
    });
  }

  it("an I/O error or a short read fails the load, naming the file", () => {
    const rs = ranges();
    expect(() => loadResidentRanges(rs, { pieceBytes: 2 * MIB, injectFault: { after: 2, kind: "eio" } })).toThrowError(/a\.bin: read error .*injected EIO/);
    expect(() => loadResidentRanges(rs, { pieceBytes: 2 * MIB, injectFault: { after: 0, kind: "short" } })).toThrowError(/\.bin: short read/);
  });

  it("names a truncated file with its size and the bytes needed", () => {
    const f = join(dir, "short.bin");
    writePattern(f, 3 * MIB, 4);
    const rs = [{ file: f, offset: 10, length: 3 * MIB }];
    truncateSync(f, 2 * MIB);
    expect(() => loadResidentRanges(rs)).toThrowError(MoeStreamError);
    expect(() => loadResidentRanges(rs)).toThrowError(/short\.bin: truncated shard: it has 2097152 bytes but the tensors need bytes up to 3145738/);
  });

  it("names a missing file, refuses bad pieces, readers and ranges", () => {
    expect(() => loadResidentRanges([{ file: join(dir, "nope.bin"), offset: 0, length: 1 }])).toThrowError(/nope\.bin/);
    const r = [{ file: files[0].path, offset: 0, length: 1 }];
    expect(() => loadResidentRanges(r, { pieceBytes: 3 * MIB })).toThrowError(/piece of 3145728 bytes/);
    expect(() => loadResidentRanges(r, { readers: 0 })).toThrowError(/0 readers/);
    expect(() => loadResidentRanges([{ file: files[0].path, offset: -1, length: 1 }])).toThrowError(/bad offset -1/);
  });

  it("the ceiling reads the same blocks in the same pieces", () => {
    const rs = ranges();
    const load = loadResidentRanges(rs, { pieceBytes: 2 * MIB });
    const c = loadCeiling(load.blocks, { engine: "pread", pieceBytes: 2 * MIB, readers: 2 });
    // O_DIRECT reads the aligned supersets of the same pieces: at least the block bytes, at most one page more per piece end
    expect(c.bytes).toBeGreaterThanOrEqual(load.stats.blockBytes);
    expect(c.bytes).toBeLessThanOrEqual(load.stats.deviceBytes);
    expect(c.gbPerSec).toBeGreaterThan(0);
  });
});

describe("planBlocks", () => {
  it("merges ranges of one file closer than the gap, splits at maxBlock, keeps files apart", () => {
    const p = planBlocks(
      [
        { file: "x", offset: 100, length: 10 },
        { file: "y", offset: 0, length: 5 },
        { file: "x", offset: 0, length: 50 },
        { file: "x", offset: 1000, length: 10 },
        { file: "x", offset: 1020, length: 500 },
      ],
      600,
      60,
    );
    expect(p.blocks).toEqual([
      { file: "x", start: 0, end: 110 },
      { file: "x", start: 1000, end: 1520 },
      { file: "y", start: 0, end: 5 },
    ]);
    expect([...p.of]).toEqual([0, 2, 0, 1, 1]);
    expect(planBlocks([{ file: "x", offset: 0, length: 400 }, { file: "x", offset: 400, length: 400 }], 600, 60).blocks.length).toBe(2);
  });
});
