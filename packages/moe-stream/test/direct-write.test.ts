// DirectFileWriter: O_DIRECT writes from aligned staging buffers give the same file as buffered
// writes, whatever the piece sizes, with an unaligned tail, a drain in the middle, and where the
// filesystem refuses O_DIRECT (tmpfs, or a simulated EINVAL at open or at a write).
import { closeSync, existsSync, fsyncSync, ftruncateSync, mkdtempSync, openSync, readFileSync, rmSync, statfsSync, statSync } from "node:fs";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { DirectFileWriter, StagingBuffers, type DirectWriterOptions } from "../src/io/direct-write.js";
import { native } from "../src/native.js";
import { diskDir, pattern, TMPFS_MAGIC } from "./fixtures.js";

const dirs: string[] = [];
afterAll(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));
const disk = diskDir("k3-dwrite-");
dirs.push(disk);
const shm = existsSync("/dev/shm") && statfsSync("/dev/shm").type === TMPFS_MAGIC ? mkdtempSync("/dev/shm/k3-dwrite-") : null;
if (shm) dirs.push(shm);
else console.log("skipping the tmpfs fallback case: /dev/shm is not a tmpfs here");

/** Writes `data` in pieces of the given sizes (cycled), with drain() after the piece `drainAfter`. */
async function writeFile(path: string, data: Uint8Array, sizes: number[], opts: DirectWriterOptions, drainAfter = -1): Promise<DirectFileWriter> {
  const fd = openSync(path, "w");
  const w = new DirectFileWriter(fd, path, opts);
  try {
    let at = 0;
    for (let i = 0; at < data.length; i++) {
      const n = Math.min(sizes[i % sizes.length], data.length - at);
      const piece = data.slice(at, at + n); // a fresh copy, overwritten below: the writer must have copied it
      await w.push(piece, at);
      piece.fill(0xee);
      at += n;
      if (i === drainAfter) await w.drain();
    }
    await w.drain();
    fsyncSync(fd);
  } finally {
    w.close();
    closeSync(fd);
  }
  return w;
}

