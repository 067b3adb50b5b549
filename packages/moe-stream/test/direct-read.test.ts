// DirectFileReader: any byte range through O_DIRECT (aligned windows into aligned buffers) gives the
// same bytes as a buffered read, with a clear error for a range past the end of the file and the
// buffered fallback where O_DIRECT is not asked or refused.
import { existsSync, mkdtempSync, readFileSync, rmSync, statfsSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { DirectFileReader, alignedReadBuffer } from "../src/io/direct-read.js";
import { supersetBytes } from "../src/sizing.js";
import { diskDir, pattern, TMPFS_MAGIC } from "./fixtures.js";

const dirs: string[] = [];
afterAll(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));
const disk = diskDir("k3-dread-");
dirs.push(disk);
const shm = existsSync("/dev/shm") && statfsSync("/dev/shm").type === TMPFS_MAGIC ? mkdtempSync("/dev/shm/k3-dread-") : null;
if (shm) dirs.push(shm);
else console.log("skipping the tmpfs case: /dev/shm is not a tmpfs here");

const data = pattern(3 * 65536 + 4096 + 123, 5);
const file = join(disk, "data.bin");
writeFileSync(file, data);

/** Ranges: aligned, unaligned, crossing pages, empty, the exact end of the file. */
const ranges: Array<[number, number]> = [
  [0, 4096],
  [1, 1],
  [4095, 2],
  [5000, 70000],
  [123, 0],
  [data.length - 1, 1],
  [data.length - 5000, 5000],
  [0, data.length],
];

describe("DirectFileReader", () => {
  for (const direct of [true, false])
    it(`${direct ? "O_DIRECT" : "buffered"}: every range gives the file's bytes`, async () => {
      const r = new DirectFileReader(file, { direct });
      try {
        expect(r.isDirect).toBe(direct);
        if (!direct) expect(r.fallback).toMatch(/not asked/);
        const buf = alignedReadBuffer(data.length);
        for (const [pos, len] of ranges) {
          const view = await r.read(buf, pos, len);
          expect(view.length, `${pos}+${len}`).toBe(len);
          expect(Buffer.compare(view, data.subarray(pos, pos + len)), `${pos}+${len}`).toBe(0);
        }
      } finally {
        r.close();
      }
    });

  it("a range past the end is a short-read error naming the file; a buffer too small is refused", async () => {
    for (const direct of [true, false]) {
      const r = new DirectFileReader(file, { direct });
      try {
        const buf = alignedReadBuffer(10000);
        await expect(r.read(buf, data.length - 10, 20)).rejects.toThrow(/data\.bin.*short read: 10 of 20 bytes at offset \d+ \(file truncated\?\)/);
        await expect(r.read(buf, data.length + 8192, 4096)).rejects.toThrow(/short read: 0 of 4096 bytes/);
        await expect(r.read(buf, 0, buf.length)).rejects.toThrow(/cannot hold the window of a \d+-byte read/);
        expect(buf.length).toBe(supersetBytes(10000));
      } finally {
        r.close();
      }
    }
  });

  it.runIf(shm)("on tmpfs: the same bytes, through O_DIRECT or the reported buffered fallback", async () => {
    const f = join(shm!, "data.bin");
    writeFileSync(f, data);
    const r = new DirectFileReader(f);
    try {
      const buf = alignedReadBuffer(data.length);
      for (const [pos, len] of ranges) expect(Buffer.compare(await r.read(buf, pos, len), data.subarray(pos, pos + len))).toBe(0);
      if (!r.isDirect) expect(r.fallback).toMatch(/O_DIRECT refused by the filesystem/);
    } finally {
      r.close();
    }
    expect(readFileSync(f).length).toBe(data.length);
  });
});
