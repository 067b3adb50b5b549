import { closeSync, existsSync, mkdtempSync, openSync, rmSync, statSync, truncateSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { openCheckpointIndex, type ExpertLocation } from "../src/store/checkpoint.js";
import { BudgetError, CheckpointError, ExpertReadError } from "../src/errors.js";
import { ExpertStore, type ExpertHandle } from "../src/store/expert-store.js";
import { simulateCache, type CacheTraceRequest } from "../src/store/cache-sim.js";
import { EXPERT_TENSORS, expectedByte, expertBytes, expertSeed, writeSyntheticK3 } from "./make-checkpoint.js";

const spec = { layers: [1, 2, 3], experts: 24, hidden: 64, latent: 128, inter: 96 };
let dir: string;
let experts: ExpertLocation[];

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), "k3-store-"));
  writeSyntheticK3({ dir, ...spec });
  const ckpt = openCheckpointIndex(dir);
  experts = spec.layers.flatMap((l) => ckpt.experts(l));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** Every byte of the handle equals what the writer put there. */
function verify(h: ExpertHandle): void {
  expect(h.bytes.byteLength).toBe(expertBytes(spec.latent, spec.inter));
  EXPERT_TENSORS.forEach((name, t) => {
    const info = h.location.tensors[name];
    const seed = expertSeed(h.layer, h.id, t);
    for (let p = 0; p < info.byteLength; p += 97) expect(h.bytes[info.offset + p]).toBe(expectedByte(name, seed, p));
    expect(h.bytes[info.offset + info.byteLength - 1]).toBe(expectedByte(name, seed, info.byteLength - 1));
  });
}

async function getAll(store: ExpertStore, layer: number, ids: number[]): Promise<ExpertHandle[]> {
  const got: ExpertHandle[] = [];
  for await (const h of store.request(layer, ids).completed()) {
    verify(h);
    got.push(h);
    h.release();
  }
  return got;
}

describe("checkpoint index", () => {
  it("finds each expert as one contiguous run, offsets from the header (lexicographic order on disk)", () => {
    const l1 = experts.filter((e) => e.layer === 1);
    expect(l1.map((e) => e.id)).toEqual(Array.from({ length: 24 }, (_, i) => i));
    expect(l1[10].offset).toBeLessThan(l1[2].offset); // "10" sorts before "2"
    expect(l1.every((e) => e.byteLength === expertBytes(spec.latent, spec.inter))).toBe(true);
    expect(l1.some((e) => e.offset % 4096 !== 0)).toBe(true);
  });

  it("names a missing shard", () => {
    const d = mkdtempSync(join(tmpdir(), "k3-missing-"));
    try {
      const files = writeSyntheticK3({ dir: d, ...spec, layers: [1, 2] });
      rmSync(files[1]);
      expect(() => openCheckpointIndex(d)).toThrow(CheckpointError);
      expect(() => openCheckpointIndex(d)).toThrow(/MissingShard: shard "model-00002-of-00002.safetensors" listed in weight_map does not exist/);
    } finally {
      rmSync(d, { recursive: true, force: true });
    }
  });
});

