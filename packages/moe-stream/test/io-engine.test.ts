// The store's behaviours under both read engines (io_uring and pread threads), engine selection
// (option, K3_NOURING, K3_SQPOLL, io_uring blocked) and the native completion events.
import { closeSync, mkdirSync, mkdtempSync, openSync, readSync, rmSync, statfsSync, statSync, truncateSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { openCheckpointIndex, type ExpertLocation } from "../src/store/checkpoint.js";
import { ExpertReadError, MoeStreamError, StoreStateError } from "../src/errors.js";
import { ExpertStore, type ExpertHandle } from "../src/store/expert-store.js";
import { resolveIoEngine, type IoEngine } from "../src/io/io-engine.js";
import { measureReadEngine } from "../src/io/io-stats.js";
import { native, type NativeReadDone } from "../src/native.js";
import { packTrunk } from "../src/trunk/trunk-pack.js";
import { TrunkStreamer } from "../src/trunk/trunk-stream.js";
import { diskDir, tinyK3Dir } from "./fixtures.js";
import { expertBytes, writeSyntheticK3 } from "./make-checkpoint.js";

const ECANCELED = 125;
const EPERM = 1;

const spec = { layers: [1, 2], experts: 24, hidden: 64, latent: 128, inter: 96 };
const EXPERT = expertBytes(spec.latent, spec.inter);
let dir: string;
let experts: ExpertLocation[];
const fileBytes = new Map<string, Buffer>();

beforeAll(() => {
  dir = diskDir("k3-engine-");
  for (const f of writeSyntheticK3({ dir, ...spec })) {
    const b = Buffer.alloc(statSync(f).size);
    const fd = openSync(f, "r");
    readSync(fd, b, 0, b.length, 0);
    closeSync(fd);
    fileBytes.set(f, b);
  }
  const ckpt = openCheckpointIndex(dir);
  experts = spec.layers.flatMap((l) => ckpt.experts(l));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** Every byte of the handle equals the file's bytes at the expert's location. */
function expectExact(h: ExpertHandle): void {
  const want = fileBytes.get(h.location.file)!.subarray(h.location.offset, h.location.offset + h.location.byteLength);
  expect(Buffer.from(h.bytes.buffer, h.bytes.byteOffset, h.bytes.byteLength).equals(want), `layer ${h.layer} expert ${h.id}`).toBe(true);
}

async function readAll(store: ExpertStore, layer: number, ids: number[]): Promise<ExpertHandle[]> {
  const got: ExpertHandle[] = [];
  for await (const h of store.request(layer, ids).completed()) {
    expectExact(h);
    got.push(h);
    h.release();
  }
  return got;
}

const all = Array.from({ length: 24 }, (_, i) => i);
const ENGINES: Array<Exclude<IoEngine, "auto">> = ["io_uring", "pread"];

describe.each(ENGINES)("ExpertStore on %s", (ioEngine) => {
  it("reports the engine it runs on", () => {
    const store = ExpertStore.open({ experts, ioSlots: 2, ioEngine });
    try {
      expect(store.stats().engine).toBe(ioEngine);
      expect(store.stats().engineNote).toBe("");
    } finally {
      store.close();
    }
    expect(store.stats().engine).toBe(ioEngine); // still known after close
  });

  for (const direct of [true, false])
    for (const pieceBytes of [0, 8192])
      it(`every expert byte-identical (${direct ? "O_DIRECT" : "buffered"}, ${pieceBytes ? "8 KiB pieces" : "one read each"})`, async () => {
        const store = ExpertStore.open({ experts, ioSlots: 5, readers: 4, direct, pieceBytes, ioEngine });
        try {
          expect(store.fileInfo().every((f) => f.direct === direct)).toBe(true);
          expect((await readAll(store, 1, all)).length).toBe(24);
          expect((await readAll(store, 2, [23, 0, 11, 7])).length).toBe(4);
          const s = store.stats();
          const reads = pieceBytes ? s.reads : 28;
          if (!pieceBytes) expect(s.reads).toBe(28);
          else expect(s.reads).toBeGreaterThanOrEqual(28 * Math.floor(EXPERT / 8192));
          expect(direct ? s.directReads : s.bufferedReads).toBe(reads);
          expect(s.bytesRequested).toBe(28 * EXPERT);
          if (direct) expect(s.deviceBytes).toBeLessThanOrEqual(28 * EXPERT + reads * 8192);
          else expect(s.deviceBytes).toBe(28 * EXPERT);
          expect(s.ioBusyNs).toBeGreaterThan(0);
          expect(s.readNs).toBeGreaterThan(0);
        } finally {
          store.close();
        }
      });

  it("an O_DIRECT read refused with EINVAL falls back to buffered for the file, same bytes", async () => {
    const store = ExpertStore.open({ experts, ioSlots: 4, readers: 2, ioEngine });
    try {
      store.injectFault(0, "direct-einval");
      await readAll(store, 1, [5]);
      expect(store.fileInfo()[0].direct).toBe(false);
      await readAll(store, 1, [6, 7, 8]);
      const s = store.stats();
      expect(s.bufferedReads).toBe(4);
      expect(s.directReads).toBe(0);
    } finally {
      store.close();
    }
  });

  for (const direct of [true, false])
    it(`a read that arrives in pieces (4 KiB per SQE on io_uring) is completed by resubmitting the rest (${direct ? "O_DIRECT" : "buffered"})`, async () => {
      const store = ExpertStore.open({ experts, ioSlots: 4, readers: 2, direct, ioEngine });
      try {
        store.injectFault(0, "split");
        await readAll(store, 2, [9]);
        store.injectFault(1, "split");
        await readAll(store, 2, [10, 11, 12]);
        const s = store.stats();
        expect(s.reads).toBe(4);
        expect(s.bytesRequested).toBe(4 * EXPERT);
        if (!direct) expect(s.deviceBytes).toBe(4 * EXPERT);
      } finally {
        store.close();
      }
    });

  it("an injected EIO rejects that expert with an ExpertReadError naming layer and expert", async () => {
    const store = ExpertStore.open({ experts, ioSlots: 4, readers: 1, ioEngine });
    try {
      store.injectFault(1, "eio");
      const results = await Promise.allSettled(store.request(1, [0, 1, 2]).handles);
      const failed = results.filter((r) => r.status === "rejected") as PromiseRejectedResult[];
      expect(failed.length).toBe(1);
      expect(failed[0].reason).toBeInstanceOf(ExpertReadError);
      expect(String(failed[0].reason.message)).toMatch(/^layer 1 expert \d+: .*model-0000\d-of-00002\.safetensors: read error at offset \d+: injected EIO/);
      for (const r of results) if (r.status === "fulfilled") r.value.release();
      expect((await readAll(store, 1, [0, 1, 2])).length).toBe(3); // the store keeps working
    } finally {
      store.close();
    }
  });

  for (const direct of [true, false])
    it(`a short read is an ExpertReadError, never partial data (${direct ? "O_DIRECT" : "buffered"})`, async () => {
      const store = ExpertStore.open({ experts, ioSlots: 4, readers: 1, direct, ioEngine });
      try {
        store.injectFault(0, "short");
        const err = await store.request(2, [3]).handles[0].then(() => null, (e) => e);
        expect(err).toBeInstanceOf(ExpertReadError);
        expect(err.message).toMatch(new RegExp(`^layer 2 expert 3: .*safetensors: short read: got \\d+ bytes of the ${EXPERT} needed at offset \\d+`));
        expect((await readAll(store, 2, [3])).length).toBe(1);
        expect(store.fileInfo().every((f) => f.direct === direct)).toBe(true); // a short read is no O_DIRECT refusal
      } finally {
        store.close();
      }
    });

  it("EOF before the requested length (file shrunk while open) names the file and offsets", async () => {
    const d = diskDir("k3-engine-trunc-");
    try {
      const files = writeSyntheticK3({ dir: d, ...spec, layers: [1] });
      const ex = openCheckpointIndex(d).experts(1);
      const last = ex.reduce((a, b) => (b.offset > a.offset ? b : a));
      const store = ExpertStore.open({ experts: ex, ioSlots: 2, ioEngine });
      try {
        truncateSync(files[0], statSync(files[0]).size - 5000);
        const err = await store.request(1, [last.id]).handles[0].then(() => null, (e) => e);
        expect(err).toBeInstanceOf(ExpertReadError);
        expect(err.message).toMatch(new RegExp(`^layer 1 expert ${last.id}: .*model-00001-of-00001.safetensors: (short read: got \\d+ bytes of the ${EXPERT} needed at offset ${last.offset}|truncated shard)`));
      } finally {
        store.close();
      }
    } finally {
      rmSync(d, { recursive: true, force: true });
    }
  });

  it("prefetched experts are prefetch hits; cancelPrefetch drops the queued ones", async () => {
    const store = ExpertStore.open({ experts, ioSlots: 10, prefetchSlots: 8, readers: 2, maxPrefetchInflight: 1, ioEngine });
    try {
      expect(store.prefetch(2, [4, 5])).toBe(2);
      const got = await readAll(store, 2, [4, 5, 6]);
      expect(got.filter((h) => h.source === "prefetched").length).toBe(2);
      // One prefetch at a time (the cap): the later ones are normally still queued when cancel runs,
      // but the reader threads can finish 8 page-cached reads before JS calls cancel, so a round that
      // cancelled nothing is repeated on other experts (up to 3 rounds).
      let cancelled = 0;
      for (const ids of [[10, 11, 12, 13, 14, 15, 16, 17], [0, 1, 2, 3, 7, 8, 9, 18], [19, 20, 21, 22, 23, 4, 5, 6]]) {
        expect(store.prefetch(1, ids)).toBe(8);
        const n = store.cancelPrefetch(); // 0..8: a reader may not have taken even the first one yet
        cancelled += n;
        expect((await readAll(store, 1, ids)).length).toBe(8);
        if (n > 0) break;
      }
      expect(cancelled, "some queued prefetch was dropped").toBeGreaterThanOrEqual(1);
      await new Promise((r) => setTimeout(r, 20));
      expect(store.stats().prefetchCancelled).toBe(cancelled);
    } finally {
      store.close();
    }
  });

  it("close() with reads in flight: every request settles, done or 'store closed', nothing after", async () => {
    const store = ExpertStore.open({ experts, ioSlots: 6, readers: 4, pieceBytes: 8192, ioEngine });
    const req = store.request(1, all);
    store.prefetch(2, [1, 2]);
    store.close();
    const results = await Promise.allSettled(req.handles);
    for (const r of results) {
      if (r.status === "fulfilled") expectExact(r.value);
      else expect(r.reason).toBeInstanceOf(StoreStateError);
    }
    expect(results.some((r) => r.status === "rejected")).toBe(true);
    expect(() => store.request(1, [0])).toThrow(/used after close/);
  });
});

// ---------------------------------------------------------------- the native events

/** Drives the native store directly: every submitted read comes back as exactly one event. */
async function nativeRun(engine: "io_uring" | "pread", readers: number, cap: number, submit: (s: ReturnType<typeof open>) => number) {
  const events: NativeReadDone[] = [];
  let want = Infinity;
  let wake: () => void = () => undefined;
  const s = open();
  function open() {
    return new native.NativeExpertStore(files(), slotBytes(), 16, readers, true, cap, false, (d) => {
      events.push(d);
      if (events.length >= want) wake();
    }, engine, false);
  }
  s.ref();
  want = submit(s);
  if (events.length < want) await new Promise<void>((r) => (wake = r));
  s.close();
  return events;
}
const files = () => [...new Set(experts.map((e) => e.file))];
const slotBytes = () => native.supersetBytes(EXPERT, 4096);

describe.each(ENGINES)("native read pool on %s", (engine) => {
  it("done events carry timings, device bytes, the direct flag and an empty message", async () => {
    const l1 = experts.filter((e) => e.layer === 1);
    const fi = files().indexOf(l1[0].file);
    const events = await nativeRun(engine, 4, 1, (s) => {
      l1.slice(0, 12).forEach((e, i) => s.read(i + 1, fi, e.offset, e.byteLength, i, false));
      return 12;
    });
    expect(events.map((e) => e.id).sort((a, b) => a - b)).toEqual(Array.from({ length: 12 }, (_, i) => i + 1));
    for (const e of events) {
      expect(e.status).toBe(0);
      expect(e.cancelled).toBe(false);
      expect(e.direct).toBe(true);
      expect(e.message).toBe("");
      expect(e.endNs).toBeGreaterThan(e.startNs);
      expect(e.deviceBytes).toBeGreaterThanOrEqual(EXPERT);
      expect(e.dataOffset).toBe(l1[e.id - 1].offset % 4096);
    }
  });

  for (const cap of [1, 2])
    it(`never more prefetch reads in flight than the cap (${cap})`, async () => {
      const l1 = experts.filter((e) => e.layer === 1);
      const fi = files().indexOf(l1[0].file);
      const events = await nativeRun(engine, 4, cap, (s) => {
        for (let i = 0; i < 12; i++) s.read(i + 1, fi, l1[i].offset, l1[i].byteLength, i, true);
        return 12;
      });
      expect(events.every((e) => e.status === 0)).toBe(true);
      // [startNs, endNs] lies inside the time the read counts against the cap.
      let most = 0;
      for (const e of events) most = Math.max(most, events.filter((o) => o.startNs <= e.startNs && o.endNs > e.startNs).length);
      expect(most).toBeLessThanOrEqual(cap);
    });

  it("demand reads are served before queued prefetch reads", async () => {
    const l1 = experts.filter((e) => e.layer === 1);
    const fi = files().indexOf(l1[0].file);
    let queuedAll = 0;
    // One reader: jobs start in the order they are taken.
    const events = await nativeRun(engine, 1, 4, (s) => {
      for (let i = 0; i < 8; i++) s.read(100 + i, fi, l1[i].offset, l1[i].byteLength, i, true);
      for (let i = 8; i < 14; i++) s.read(i, fi, l1[i].offset, l1[i].byteLength, i, false);
      queuedAll = Number(process.hrtime.bigint()); // same CLOCK_MONOTONIC as the native startNs
      return 14;
    });
    expect(events.every((e) => e.status === 0)).toBe(true);
    const lastDemandStart = Math.max(...events.filter((e) => e.id < 100).map((e) => e.startNs));
    // Once every demand read is queued, no prefetch starts before the last of them (one may have
    // been taken just before, its timestamp written just after).
    const overtaking = events.filter((e) => e.id >= 100 && e.startNs > queuedAll && e.startNs < lastDemandStart);
    expect(overtaking.length).toBeLessThanOrEqual(1);
  });

  it("cancelPrefetch reports each queued prefetch once as cancelled; reads in flight finish", async () => {
    const l1 = experts.filter((e) => e.layer === 1);
    const fi = files().indexOf(l1[0].file);
    let cancelled = 0;
    const events = await nativeRun(engine, 1, 1, (s) => {
      for (let i = 0; i < 10; i++) s.read(i + 1, fi, l1[i].offset, l1[i].byteLength, i, true);
      cancelled = s.cancelPrefetch();
      return 10;
    });
    expect(cancelled).toBeGreaterThanOrEqual(8);
    expect(events.length).toBe(10);
    expect(events.filter((e) => e.cancelled).length).toBe(cancelled);
    for (const e of events) expect(e.cancelled ? e.status === ECANCELED : e.status === 0).toBe(true);
    expect(new Set(events.map((e) => e.id)).size).toBe(10);
  });

  it("close() waits for reads in flight and reports queued ones as cancelled", async () => {
    const l1 = experts.filter((e) => e.layer === 1);
    const fi = files().indexOf(l1[0].file);
    const events: NativeReadDone[] = [];
    const s = new native.NativeExpertStore(files(), slotBytes(), 16, 2, true, 1, false, (d) => events.push(d), engine, false);
    s.ref();
    for (let i = 0; i < 16; i++) s.read(i + 1, fi, l1[i].offset, l1[i].byteLength, i, i % 3 === 0);
    s.close(); // returns once nothing is in flight
    await new Promise((r) => setTimeout(r, 50));
    expect(events.length).toBe(16);
    expect(new Set(events.map((e) => e.id)).size).toBe(16);
    for (const e of events) expect(e.cancelled ? e.status === ECANCELED : e.status === 0 && e.endNs >= e.startNs).toBe(true);
    expect(s.stats().inflight).toBe(0);
  });
});

// ---------------------------------------------------------------- selection

describe("engine selection", () => {
  const withEnv = (vars: Record<string, string | undefined>, fn: () => void) => {
    const old = Object.fromEntries(Object.keys(vars).map((k) => [k, process.env[k]]));
    Object.assign(process.env, vars);
    for (const [k, v] of Object.entries(vars)) if (v === undefined) delete process.env[k];
    try {
      fn();
    } finally {
      for (const [k, v] of Object.entries(old)) if (v === undefined) delete process.env[k]; else process.env[k] = v;
    }
  };

  it("auto is io_uring here (the kernel allows it)", () => {
    withEnv({ K3_NOURING: undefined, K3_SQPOLL: undefined }, () => {
      const store = ExpertStore.open({ experts, ioSlots: 1 });
      expect(store.stats().engine).toBe("io_uring");
      store.close();
    });
  });

  it("K3_NOURING=1 forces the pread threads for auto; an explicit io_uring is kept", () => {
    withEnv({ K3_NOURING: "1", K3_SQPOLL: undefined }, () => {
      const a = ExpertStore.open({ experts, ioSlots: 1 });
      expect(a.stats().engine).toBe("pread");
      expect(a.stats().engineNote).toBe("");
      a.close();
      const b = ExpertStore.open({ experts, ioSlots: 1, ioEngine: "io_uring" });
      expect(b.stats().engine).toBe("io_uring");
      b.close();
    });
    expect(resolveIoEngine(undefined, { K3_NOURING: "0" }).engine).toBe("auto");
    expect(resolveIoEngine("auto", { K3_NOURING: "1" }).engine).toBe("pread");
  });

  it("K3_SQPOLL=1 asks for SQPOLL: granted, or plain io_uring with the reason; same bytes", async () => {
    let store!: ExpertStore;
    withEnv({ K3_NOURING: undefined, K3_SQPOLL: "1" }, () => {
      store = ExpertStore.open({ experts, ioSlots: 4, readers: 4 });
    });
    try {
      const s = store.stats();
      if (s.engine === "io_uring+sqpoll") expect(s.engineNote).toBe("");
      else expect(s.engineNote).toMatch(/^SQPOLL refused \(.+\): plain io_uring$/);
      expect(s.engine).not.toBe("pread");
      expect((await readAll(store, 2, all)).length).toBe(24);
    } finally {
      store.close();
    }
    expect(resolveIoEngine("pread", { K3_SQPOLL: "1" }).sqpoll).toBe(false);
  });

  it("io_uring blocked (as by seccomp): auto falls back to pread visibly; explicit io_uring fails clearly", async () => {
    native.simulateUringUnavailable(EPERM);
    try {
      const store = ExpertStore.open({ experts, ioSlots: 2 });
      try {
        expect(store.stats().engine).toBe("pread");
        expect(store.stats().engineNote).toBe("io_uring unavailable (io_uring_setup: Operation not permitted (simulated)): pread threads");
        expect((await readAll(store, 1, [1, 2])).length).toBe(2);
      } finally {
        store.close();
      }
      expect(() => ExpertStore.open({ experts, ioSlots: 2, ioEngine: "io_uring" })).toThrow(MoeStreamError);
      expect(() => ExpertStore.open({ experts, ioSlots: 2, ioEngine: "io_uring" })).toThrow(
        /ExpertStore: io_uring was requested but is unavailable \(io_uring_setup: Operation not permitted \(simulated\); seccomp or the kernel.io_uring_disabled sysctl can block it\)/,
      );
    } finally {
      native.simulateUringUnavailable(0);
    }
  });

  it("refuses an unknown engine name", () => {
    expect(() => ExpertStore.open({ experts, ioSlots: 1, ioEngine: "aio" as IoEngine })).toThrow(/ioEngine must be "auto", "io_uring" or "pread", got "aio"/);
  });
});

describe.each(ENGINES)("measureReadEngine on %s (the pool from C, for the bench)", (engine) => {
  it("reads every range once and reports wall and CPU time", () => {
    const reads = experts.map((e) => ({ file: e.file, offset: e.offset, length: e.byteLength }));
    const r = measureReadEngine(reads, { engine, queueDepth: 4 });
    expect(r.engine).toBe(engine);
    expect(r.bytes).toBeGreaterThanOrEqual(reads.length * EXPERT);
    expect(r.bytes).toBeLessThanOrEqual(reads.length * (EXPERT + 8192));
    expect(r.seconds).toBeGreaterThan(0);
    expect(r.cpuSeconds).toBeGreaterThanOrEqual(0);
  });

  it("names a read that fails", () => {
    const e = experts[0];
    const size = statSync(e.file).size;
    expect(() => measureReadEngine([{ file: e.file, offset: size - 10, length: 100 }], { engine })).toThrow(/poolBench: read 0 lies outside its file/);
  });
});

describe.each(ENGINES)("TrunkStreamer on %s", (ioEngine) => {
  it("streams every layer of tiny-k3 in chunks, crc32-verified, and reports the engine", async () => {
    const out = diskDir("k3-engine-trunk-");
    try {
      await packTrunk(tinyK3Dir, out);
      const t = await TrunkStreamer.open({ dir: out, ringSlots: 2, chunkBytes: 16384, readers: 4, verify: "all", ioEngine });
      try {
        expect(t.stats().engine).toBe(ioEngine);
        for (let l = 0; l < 13; l++) (await t.acquire(l)).release();
        expect(t.stats().layerLoads).toBeGreaterThanOrEqual(13);
      } finally {
        t.close();
      }
    } finally {
      rmSync(out, { recursive: true, force: true });
    }
  });
});