describe("DirectFileWriter", () => {
  const staging = new StagingBuffers(16384, 3);
  // 5 buffers and a bit: the tail (1,234 bytes past a 4 KiB multiple) is not aligned.
  const data = pattern(5 * 16384 + 4096 * 2 + 1234, 7);
  const sizes = [1, 4095, 16384, 777, 40000, 3];

  it("aligned staging buffers are aligned, and the alignment query answers", () => {
    const b = native.alignedBuffer(65536, 4096);
    expect(b.byteLength).toBe(65536);
    expect(() => native.alignedBuffer(4096, 3000)).toThrow(/alignedBuffer: align must be a power of two/);
    expect(() => native.alignedBuffer(0, 4096)).toThrow(/alignedBuffer: bytes must be in/);
    expect(() => native.synthBlock(9, new Uint32Array(4), 10, 0, 1, 0)).toThrow(/synthBlock: kind must be 0 \(normal bf16\), 1 \(normal f32\), 2 \(nibbles\) or 3 \(e8m0\), got 9/);
    expect(() => native.synthBlock(0, new Uint32Array(3), 10, 0, 1, 0)).toThrow(/synthBlock: argument 'state' must be a Uint32Array of 4/);
    expect(() => native.synthBlock(3, new Uint32Array(4), 10, 0, 1, 300)).toThrow(/synthBlock: s must be a byte, got 300/);
    const a = native.dioAlignment(disk);
    expect(a.offsetAlign % 4096).toBe(0);
    expect(a.memAlign % 4096).toBe(0);
  });

  it("O_DIRECT on a disk and buffered writes give identical files (odd pieces, unaligned tail, a drain midway)", async () => {
    const d = await writeFile(join(disk, "direct.bin"), data, sizes, { staging }, 3);
    const b = await writeFile(join(disk, "buffered.bin"), data, sizes, { staging, direct: false });
    expect(d.direct).toBe(true);
    expect(d.fallback).toBeNull();
    expect(b.direct).toBe(false);
    for (const f of ["direct.bin", "buffered.bin"]) {
      expect(statSync(join(disk, f)).size).toBe(data.length);
      expect(Buffer.compare(readFileSync(join(disk, f)), data)).toBe(0);
    }
    expect(d.written).toBe(data.length);
  });

  it("falls back to buffered writes where O_DIRECT is refused, and says why", async () => {
    const cases: [string, DirectWriterOptions, RegExp][] = [
      [join(disk, "refused-open.bin"), { staging, refuseDirect: "open" }, /EINVAL at open, simulated/],
      [join(disk, "refused-write.bin"), { staging, refuseDirect: "write" }, /EINVAL writing at 0, simulated/],
    ];
    for (const [path, opts, why] of cases) {
      const w = await writeFile(path, data, sizes, opts, 1);
      expect(w.direct, path).toBe(false);
      expect(w.fallback, path).toMatch(why);
      expect(statSync(path).size).toBe(data.length);
      expect(Buffer.compare(readFileSync(path), data), path).toBe(0);
    }
  });

  it.runIf(shm)("on tmpfs: the same bytes, through O_DIRECT (Linux >= 6.6 tmpfs takes it) or the reported buffered fallback", async () => {
    const path = join(shm!, "tmpfs.bin");
    const w = await writeFile(path, data, sizes, { staging }, 2);
    if (!w.direct) expect(w.fallback).toMatch(/O_DIRECT refused by the filesystem \(EINVAL (at open|writing at \d+)\)/);
    else expect(w.fallback).toBeNull();
    expect(statSync(path).size).toBe(data.length);
    expect(Buffer.compare(readFileSync(path), data)).toBe(0);
  });

  it("refuses a non-sequential push, and staging buffers shared by two open writers", async () => {
    const path = join(disk, "seq.bin");
    const fd = openSync(path, "w");
    const w = new DirectFileWriter(fd, path, { staging });
    try {
      await w.push(data.subarray(0, 10), 0);
      await expect(w.push(data.subarray(0, 10), 20)).rejects.toThrow(/writes must be sequential: push at 20, but the file ends at 10/);
      expect(() => new DirectFileWriter(fd, path, { staging })).toThrow(/staging buffers belong to a writer that is still open/);
      await w.drain();
    } finally {
      w.close();
      closeSync(fd);
    }
    expect(readFileSync(path)).toEqual(Buffer.from(data.subarray(0, 10)));
  });

  it("reports a failed write (the file descriptor is read-only)", async () => {
    const path = join(disk, "ro.bin");
    closeSync(openSync(path, "w"));
    const fd = openSync(path, "r");
    const w = new DirectFileWriter(fd, path, { staging, direct: false });
    try {
      await w.push(data.subarray(0, 100), 0);
      await expect(w.drain()).rejects.toThrow(/cannot write 100 bytes at 0 of .*ro\.bin: EBADF/);
    } finally {
      w.close();
      closeSync(fd);
    }
  });

  it("holes: all-zero 256 KiB blocks of a buffer stay holes of the pre-truncated file; skipTo continues further on", async () => {
    const BLOCK = 256 << 10;
    const big = new StagingBuffers(4 * BLOCK, 2);
    // Block 1 and 2 of the first buffer zero, block 6 zero, a non-zero byte in the last 4 KiB of block 3.
    const bytes = pattern(8 * BLOCK + 5000, 11);
    bytes.fill(0, BLOCK, 3 * BLOCK);
    bytes.fill(0, 3 * BLOCK, 4 * BLOCK - 1);
    bytes.fill(0, 6 * BLOCK, 7 * BLOCK);
    const skipFrom = bytes.length;
    const skipTo = 12 * BLOCK;
    const tail = pattern(3000, 12);
    const path = join(disk, "holes.bin");
    const fd = openSync(path, "w");
    const w = new DirectFileWriter(fd, path, { staging: big, holes: true });
    try {
      ftruncateSync(fd, skipTo + tail.length);
      for (let at = 0; at < bytes.length; at += 100_000) await w.push(bytes.subarray(at, Math.min(at + 100_000, bytes.length)), at);
      await expect(w.skipTo(skipFrom + 1)).rejects.toThrow(/skipTo\(\d+\) must be a multiple of 4096 at or after the end/);
      await w.skipTo(skipTo);
      await w.push(tail, skipTo);
      await w.drain();
      fsyncSync(fd);
    } finally {
      w.close();
      closeSync(fd);
    }
    const want = new Uint8Array(skipTo + tail.length);
    want.set(bytes, 0);
    want.set(tail, skipTo);
    expect(Buffer.compare(readFileSync(path), want)).toBe(0);
    expect(w.written).toBe(bytes.length + tail.length);
    // Written: blocks 0, 3, 4, 5, 7, 8 (+ tail page) and the tail: the file has holes where nothing was written.
    expect(statSync(path).blocks * 512).toBeLessThanOrEqual(7 * BLOCK + 16384);
  });
});