describe("ExpertStore reads", () => {
  it("reads every expert byte-exact with O_DIRECT aligned-superset reads", async () => {
    const store = ExpertStore.open({ experts, ioSlots: 4, readers: 4 });
    try {
      expect(store.fileInfo().every((f) => f.direct)).toBe(true);
      const got = await getAll(store, 2, Array.from({ length: 24 }, (_, i) => i));
      expect(got.length).toBe(24);
      const s = store.stats();
      expect(s.directReads).toBe(24);
      expect(s.bufferedReads).toBe(0);
      expect(s.bytesRequested).toBe(24 * expertBytes(spec.latent, spec.inter));
      expect(s.deviceBytes).toBeGreaterThanOrEqual(s.bytesRequested);
      expect(s.deviceBytes).toBeLessThanOrEqual(s.bytesRequested + 24 * 8192);
    } finally {
      store.close();
    }
  });

  it("falls back to buffered reads when O_DIRECT is off, same bytes", async () => {
    const store = ExpertStore.open({ experts, ioSlots: 3, readers: 2, direct: false });
    try {
      await getAll(store, 1, [0, 5, 23, 10]);
      expect(store.stats().bufferedReads).toBe(4);
      expect(store.fileInfo().every((f) => !f.direct)).toBe(true);
    } finally {
      store.close();
    }
  });

  for (const direct of [true, false])
    it(`split into 8 KiB pieces (${direct ? "O_DIRECT" : "buffered"}), every byte lands in place`, async () => {
      const store = ExpertStore.open({ experts, ioSlots: 4, readers: 4, pieceBytes: 8192, direct });
      try {
        expect((await getAll(store, 2, [0, 9, 10, 23, 4])).length).toBe(5);
        const per = Math.ceil((expertBytes(spec.latent, spec.inter) + 4096) / 8192);
        expect(store.stats().reads).toBeGreaterThanOrEqual(5 * (per - 1));
      } finally {
        store.close();
      }
    });

  it("refuses a piece size that is not a multiple of 4096", () => {
    expect(() => ExpertStore.open({ experts, pieceBytes: 5000 })).toThrow(/pieceBytes must be 0 or a multiple of 4096/);
  });

  it("serves more misses than slots in waves when handles are released", async () => {
    const store = ExpertStore.open({ experts, ioSlots: 2, readers: 2 });
    try {
      expect((await getAll(store, 3, [3, 1, 4, 15, 9, 2, 6])).length).toBe(7);
    } finally {
      store.close();
    }
  });

  it("per-expert promises resolve in request order too", async () => {
    const store = ExpertStore.open({ experts, ioSlots: 4 });
    try {
      const req = store.request(1, [7, 8, 9]);
      const hs = await Promise.all(req.handles);
      expect(hs.map((h) => h.id)).toEqual([7, 8, 9]);
      hs.forEach(verify);
      hs.forEach((h) => h.release());
    } finally {
      store.close();
    }
  });
});

