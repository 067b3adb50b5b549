// Native vs TS: the same tables and the same errors, on the reference fixtures, on hostile
// index.json files and on mmap/async paths.
import { existsSync, readFileSync, readdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { SafetensorsError, ShardedCheckpointWriter, openCheckpointSync, openSafetensors, openSafetensorsSync, parseSafetensors, typedView } from "../src/index.js";
import { BACKENDS, tempDir } from "./helpers.js";
import { mutate, rng } from "./fuzz.js";

const both = BACKENDS.length === 2;
const root = join(import.meta.dirname, "..", "..", "..");

function outcome(f: () => unknown): string {
  try {
    const v = f() as { headerTables?: unknown; size?: number };
    return `ok ${v.size}`;
  } catch (e) {
    if (!(e instanceof SafetensorsError)) throw e;
    return `${e.code}|${e.detail}|${e.position}|${e.tensor}|${e.file}`;
  }
}

describe.skipIf(!both)("native and TS agree", () => {
  it("on every reference fixture file (tables identical)", (ctx) => {
    const dirs = [join(root, "fixtures", "components"), join(root, "fixtures", "models", "tiny-k3"), join(root, "fixtures", "models", "tiny-kimi-linear")];
    const files = dirs.filter(existsSync).flatMap((d) => readdirSync(d).filter((f) => f.endsWith(".safetensors")).map((f) => join(d, f)));
    if (files.length === 0) {
      console.warn("[safetensors tests] no fixtures yet: skipped");
      ctx.skip();
    }
    for (const file of files) {
      const a = openSafetensorsSync(file, { backend: "ts" });
      const b = openSafetensorsSync(file, { backend: "native" });
      const [x, y] = [a.headerTables[0], b.headerTables[0]];
      for (const k of ["dtype", "begin", "end", "shapeStart", "dims", "nameStart", "nameBytes", "layer", "expert", "kind"] as const) {
        expect(Array.from(y[k] as ArrayLike<number>), `${file} ${k}`).toEqual(Array.from(x[k] as ArrayLike<number>));
      }
      expect(y.metadata).toEqual(x.metadata);
      for (const t of a.tensors) expect(b.get(t.name)).toEqual(t);
    }
  });

  it("on 400 mutated index.json files (same error code, message, position and tensor)", () => {
    const dir = tempDir("ixfuzz");
    const w = new ShardedCheckpointWriter(dir);
    for (let s = 0; s < 3; s++) {
      for (let i = 0; i < 4; i++) w.add(`model.layers.${s}.mlp.experts.${i}.w1.weight`, "U8", [2], new Uint8Array(2));
      w.nextShard();
    }
    w.finish();
    const indexPath = join(dir, "model.safetensors.index.json");
    const text = readFileSync(indexPath);
    // Reuse the header mutator on "8-byte length + index" so the same edits apply to the JSON.
    const framed = new Uint8Array(8 + text.length);
    new DataView(framed.buffer).setBigUint64(0, BigInt(text.length), true);
    framed.set(text, 8);
    const r = rng(99);
    let differing = 0;
    const codes = new Set<string>();
    for (let c = 0; c < 400; c++) {
      const m = mutate(framed, r).bytes;
      writeFileSync(indexPath, m.subarray(Math.min(8, m.length)));
      const a = outcome(() => openCheckpointSync(dir, { backend: "ts" }));
      const b = outcome(() => openCheckpointSync(dir, { backend: "native" }));
      codes.add(a.split("|")[0]);
      if (a !== b) {
        differing++;
        expect(b, `case ${c}`).toBe(a);
      }
    }
    expect(differing).toBe(0);
    expect(codes.size).toBeGreaterThan(3);
  });
});

describe.each(BACKENDS)("reads (%s)", (backend) => {
  it("maps tensors zero-copy, opens files asynchronously, gives typed views", async () => {
    const dir = tempDir("map");
    const w = new ShardedCheckpointWriter(dir);
    w.add("a", "F32", [3], new Float32Array([1.5, 2.5, 3.5]));
    w.add("b", "U8", [5], new Uint8Array([1, 2, 3, 4, 5]));
    w.add("c", "F32", [2], new Float32Array([7, 8]));
    w.finish();
    const file = join(dir, "model-00001-of-00001.safetensors");
    const ck = await openSafetensors(file, { backend });
    expect(ck.backend).toBe(backend);
    if (both) {
      const mapped = ck.map("a");
      expect(Array.from(typedView(mapped, "F32"))).toEqual([1.5, 2.5, 3.5]);
      // "c" sits at an odd file offset, but a mapping is its own ArrayBuffer (byteOffset 0)
      const c = ck.map("c");
      expect(c.byteOffset).toBe(0);
      expect(Array.from(typedView(c, "F32"))).toEqual([7, 8]);
    }
    expect(Array.from(await ck.read("b"))).toEqual([1, 2, 3, 4, 5]);
    await ck.close();
    const mem = parseSafetensors(readFileSync(file), { backend });
    expect(Array.from(mem.view("b"))).toEqual([1, 2, 3, 4, 5]);
    // in memory, "c" is at an odd byteOffset: a typed view refuses, or copies on request
    expect(() => typedView(mem.view("c"), "F32", { tensor: "c" })).toThrow(/MisalignedView.*"c"/);
    expect(Array.from(typedView(mem.view("c"), "F32", { copy: true }))).toEqual([7, 8]);
  });
});

describe.skipIf(!both)("scratch columns and the checkpoint arena", () => {
  it("give the TS tables for shards of mixed sizes (one header above the 4 MB scratch limit) on 1, 2 and 3 pool threads", async () => {
    const { setThreadCount, threadCount } = await import("@k3/dense");
    const { nativePoolReady } = await import("../src/native.js");
    expect(await nativePoolReady).toBe(true);
    const dir = tempDir("arena");
    const w = new ShardedCheckpointWriter(dir);
    const sizes = [3, 36_000, 1, 2_000, 0, 500]; // 36k entries with long names: a ~4.8 MB header
    const name = (s: number, i: number) => `model.layers.${s}.mlp.experts.${i}.w${(i % 3) + 1}.weight_${"x".repeat(40 + (i % 17))}`;
    sizes.forEach((count, s) => {
      for (let i = 0; i < count; i++) w.add(name(s, i), i % 2 ? "BF16" : "U8", [i % 5, 2], new Uint8Array((i % 5) * 2 * (i % 2 ? 2 : 1)));
      w.nextShard();
    });
    w.finish();
    const expected = openCheckpointSync(dir, { backend: "ts" });
    const threads0 = threadCount();
    try {
      expect(expected.headerTables[1].headerLength).toBeGreaterThan(4 << 20);
      for (const threads of [1, 2, 3, 2]) {
        setThreadCount(threads);
        {
          const got = openCheckpointSync(dir, { backend: "native" });
          expect(got.size).toBe(expected.size);
          got.headerTables.forEach((y, s) => {
            const x = expected.headerTables[s];
            for (const k of ["dtype", "begin", "end", "shapeStart", "dims", "nameStart", "nameBytes", "layer", "expert", "kind"] as const) {
              const [a, b] = [x[k], y[k]].map((v) => Buffer.from(v.buffer, v.byteOffset, v.byteLength));
              expect(b.equals(a), `threads ${threads} shard ${s} ${k}`).toBe(true);
            }
          });
          for (const [s, i] of [[1, 35_999], [1, 17], [3, 1_999], [0, 2], [5, 499]]) expect(got.get(name(s, i))).toEqual(expected.get(name(s, i)));
        }
      }
    } finally {
      setThreadCount(threads0);
    }
  });
});
