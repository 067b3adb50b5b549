// Terminating a worker thread while it is inside the store's entry points (read, readChecked, and
// view, stats, ref/unref, cancelPrefetch beside them) must not end the process: N-API calls fail
// while a worker's env terminates, and the glue returns quietly there (raw N-API with every status
// checked) instead of aborting in a failed throw. Seen once under heavy load in the engine's
// worker-close.test.ts as a fatal error in Store::Read.
import { writeFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { Worker } from "node:worker_threads";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { native } from "../src/native.js";
import { diskDir, pattern } from "./fixtures.js";

const WORKER = new URL("./terminate-worker.mjs", import.meta.url);
let dir: string;
let file: string;

beforeAll(() => {
  dir = diskDir("k3-terminate-");
  file = join(dir, "data.bin");
  writeFileSync(file, pattern((4 << 20) + 123, 7));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** The worker's next message (or its error / an exit before it). */
function nextMessage(w: Worker): Promise<{ type: string; issued?: number; done?: number; failures?: number; cancelled?: number }> {
  return new Promise((resolve, reject) => {
    w.once("message", resolve);
    w.once("error", reject);
    w.once("exit", (code) => reject(new Error(`worker exited (${code}) before its message`)));
  });
}

describe("native store reads in a worker that is terminated", () => {
  it("terminates 50 workers mid-read at different points; the process lives and a new worker reads in full", async () => {
    for (let i = 0; i < 50; i++) {
      const w = new Worker(WORKER, { workerData: { file, reads: 0 } });
      expect((await nextMessage(w)).type).toBe("reading");
      // 0..9 ms into the read loop: the terminate lands between bursts, inside one, or in a completion.
      if (i % 10 > 0) await new Promise((r) => setTimeout(r, i % 10));
      expect(await w.terminate()).toBe(1);
    }
    const w = new Worker(WORKER, { workerData: { file, reads: 2000 } });
    const r = await nextMessage(w).then((m) => (m.type === "reading" ? nextMessage(w) : m));
    await w.terminate();
    expect(r.type).toBe("done");
    // Every read landed with status 0 and the file's bytes (seen through view()), or was a prefetch
    // that cancelPrefetch() dropped.
    expect([r.issued, r.done, r.failures]).toEqual([2000, 2000, 0]);
    expect(r.cancelled).toBeLessThan(2000);
  }, 180_000);

  it("still refuses bad arguments with the same errors and answers view/stats/cancelPrefetch (raw N-API in a live env)", () => {
    const s = new native.NativeExpertStore([file], 64 << 10, 2, 1, true, 1, false, () => {});
    try {
      expect(() => s.read("1" as unknown as number, 0, 0, 10, 0, false)).toThrow(/ExpertStore\.read: id must be a number/);
      expect(() => s.read(1.5, 0, 0, 10, 0, false)).toThrow(/id must be a non-negative integer/);
      expect(() => s.read(1, 1, 0, 10, 0, false)).toThrow(/file index 1 out of range/);
      expect(() => s.read(1, 0, 0, 10, 2, false)).toThrow(/slot 2 out of range/);
      expect(() => s.read(1, 0, 0, 70_000, 0, false)).toThrow(/length 70000 \(plus alignment\) does not fit a 65536-byte slot/);
      expect(() => s.read(1, 0, 5000, 10, 0, false, 100)).toThrow(/base must be <= offset and a multiple of the direct-I\/O alignment/);
      expect(() => s.readChecked("x", [], [], false)).toThrow(/between 1 and 2\^20 reads/);
      expect(() => s.readChecked("x", [["t", 0, 10]] as never, [[1, 0, 0, 10, 0]], false)).toThrow(/tensors\[0\] must be \[name, offset, length, crc32\]/);
      expect(() => s.readChecked("x", [["t", 0, 10, 2 ** 32]], [[1, 0, 0, 10, 0]], false)).toThrow(/crc32 a 32-bit unsigned integer/);
      expect(() => s.readChecked("x", [], [[1, 0]] as never, false)).toThrow(/reads\[0\] must be \[id, file, offset, length, slot, base\?\]/);
      expect(() => s.readChecked(1 as unknown as string, [], [], false)).toThrow(/expected \(label, tensors\[\], reads\[\], prefetch\)/);
      expect(() => s.view(0, 0)).toThrow(/ExpertStore\.view: range \[0, \+0\) is not inside the 131072-byte arena/);
      expect(() => s.view(-1, 10)).toThrow(/ExpertStore\.view: argument 'byteOffset' must be a non-negative integer/);
      expect(new Uint8Array(s.view(4096, 10)).length).toBe(10);
      expect(s.stats()).toMatchObject({ reads: 0, inflight: 0, engine: expect.stringMatching(/^(io_uring|io_uring\+sqpoll|pread)$/) });
      expect(s.cancelPrefetch()).toBe(0);
    } finally {
      s.close();
    }
    expect(() => s.read(1, 0, 0, 10, 0, false)).toThrow(/the store is closed/);
    expect(() => s.view(0, 10)).toThrow(/ExpertStore\.view: the store is closed/);
    expect(s.stats().reads).toBe(0);
  });
});