describe("ExpertStore cache", () => {
  it("keeps each layer's recent experts (per-layer LRU) and counts resident hits", async () => {
    const store = ExpertStore.open({ experts, slotsPerLayer: 3, ioSlots: 4, cachePolicy: "lru" });
    try {
      await getAll(store, 1, [0, 1, 2]);
      await getAll(store, 2, [0, 1, 2]); // another layer never evicts layer 1
      expect(store.isResident(1, 0) && store.isResident(1, 2)).toBe(true);
      const again = await getAll(store, 1, [0, 1, 5]);
      expect(again.filter((h) => h.source === "resident").map((h) => h.id).sort()).toEqual([0, 1]);
      expect(store.isResident(1, 2)).toBe(false); // LRU victim when 5 came in
      const s = store.stats();
      expect(s.requests).toBe(9);
      expect(s.residentHits).toBe(2);
      expect(s.misses).toBe(7);
      expect(s.evictions).toBe(1);
      expect(s.residentHitRate).toBeCloseTo(2 / 9);
    } finally {
      store.close();
    }
  });

  it("lfu (the default) keeps the more requested expert: a miss joins a full layer only when requested more often, else it is read, used and freed", async () => {
    const store = ExpertStore.open({ experts, slotsPerLayer: 1, ioSlots: 4 });
    try {
      expect(store.cachePolicy).toBe("lfu");
      await getAll(store, 1, [0]);
      expect((await getAll(store, 1, [0]))[0].source).toBe("resident"); // 0 requested twice
      expect((await getAll(store, 1, [3]))[0].source).toBe("read"); // 3 once: declined
      expect(store.isResident(1, 0) && !store.isResident(1, 3)).toBe(true);
      expect((await getAll(store, 1, [3]))[0].source).toBe("read"); // 3 twice, 0 twice: a tie keeps 0
      expect(store.stats()).toMatchObject({ admissionsDeclined: 2, evictions: 0 });
      await getAll(store, 1, [3]); // 3 three times > 0 twice: 3 takes the slot
      expect(store.isResident(1, 3) && !store.isResident(1, 0)).toBe(true);
      expect((await getAll(store, 1, [3]))[0].source).toBe("resident");
      const s = store.stats();
      expect(s).toMatchObject({ requests: 6, residentHits: 2, misses: 4, evictions: 1, admissionsDeclined: 2 });
    } finally {
      store.close();
    }
  });

  it("under lru every miss evicts (the lfu test's sequence: 4 resident hits where lfu's caution gets 2); a bad policy is refused", async () => {
    const store = ExpertStore.open({ experts, slotsPerLayer: 1, ioSlots: 4, cachePolicy: "lru" });
    try {
      for (const id of [0, 0, 3, 3, 3, 3]) await getAll(store, 1, [id]);
      expect(store.stats()).toMatchObject({ residentHits: 4, evictions: 1, admissionsDeclined: 0 });
      expect(() => ExpertStore.open({ experts, cachePolicy: "arc" as never })).toThrow(/cachePolicy must be one of lfu, lru, got "arc"/);
    } finally {
      store.close();
    }
  });

  it("holds the same experts whatever order reads complete and handles are released: its hits equal the simulator's, request for request", async () => {
    // Skewed requests of 1-6 unique experts over two layers, a few experts hotter than the rest.
    let x = 12345;
    const rand = () => ((x = (x * 1103515245 + 12345) % 2 ** 31) / 2 ** 31);
    const trace: CacheTraceRequest[] = [];
    for (let r = 0; r < 160; r++) {
      const ids = new Set<number>();
      const n = 1 + Math.floor(rand() * 6);
      while (ids.size < n) ids.add(Math.floor(rand() ** 2 * spec.experts));
      trace.push({ layer: 1 + (r % 2), experts: [...ids] });
    }
    for (const cachePolicy of ["lfu", "lru"] as const) {
      const want = simulateCache(trace, cachePolicy, 3).hits;
      // Readers 1 or 8 and three release orders (as they arrive, reversed at the end, shuffled at the end): completion order varies.
      for (const [readers, order] of [[1, "arrival"], [8, "arrival"], [8, "reverse"], [8, "shuffle"]] as const) {
        const store = ExpertStore.open({ experts, slotsPerLayer: 3, ioSlots: 6, readers, cachePolicy });
        try {
          for (const r of trace) {
            const got: ExpertHandle[] = [];
            for await (const h of store.request(r.layer, r.experts).completed()) {
              if (order === "arrival") h.release();
              else got.push(h);
            }
            if (order === "reverse") got.reverse();
            if (order === "shuffle") got.sort(() => rand() - 0.5);
            for (const h of got) h.release();
          }
          expect(store.stats().residentHits, `${cachePolicy} readers ${readers} ${order}`).toBe(want);
        } finally {
          store.close();
        }
      }
      expect(want).toBeGreaterThan(0);
    }
  });

  it("seedCounts (earlier runs' counts) take part in lfu's choice; requestCounts returns seeds + requests; bad seeds are refused", async () => {
    const store = ExpertStore.open({ experts, slotsPerLayer: 1, ioSlots: 4 });
    try {
      store.seedCounts(1, [[3, 10]]);
      await getAll(store, 1, [0]);
      await getAll(store, 1, [0]); // 0: 2 requests, resident
      await getAll(store, 1, [3]); // 3: 10 seeded + 1 > 2: replaces 0 at once
      expect(store.isResident(1, 3) && !store.isResident(1, 0)).toBe(true);
      expect(store.requestCounts().get(1)).toEqual(new Map([[3, 11], [0, 2]]));
      expect(() => store.seedCounts(1, [[99, 1]])).toThrow(/layer 1 has no expert 99/);
      expect(() => store.seedCounts(1, [[0, -1]])).toThrow(/count -1 is not a finite number >= 0/);
      expect(() => store.seedCounts(1, [[0, Number.NaN]])).toThrow(/not a finite number/);
    } finally {
      store.close();
    }
  });

  it("a request never evicts its own hits", async () => {
    const store = ExpertStore.open({ experts, slotsPerLayer: 2, ioSlots: 4 });
    try {
      await getAll(store, 1, [0, 1]);
      const got = await getAll(store, 1, [0, 1, 2, 3]);
      expect(got.filter((h) => h.source === "resident").length).toBe(2);
    } finally {
      store.close();
    }
  });

  it("prefetched experts are prefetch hits, not resident hits", async () => {
    const store = ExpertStore.open({ experts, slotsPerLayer: 0, ioSlots: 8, readers: 4 });
    try {
      expect(store.prefetch(2, [4, 5])).toBe(2);
      const got = await getAll(store, 2, [4, 5, 6]);
      expect(got.filter((h) => h.source === "prefetched").length).toBe(2);
      const s = store.stats();
      expect(s.residentHits).toBe(0);
      expect(s.prefetchHits).toBe(2);
      expect(s.residentHitRate).toBe(0);
      store.prefetch(3, [1, 2]);
      store.cancelPrefetch();
      expect((await getAll(store, 3, [1, 2])).length).toBe(2); // still correct after a cancel
    } finally {
      store.close();
    }
  });
});

