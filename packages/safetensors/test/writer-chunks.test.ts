import { closeSync, existsSync, openSync, readdirSync, readFileSync, rmSync, statSync } from "node:fs";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { SafetensorsWriter, ShardedCheckpointWriter, WriteQueue, openCheckpointSync, openSafetensorsSync, type TensorSpec } from "../src/index.js";
import { tempDir as makeTemp } from "./helpers.js";

const dirs: string[] = [];
function tempDir(): string {
  const d = makeTemp("chunks");
  dirs.push(d);
  return d;
}
afterAll(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));

/** `n` bytes of a pattern that differs per position (so a misplaced piece shows). */
function pattern(n: number, salt: number): Uint8Array {
  return Uint8Array.from({ length: n }, (_, i) => (i * 31 + salt * 7 + (i >> 8)) & 255);
}

/** `bytes` split into pieces of the given sizes (cycled). */
function* pieces(bytes: Uint8Array, sizes: number[]): Generator<Uint8Array> {
  let at = 0;
  for (let k = 0; at < bytes.length; k++) {
    const n = Math.min(sizes[k % sizes.length], bytes.length - at);
    yield bytes.subarray(at, at + n);
    at += n;
  }
}

describe("addChunks: a tensor written in pieces", () => {
  it("gives the same file as add() with the whole tensor, with and without a plan", () => {
    const dir = tempDir();
    const a = pattern(6000, 1);
    const b = pattern(4096 * 2, 2);
    const whole = new SafetensorsWriter(join(dir, "whole.safetensors"), { metadata: { format: "pt" } });
    whole.add("a", "U8", [6000], a);
    whole.add("b", "BF16", [64, 64], b);
    whole.finish();
    const chunked = new SafetensorsWriter(join(dir, "chunked.safetensors"), { metadata: { format: "pt" } });
    chunked.addChunks("a", "U8", [6000], pieces(a, [1, 999, 4000]));
    chunked.addChunks("b", "BF16", [64, 64], pieces(b, [3, 5000]));
    chunked.finish();
    const plan: TensorSpec[] = [
      { name: "a", dtype: "U8", shape: [6000] },
      { name: "b", dtype: "BF16", shape: [64, 64] },
    ];
    const planned = new SafetensorsWriter(join(dir, "planned.safetensors"), { metadata: { format: "pt" }, plan });
    planned.addChunks("a", "U8", [6000], [a.subarray(0, 10), new Uint8Array(0), a.subarray(10)]);
    planned.addChunks("b", "BF16", [64, 64], pieces(b, [8191, 1]));
    planned.finish();
    const ref = readFileSync(join(dir, "whole.safetensors"));
    expect(readFileSync(join(dir, "chunked.safetensors")).equals(ref)).toBe(true);
    expect(readFileSync(join(dir, "planned.safetensors")).equals(ref)).toBe(true);
    const f = openSafetensorsSync(join(dir, "planned.safetensors"));
    expect(Buffer.from(f.readSync("b")).equals(Buffer.from(b))).toBe(true);
    f.closeSync();
  });

  it("refuses pieces that are too long or too short, naming the tensor, and leaves no temp file", () => {
    const dir = tempDir();
    const w1 = new SafetensorsWriter(join(dir, "x.safetensors"));
    expect(() => w1.addChunks("t", "BF16", [4, 4], [new Uint8Array(20), new Uint8Array(20)])).toThrow(/"?t"?.*needs 32 bytes but the pieces hold more \(40 so far\)|needs 32 bytes but the pieces hold more/);
    expect(() => w1.add("u", "U8", [1], new Uint8Array(1))).toThrow(/aborted/);
    const w2 = new SafetensorsWriter(join(dir, "y.safetensors"));
    let err: Error | null = null;
    try {
      w2.addChunks("short", "F32", [4], [new Uint8Array(8)]);
    } catch (e) {
      err = e as Error;
    }
    expect(err?.message).toMatch(/needs 16 bytes but the pieces hold 8/);
    expect(err?.message).toMatch(/short/);
    expect(readdirSync(dir)).toEqual([]);
  });

  it("a sharded checkpoint with planned shards: headers first, no copy, index and reads agree", () => {
    const dir = tempDir();
    const w = new ShardedCheckpointWriter(dir, { shardMetadata: { format: "pt" }, maxShardBytes: 100 });
    const t1 = pattern(3000, 3);
    const t2 = pattern(512, 4);
    const t3 = pattern(2048, 5);
    w.startShard([
      { name: "m.a", dtype: "U8", shape: [3000] },
      { name: "m.b", dtype: "BF16", shape: [256] },
    ]);
    w.addChunks("m.a", "U8", [3000], pieces(t1, [7, 1000]));
    w.add("m.b", "BF16", [256], t2); // maxShardBytes does not split a planned shard
    w.startShard([{ name: "m.c", dtype: "F32", shape: [16, 32] }]);
    expect(() => w.add("m.x", "F32", [16, 32], t3)).toThrow(/the plan expects "m.c" F32 \[16, 32\] next/);
    w.addChunks("m.c", "F32", [16, 32], pieces(t3, [100]));
    const paths = w.finish();
    expect(paths.map((p) => p.split("/").pop())).toEqual(["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]);
    const index = JSON.parse(readFileSync(join(dir, "model.safetensors.index.json"), "utf8"));
    expect(index.metadata.total_size).toBe(3000 + 512 + 2048);
    expect(index.weight_map).toEqual({ "m.a": "model-00001-of-00002.safetensors", "m.b": "model-00001-of-00002.safetensors", "m.c": "model-00002-of-00002.safetensors" });
    const c = openCheckpointSync(dir);
    expect(Buffer.from(c.readSync("m.a")).equals(Buffer.from(t1))).toBe(true);
    expect(Buffer.from(c.readSync("m.c")).equals(Buffer.from(t3))).toBe(true);
    c.closeSync();
    // Header exactly sized (8-aligned), data right behind it.
    const first = readFileSync(paths[0]);
    const n = Number(first.readBigUInt64LE(0));
    expect(n % 8).toBe(0);
    expect(statSync(paths[0]).size).toBe(8 + n + 3000 + 512);
    expect(readdirSync(dir).filter((f) => f.startsWith("."))).toEqual([]);
  });

  it("a failed addChunks aborts the sharded checkpoint: no shard, no index left", () => {
    const dir = tempDir();
    const w = new ShardedCheckpointWriter(dir);
    w.add("a", "U8", [4], new Uint8Array(4));
    w.nextShard();
    expect(() => w.addChunks("b", "U8", [8], [new Uint8Array(4)])).toThrow(/"?b"?|needs 8 bytes but the pieces hold 4/);
    expect(() => w.finish()).toThrow(/aborted/);
    expect(existsSync(join(dir, "model.safetensors.index.json"))).toBe(false);
    expect(readdirSync(dir)).toEqual([]);
  });

  it("addChunksAsync (writes in flight) gives the same bytes as addChunks; refuses a second add while writing", async () => {
    const dir = tempDir();
    const a = pattern(3 << 20, 6);
    const b = pattern(1000, 7);
    const sync = new ShardedCheckpointWriter(join(dir, "sync"), { fsync: false });
    sync.addChunks("a", "U8", [a.length], pieces(a, [65536, 7, 300000]));
    sync.addChunks("b", "BF16", [500], [b]);
    sync.finish();
    const asyncW = new ShardedCheckpointWriter(join(dir, "async"), { fsync: false });
    asyncW.startShard([
      { name: "a", dtype: "U8", shape: [a.length] },
      { name: "b", dtype: "BF16", shape: [500] },
    ]);
    const writing = asyncW.addChunksAsync("a", "U8", [a.length], pieces(a, [65536, 7, 300000]), { inFlight: 3 });
    expect(() => asyncW.add("b", "BF16", [500], b)).toThrow(/still writing/);
    await writing;
    async function* slow(): AsyncGenerator<Uint8Array> {
      yield b.subarray(0, 10);
      await new Promise((r) => setTimeout(r, 5));
      yield b.subarray(10);
    }
    await asyncW.addChunksAsync("b", "BF16", [500], slow());
    asyncW.finish();
    const f = "model-00001-of-00001.safetensors";
    expect(readFileSync(join(dir, "async", f)).equals(readFileSync(join(dir, "sync", f)))).toBe(true);
  });

  it("queued addChunksAsync (one write queue across tensors, batches cut at file offsets) gives the same bytes as addChunks", async () => {
    const dir = tempDir();
    const tensors = [
      { name: "a", dtype: "U8" as const, data: pattern(70000, 1), cuts: [5000, 4096, 1, 30000] },
      { name: "b", dtype: "BF16" as const, data: pattern(2000, 2), cuts: [3] },
      { name: "c", dtype: "U8" as const, data: pattern(9000, 3), cuts: [8192] },
      { name: "d", dtype: "U8" as const, data: pattern(1, 4), cuts: [1] },
    ];
    const shape = (t: (typeof tensors)[number]) => [t.dtype === "BF16" ? t.data.length / 2 : t.data.length];
    const sync = new ShardedCheckpointWriter(join(dir, "sync"), { fsync: false });
    for (const [i, t] of tensors.entries()) {
      if (i === 2) sync.nextShard();
      sync.addChunks(t.name, t.dtype, shape(t), [t.data]);
    }
    sync.finish();
    const q = new ShardedCheckpointWriter(join(dir, "queued"), { fsync: "finish" });
    for (const [i, t] of tensors.entries()) {
      if (i === 0 || i === 2) await q.startShardAsync(tensors.slice(i, i + 2).map((u) => ({ name: u.name, dtype: u.dtype, shape: shape(u) })));
      await q.addChunksAsync(t.name, t.dtype, shape(t), pieces(t.data, t.cuts), { queued: true, inFlight: 2, batchBytes: 4096 });
    }
    expect((await q.finishAsync()).length).toBe(2);
    for (const f of ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", "model.safetensors.index.json"]) {
      expect(readFileSync(join(dir, "queued", f)).equals(readFileSync(join(dir, "sync", f))), f).toBe(true);
    }
    expect(readdirSync(join(dir, "queued")).filter((f) => f.startsWith("."))).toEqual([]);
  });

  it("WriteQueue: batches of at most batchBytes at aligned offsets, inFlight bounded, a failed write names the file", async () => {
    const dir = tempDir();
    const file = join(dir, "q.bin");
    const fd = openSync(file, "w");
    const q = new WriteQueue(fd, file, { inFlight: 2, batchBytes: 4096 });
    const data = pattern(20000, 5);
    for (let at = 0; at < data.length; at += 3000) await q.push(data.subarray(at, Math.min(data.length, at + 3000)), 100 + at);
    await q.drain();
    closeSync(fd);
    expect(q.written).toBe(data.length);
    expect(readFileSync(file).subarray(100).equals(Buffer.from(data))).toBe(true);
    const ro = openSync(file, "r");
    const bad = new WriteQueue(ro, file, { inFlight: 1 });
    await bad.push(data.subarray(0, 10), 0);
    await expect(bad.drain()).rejects.toThrow(/q\.bin/);
    closeSync(ro);
  });

  it("addChunksAsync with too few bytes aborts, naming the tensor", async () => {
    const dir = tempDir();
    const w = new SafetensorsWriter(join(dir, "z.safetensors"));
    await expect(w.addChunksAsync("late", "U8", [100], [new Uint8Array(60)])).rejects.toThrow(/late.*needs 100 bytes but the pieces hold 60|needs 100 bytes but the pieces hold 60/);
    expect(() => w.finish()).toThrow(/aborted/);
    expect(readdirSync(dir)).toEqual([]);
  });

  it('fsync: "finish" writes the same checkpoint (shards synced at finish, before the index)', () => {
    const dir = tempDir();
    const t = pattern(5000, 9);
    for (const [sub, fsync] of [["a", true], ["b", "finish"]] as const) {
      const w = new ShardedCheckpointWriter(join(dir, sub), { fsync });
      w.add("x", "U8", [5000], t);
      w.nextShard();
      w.add("y", "U8", [100], t.subarray(0, 100));
      w.finish();
    }
    for (const f of ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", "model.safetensors.index.json"]) {
      expect(readFileSync(join(dir, "b", f)).equals(readFileSync(join(dir, "a", f))), f).toBe(true);
    }
    expect(readdirSync(join(dir, "b")).filter((f) => f.startsWith("."))).toEqual([]);
  });
});
