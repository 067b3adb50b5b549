/**
 * Every packed-trunk read checked against its crc32 on the reader threads (issue #15): 100 flipped
 * bytes in trunk.bin, or two same-size tensors swapped, gave other tokens and no error because only
 * pinned layers were verified. Now every ring read (and pinned read) is checked as it lands, by
 * the thread that finished it, with a PCLMULQDQ crc32 equal to zlib's.
 */
import { closeSync, cpSync, mkdtempSync, openSync, readFileSync, readSync, rmSync, writeSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { crc32 as zlibCrc32 } from "node:zlib";
import { afterAll, describe, expect, it } from "vitest";
import { ChecksumError } from "../src/errors.js";
import { native } from "../src/native.js";
import { packTrunk, readTrunkManifest, type TrunkManifest } from "../src/trunk/trunk-pack.js";
import { TrunkStreamer } from "../src/trunk/trunk-stream.js";
import { tinyK3Dir } from "./fixtures.js";

const root = mkdtempSync(join(tmpdir(), "k3-trunk-crc-"));
afterAll(() => rmSync(root, { recursive: true, force: true }));

function rng(seed: number) {
  let s = seed >>> 0 || 1;
  return () => ((s = (Math.imul(s, 1664525) + 1013904223) >>> 0) / 2 ** 32);
}

describe("crc32 (native/src/crc32.c)", () => {
  it("the PCLMULQDQ fold equals the table reference and zlib at every length 0..600 and offset 0..63, and on MiB buffers", () => {
    const r = rng(7);
    const buf = Buffer.alloc((4 << 20) + 64);
    for (let i = 0; i < buf.length; i++) buf[i] = (r() * 256) | 0;
    for (let n = 0; n <= 600; n++) {
      const off = n % 64;
      const v = buf.subarray(off, off + n);
      const start = (r() * 2 ** 32) >>> 0;
      const ref = native.crc32(v, start, true);
      expect(native.crc32(v, start), `n ${n}`).toBe(ref);
      expect(ref).toBe(zlibCrc32(v, start) >>> 0);
    }
    for (const n of [4 << 20, (4 << 20) - 15, 65_537, 1_000_003]) {
      const v = buf.subarray(3, 3 + n);
      expect(native.crc32(v)).toBe(zlibCrc32(v) >>> 0);
      expect(native.crc32(v, 0, true)).toBe(zlibCrc32(v) >>> 0);
    }
    expect(native.crc32(Buffer.from("123456789"))).toBe(0xcbf43926);
    // A change of one bit anywhere changes it.
    const v = Buffer.from(buf.subarray(0, 100_000));
    const before = native.crc32(v);
    v[77_777] ^= 0x10;
    expect(native.crc32(v)).not.toBe(before);
    if (!native.crc32UsesPclmul()) console.log("crc32: this CPU has no PCLMULQDQ: the fold was not tested, only the table");
  });

  it("every kernel (table, PCLMULQDQ, VPCLMULQDQ) gives zlib's value at every length 0..2100, offsets 0..63, and on 4 MiB", () => {
    const kernels = (["table", "pclmul", "vpclmul"] as const).slice(0, ["table", "pclmul", "vpclmul"].indexOf(native.crc32Kernel()) + 1);
    if (kernels.length < 3) console.log(`crc32: this CPU's best kernel is ${native.crc32Kernel()}: ${3 - kernels.length} wider kernel(s) not tested`);
    const r = rng(13);
    const buf = Buffer.alloc((4 << 20) + 64);
    for (let i = 0; i < buf.length; i++) buf[i] = (r() * 256) | 0;
    // 2100 covers the wide kernel's thresholds (512), several 256-byte blocks and every tail length.
    for (let n = 0; n <= 2100; n++) {
      const v = buf.subarray(n % 64, (n % 64) + n);
      const start = (r() * 2 ** 32) >>> 0;
      const want = zlibCrc32(v, start) >>> 0;
      for (const k of kernels) expect(native.crc32(v, start, k), `${k} n ${n}`).toBe(want);
    }
    for (const n of [4 << 20, (4 << 20) - 17, 1_000_003]) {
      const v = buf.subarray(5, 5 + n);
      const want = zlibCrc32(v) >>> 0;
      for (const k of kernels) expect(native.crc32(v, 0, k), `${k} n ${n}`).toBe(want);
    }
    expect(() => native.crc32(buf.subarray(0, 8), 0, "avx9" as "table")).toThrow(/kernel must be "table", "pclmul" or "vpclmul"/);
  });

  it("crc32Combine(crc(A), crc(B), |B|) = crc(A ‖ B) at every cut", () => {
    const r = rng(11);
    const buf = Buffer.alloc(70_000);
    for (let i = 0; i < buf.length; i++) buf[i] = (r() * 256) | 0;
    for (let i = 0; i < 300; i++) {
      const n = (r() * buf.length) | 0;
      const cut = (r() * (n + 1)) | 0;
      const whole = zlibCrc32(buf.subarray(0, n)) >>> 0;
      expect(native.crc32Combine(native.crc32(buf.subarray(0, cut)), native.crc32(buf.subarray(cut, n)), n - cut)).toBe(whole);
    }
  });
});

/** A fresh copy of tiny-k3's packed trunk (packed once). */
let packed: Promise<string> | null = null;
async function trunkCopy(name: string): Promise<{ dir: string; m: TrunkManifest }> {
  packed ??= packTrunk(tinyK3Dir, join(root, "packed")).then(() => join(root, "packed"));
  const dir = join(root, name);
  cpSync(await packed, dir, { recursive: true });
  return { dir, m: readTrunkManifest(dir) };
}

function patch(file: string, at: number, bytes: Buffer): void {
  const fd = openSync(file, "r+");
  writeSync(fd, bytes, 0, bytes.length, at);
  closeSync(fd);
}
function bytesAt(file: string, at: number, n: number): Buffer {
  const b = Buffer.alloc(n);
  const fd = openSync(file, "r");
  readSync(fd, b, 0, n, at);
  closeSync(fd);
  return b;
}

/** Both engines: pread threads, and io_uring where the kernel allows it ("auto" falls back to pread). */
const engines = () => ["pread", "auto"] as const;

describe("TrunkStreamer checks every ring read on the reader threads (default verify)", () => {
  it("a pristine trunk streams with no error, each tensor cut across 4 KiB reads (the parts are combined)", async () => {
    const { dir } = await trunkCopy("pristine");
    for (const ioEngine of engines()) {
      const s = await TrunkStreamer.open({ dir, ringSlots: 2, chunkBytes: 4096, ioEngine });
      try {
        for (let round = 0; round < 2; round++) for (let l = 0; l < 13; l++) (await s.acquire(l)).release();
      } finally {
        s.close();
      }
    }
  });

  it("100 flipped bytes in a streamed layer: acquire fails naming trunk.bin, the layer, the tensor and its offset (was: other tokens, no error)", async () => {
    const { dir, m } = await trunkCopy("flipped");
    const g = m.groups.find((x) => x.layer === 3)!;
    const [name, t] = Object.entries(g.tensors).sort((a, b) => b[1].byteLength - a[1].byteLength)[0];
    const file = join(dir, "trunk.bin");
    const at = g.offset + t.offset + Math.floor(t.byteLength / 3);
    const old = bytesAt(file, at, 100);
    patch(file, at, Buffer.from(old.map((b) => b ^ 0x5a)));
    for (const ioEngine of engines()) {
      for (const chunkBytes of [4096, 64 << 10]) {
        const s = await TrunkStreamer.open({ dir, ringSlots: 2, chunkBytes, ioEngine });
        try {
          (await s.acquire(0)).release();
          (await s.acquire(1)).release();
          (await s.acquire(2)).release(); // its read-ahead of layer 3 fails quietly until 3 is asked for
          const err = await s.acquire(3).then(() => null, (e) => e);
          expect(err, `${ioEngine} ${chunkBytes}`).toBeInstanceOf(ChecksumError);
          expect(err.message).toContain(file);
          expect(err.message).toContain(`checksum mismatch in ${name} (layer 3, offset ${g.offset + t.offset} (+${t.byteLength} bytes))`);
          expect(err.message).toMatch(/expected crc32 0x[0-9a-f]{8}, got 0x[0-9a-f]{8}/);
          (await s.acquire(4)).release(); // the other layers still stream
        } finally {
          s.close();
        }
      }
    }
    // "pinned" leaves ring reads unchecked (what the default was): the corruption passes silently.
    const s = await TrunkStreamer.open({ dir, ringSlots: 2, chunkBytes: 64 << 10, verify: "pinned" });
    try {
      (await s.acquire(3)).release();
    } finally {
      s.close();
    }
    // Pinned, it fails the open.
    await expect(TrunkStreamer.open({ dir, pinnedLayers: [3], ringSlots: 1, chunkBytes: 64 << 10 })).rejects.toThrow(ChecksumError);
  });

  it("two same-size tensors swapped in trunk.bin (every byte still a valid weight) fail both layers' reads", async () => {
    const { dir, m } = await trunkCopy("swapped");
    const file = join(dir, "trunk.bin");
    const g = m.groups.find((x) => x.layer === 5)!;
    const bySize = new Map<number, string[]>();
    for (const [n, t] of Object.entries(g.tensors)) bySize.set(t.byteLength, [...(bySize.get(t.byteLength) ?? []), n]);
    const pair = [...bySize.values()].find((names) => names.length >= 2 && g.tensors[names[0]].crc32 !== g.tensors[names[1]].crc32)!;
    expect(pair).toBeDefined();
    const [a, b] = pair.map((n) => g.tensors[n]);
    const ba = bytesAt(file, g.offset + a.offset, a.byteLength);
    const bb = bytesAt(file, g.offset + b.offset, b.byteLength);
    patch(file, g.offset + a.offset, bb);
    patch(file, g.offset + b.offset, ba);
    const s = await TrunkStreamer.open({ dir, ringSlots: 1, chunkBytes: 8192 });
    try {
      const err = await s.acquire(5).then(() => null, (e) => e);
      expect(err).toBeInstanceOf(ChecksumError);
      const first = a.offset < b.offset ? pair[0] : pair[1];
      expect(err.message).toContain(`checksum mismatch in ${first} (layer 5`);
      expect(err.message).toContain("1 more tensor(s) of the layer differ");
    } finally {
      s.close();
    }
  });
});