describe("ExpertStore warm", () => {
  const all = (layers: number[]) => layers.flatMap((layer) => Array.from({ length: spec.experts }, (_, id) => ({ layer, id })));

  it("fills every layer's cache in the background; later requests are resident hits with the right bytes, no further reads", async () => {
    const store = ExpertStore.open({ experts, slotsPerLayer: spec.experts, ioSlots: 4, readers: 4 });
    try {
      const seen: number[] = [];
      const task = store.warm(all(spec.layers), { onProgress: (p) => seen.push(p.experts) });
      const r = await task.done;
      const n = spec.layers.length * spec.experts;
      expect(r).toMatchObject({ experts: n, total: n, skipped: 0, failed: 0, error: null, cancelled: false, bytes: n * expertBytes(spec.latent, spec.inter) });
      expect(seen).toEqual(Array.from({ length: n }, (_, i) => i + 1));
      expect(spec.layers.every((l) => Array.from({ length: spec.experts }, (_, id) => id).every((id) => store.isResident(l, id)))).toBe(true);
      const reads = store.stats().reads;
      expect(store.stats().warmBytes).toBe(store.stats().deviceBytes); // every read so far was the warm's
      const got = await getAll(store, 3, [23, 0, 11]);
      expect(got.every((h) => h.source === "resident")).toBe(true);
      const s = store.stats();
      expect(s.reads).toBe(reads);
      expect(s.bytesRequested).toBe(0); // warm reads are not demand bytes
      expect(s.evictions).toBe(0);
    } finally {
      store.close();
    }
  });

  it("never evicts: stops at each layer's room and skips what is already resident", async () => {
    const store = ExpertStore.open({ experts, slotsPerLayer: 5, ioSlots: 4, readers: 4 });
    try {
      await getAll(store, 1, [7, 8]);
      const r = await store.warm(all([1, 2]), { inflight: 3 }).done;
      expect(r.experts).toBe(3 + 5);
      expect(r.skipped).toBe(2 * spec.experts - 8);
      expect(store.isResident(1, 7) && store.isResident(1, 8)).toBe(true);
      expect(store.stats().evictions).toBe(0);
      const l2 = Array.from({ length: spec.experts }, (_, id) => id).filter((id) => store.isResident(2, id));
      expect(l2.length).toBe(5);
      for (const h of await getAll(store, 2, l2)) expect(h.source).toBe("resident");
    } finally {
      store.close();
    }
  });

  it("demand requests during a warm get correct bytes (joining a warm read in flight) and the warm still completes", async () => {
    const store = ExpertStore.open({ experts, slotsPerLayer: spec.experts, ioSlots: 2, readers: 2 });
    try {
      const task = store.warm(all(spec.layers), { inflight: 2 });
      const order = [...experts].sort((a, b) => a.file.localeCompare(b.file) || a.offset - b.offset);
      const first = order[0]; // the warm's first read: a request for it joins that read
      const got = await getAll(store, first.layer, [first.id, (first.id + 5) % spec.experts, (first.id + 9) % spec.experts]);
      expect(got.length).toBe(3);
      store.prefetch(2, [1, 2, 3]);
      store.cancelPrefetch(); // drops queued low-priority reads, warm ones included: they are queued again
      const r = await task.done;
      expect(r.failed).toBe(0);
      expect(r.experts + r.skipped).toBeGreaterThanOrEqual(r.total);
      expect(spec.layers.every((l) => Array.from({ length: spec.experts }, (_, id) => id).every((id) => store.isResident(l, id)))).toBe(true);
      for (const l of spec.layers) await getAll(store, l, Array.from({ length: spec.experts }, (_, id) => id)); // verifies every byte
    } finally {
      store.close();
    }
  });

  it("cancel() and close() end it at once; a failed read is counted, not thrown; one warm at a time", async () => {
    const store = ExpertStore.open({ experts, slotsPerLayer: spec.experts, ioSlots: 4, readers: 4 });
    try {
      store.injectFault(2, "eio");
      const task = store.warm(all(spec.layers), { inflight: 1 });
      expect(() => store.warm(all([1]))).toThrow(/a warm is already running/);
      let r = await task.done;
      expect(r.failed).toBe(1);
      expect(r.error).toMatch(/EIO|I\/O|errno 5/i);
      expect(r.experts).toBe(r.total - 1);
      await getAll(store, 1, [0, 1, 2]); // the failed expert is read again on demand (or was resident)
    } finally {
      store.close();
    }
    const s2 = ExpertStore.open({ experts, slotsPerLayer: spec.experts, ioSlots: 4, readers: 4 });
    const t2 = s2.warm(all(spec.layers), { inflight: 1 });
    t2.cancel();
    const r2 = await t2.done;
    expect(r2.cancelled).toBe(true);
    expect(r2.experts).toBeLessThan(r2.total);
    const t3 = s2.warm(all(spec.layers), { inflight: 1 });
    s2.close();
    expect((await t3.done).cancelled).toBe(true);
    expect(() => s2.warm(all([1]))).toThrow(/after close/);
  });
});

describe("ExpertStore memory", () => {
  it("RSS grows by the arena at open (faulted in up front) and not while reading", async () => {
    const d = mkdtempSync(join(tmpdir(), "k3-rss-"));
    try {
      // ~1.3 MB experts: 3 layers x 8 cache slots + 6 streaming slots = 30 slots, ~40 MB arena.
      writeSyntheticK3({ dir: d, layers: [1, 2, 3], experts: 12, hidden: 64, latent: 1024, inter: 1024, content: "fast" });
      const { execFileSync } = await import("node:child_process");
      const out = execFileSync(process.execPath, ["--expose-gc", "--import", "tsx", new URL("./rss-child.ts", import.meta.url).pathname, d, "1,2,3"], { encoding: "utf8" });
      const r = JSON.parse(out.trim().split("\n").at(-1)!);
      expect(r.reads).toBe(36 + 2 * 3 * 4); // rounds 2 and 3: 8 of 12 per layer are resident hits
      const figures = JSON.stringify(r);
      expect(r.afterOpen - r.before, figures).toBeGreaterThanOrEqual(r.arena * 0.95);
      expect(r.afterOpen - r.before, figures).toBeLessThanOrEqual(r.arena + 8 * 2 ** 20);
      // Reading 36 experts three times (cache hits and misses) adds almost nothing: no page cache in RSS, no growth.
      expect(r.afterReads - r.afterOpen, figures).toBeLessThanOrEqual(16 * 2 ** 20);
    } finally {
      rmSync(d, { recursive: true, force: true });
    }
  }, 60_000);
});

describe("ExpertStore faults", () => {
  it("refuses an arena larger than the budget, with both numbers", () => {
    const need = ExpertStore.arenaBytesFor({ experts, slotsPerLayer: 4, ioSlots: 4 }).bytes;
    expect(() => ExpertStore.open({ experts, slotsPerLayer: 4, ioSlots: 4, budgetBytes: need - 1 })).toThrow(BudgetError);
    try {
      ExpertStore.open({ experts, slotsPerLayer: 4, ioSlots: 4, budgetBytes: 1_000_000 });
    } catch (e) {
      expect((e as BudgetError).neededBytes).toBe(need);
      expect((e as BudgetError).budgetBytes).toBe(1_000_000);
      expect((e as Error).message).toMatch(new RegExp(`${need} B.*1000000 B`));
    }
  });

  it("an injected EIO mid-run rejects that expert with a clear error; the store keeps working", async () => {
    const store = ExpertStore.open({ experts, ioSlots: 4, readers: 1 });
    try {
      store.injectFault(1, "eio");
      const req = store.request(1, [0, 1, 2]);
      const results = await Promise.allSettled(req.handles);
      const failed = results.filter((r) => r.status === "rejected") as PromiseRejectedResult[];
      expect(failed.length).toBe(1);
      expect(failed[0].reason).toBeInstanceOf(ExpertReadError);
      expect(String(failed[0].reason.message)).toMatch(/layer 1 expert \d+: .*safetensors: read error .*injected EIO/);
      for (const r of results) if (r.status === "fulfilled") r.value.release();
      await getAll(store, 1, [0, 1, 2]);
    } finally {
      store.close();
    }
  });

  it("a short read is an error, never partial data", async () => {
    const store = ExpertStore.open({ experts, ioSlots: 4, readers: 1 });
    try {
      store.injectFault(0, "short");
      await expect(store.request(2, [3]).handles[0]).rejects.toThrow(/short read: got \d+ bytes of the \d+ needed/);
    } finally {
      store.close();
    }
  });

  it("a truncated shard: refused at open naming the expert, or a short read if it shrinks later", async () => {
    const d = mkdtempSync(join(tmpdir(), "k3-trunc-"));
    try {
      const files = writeSyntheticK3({ dir: d, ...spec, layers: [1] });
      const ex = openCheckpointIndex(d).experts(1);
      const last = ex.reduce((a, b) => (b.offset > a.offset ? b : a));
      const size = statSync(files[0]).size;
      // Shrinks while the store is open: the read comes back short, never as partial data.
      const store = ExpertStore.open({ experts: ex, ioSlots: 2 });
      try {
        truncateSync(files[0], size - 5000);
        await expect(store.request(1, [last.id]).handles[0]).rejects.toThrow(/model-00001-of-00001.safetensors: (short read|truncated shard)/);
      } finally {
        store.close();
      }
      // Already truncated when the store opens (stale index): refused up front.
      expect(() => ExpertStore.open({ experts: ex, ioSlots: 2 })).toThrow(CheckpointError);
      expect(() => ExpertStore.open({ experts: ex, ioSlots: 2 })).toThrow(new RegExp(`layer 1 expert ${last.id}: bytes \\[\\d+, \\d+\\) lie outside the \\d+-byte file`));
      expect(() => openCheckpointIndex(d)).toThrow(/model-00001-of-00001.safetensors: MetadataIncompleteBuffer: the tensors cover \d+ data bytes but the file holds \d+/);
    } finally {
      rmSync(d, { recursive: true, force: true });
    }
  });

  it("refuses a hostile expert location at open", () => {
    const bad = { ...experts[0], offset: -4 };
    expect(() => ExpertStore.open({ experts: [bad], ioSlots: 1 })).toThrow(/layer 1 expert 0: bytes \[-4,/);
  });

  it("names an unknown expert and refuses duplicate ids", () => {
    const store = ExpertStore.open({ experts, ioSlots: 2 });
    try {
      expect(() => store.request(1, [24])).toThrow(/layer 1 has no expert 24/);
      expect(() => store.request(9, [0])).toThrow(/layer 9 has no expert 0/);
      expect(() => store.request(1, [3, 3])).toThrow(/duplicate expert ids in layer 1/);
      expect(() => store.request(1, [0, 24])).toThrow(/layer 1 has no expert 24/);
      expect(store.stats().requests).toBe(0); // nothing was pinned or counted by the refused requests
    } finally {
      store.close();
    }
  });

  it("refuses use after close", () => {
    const store = ExpertStore.open({ experts, ioSlots: 1 });
    store.close();
    expect(() => store.request(1, [0])).toThrow(/used after close/);
  });
});

void existsSync; void openSync; void closeSync;
