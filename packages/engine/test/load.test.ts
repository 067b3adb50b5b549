/**
 * The resident load (one pass through the read pool into pre-faulted huge-page blocks) gives the
 * very weights of the per-tensor path: byte-identical tensors, identical logits and greedy tokens,
 * also when every tensor sits at an odd file offset, on tmpfs and with O_DIRECT off; a truncated
 * shard is named; the run report carries report.load.
 */
import { closeSync, cpSync, existsSync, mkdtempSync, openSync, readdirSync, readFileSync, rmSync, statfsSync, truncateSync, writeSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { readConfig } from "../src/config.js";
import { Model, residentNames } from "../src/model.js";
import { openWeights, preloadWeights, residentCeiling, WeightError } from "../src/weights.js";
import { captureCli, TINY_48B, TINY_K3 } from "./helpers.js";

const TMPFS_MAGIC = 0x01021994;
const dir = mkdtempSync(join(tmpdir(), "k3-load-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const PROMPT = [1, 17, 300, 42, 9, 511, 7, 88];

async function logitsOf(model: Model): Promise<Float32Array> {
  const state = model.newState();
  const out = new Float32Array(await model.forward(PROMPT, state));
  const next = await model.forward([3], state);
  const all = new Float32Array(out.length + next.length);
  all.set(out);
  all.set(next, out.length);
  return all;
}

/** A copy of a checkpoint whose every shard has its header padded by `shift` spaces: all tensor offsets move by it. */
function shiftedCopy(src: string, to: string, shift: number): string {
  cpSync(src, to, { recursive: true });
  for (const f of readdirSync(to).filter((n) => n.endsWith(".safetensors") && n.startsWith("model"))) {
    const bytes = readFileSync(join(src, f));
    const n = Number(bytes.readBigUInt64LE(0));
    const header = Buffer.concat([bytes.subarray(8, 8 + n), Buffer.alloc(shift, 0x20)]);
    const len = Buffer.alloc(8);
    len.writeBigUInt64LE(BigInt(header.length));
    const fd = openSync(join(to, f), "w");
    writeSync(fd, len);
    writeSync(fd, header);
    writeSync(fd, bytes.subarray(8 + n));
    closeSync(fd);
  }
  return to;
}

describe("resident load", () => {
  for (const [label, model] of [
    ["tiny K3", TINY_K3],
    ["tiny Kimi-Linear", TINY_48B],
  ] as const) {
    it(`${label}: every preloaded tensor equals its positioned read; logits identical to the per-tensor path`, async () => {
      const src = openWeights(model);
      const names = residentNames(src, readConfig(model), () => true, true);
      expect(names.length).toBeGreaterThan(10);
      expect(names.some((n) => /experts\.\d+\./.test(n))).toBe(false); // routed experts stay on disk
      const pre = preloadWeights(src, names);
      for (const n of names) expect(Buffer.compare(Buffer.from(pre.source.read(n)), Buffer.from(src.read(n))), n).toBe(0);
      expect(pre.stats.bytes).toBe(names.reduce((a, n) => a + src.info(n).nbytes, 0));
      pre.source.close();

      const a = Model.load(model, { preload: false });
      const b = Model.load(model);
      try {
        expect(b.loadStats!.method).toMatch(/^read pool (io_uring|pread) x8, 8 MiB pieces/);
        expect(a.loadStats!.method).toMatch(/per-tensor/);
        expect(b.loadStats!.tensorBytes).toBe(a.loadStats!.tensorBytes);
        const [la, lb] = [await logitsOf(a), await logitsOf(b)];
        expect(Buffer.compare(Buffer.from(la.buffer), Buffer.from(lb.buffer))).toBe(0);
      } finally {
        a.close();
        b.close();
      }
    });
  }

  it("tensors at odd file offsets (headers padded by 3 and 5 bytes): identical logits", async () => {
    const ref = Model.load(TINY_K3, { preload: false });
    const want = await logitsOf(ref);
    ref.close();
    for (const shift of [3, 5]) {
      const odd = shiftedCopy(TINY_K3, join(dir, `odd${shift}`), shift);
      const src = openWeights(odd);
      const first = src.info(src.names()[0]);
      expect(first.offset % 2).toBe(1); // really unaligned
      src.close();
      const m = Model.load(odd);
      try {
        expect(Buffer.compare(Buffer.from((await logitsOf(m)).buffer), Buffer.from(want.buffer)), `shift ${shift}`).toBe(0);
      } finally {
        m.close();
      }
    }
  });

  it("tmpfs copy and O_DIRECT off: identical logits; the buffered path is the one used with direct off", async () => {
    const ref = Model.load(TINY_K3, { preload: false });
    const want = await logitsOf(ref);
    ref.close();
    const where: string[] = [];
    if (existsSync("/dev/shm") && statfsSync("/dev/shm").type === TMPFS_MAGIC) {
      const shm = mkdtempSync("/dev/shm/k3-load-");
      cpSync(TINY_K3, join(shm, "m"), { recursive: true });
      where.push(join(shm, "m"));
    } else console.log("no tmpfs at /dev/shm: only the direct-off case runs");
    try {
      for (const [d, preload] of [...where.map((w) => [w, {}] as const), [TINY_K3, { direct: false }] as const]) {
        const m = Model.load(d, { preload });
        try {
          expect(Buffer.compare(Buffer.from((await logitsOf(m)).buffer), Buffer.from(want.buffer)), d).toBe(0);
          if ("direct" in preload) expect(m.loadStats!.method).toMatch(/, buffered, /);
        } finally {
          m.close();
        }
      }
    } finally {
      for (const w of where) rmSync(join(w, ".."), { recursive: true, force: true });
    }
  });

  it("--trunk: the pinned layers load through the same path (only they and the globals), identical logits", async () => {
    const { packTrunk } = await import("@k3/moe-stream");
    const trunk = join(dir, "trunk");
    await packTrunk(TINY_K3, trunk);
    const pinned = [0, 3, 7];
    const opts = { trunk: { dir: trunk, pinnedLayers: pinned, ringSlots: 1 } };
    const a = await Model.open(TINY_K3, { ...opts, preload: false });
    const b = await Model.open(TINY_K3, opts);
    try {
      const src = openWeights(TINY_K3);
      const names = residentNames(src, readConfig(TINY_K3), (l) => pinned.includes(l), true);
      expect(b.loadStats!.tensorBytes).toBe(names.reduce((x, n) => x + src.info(n).nbytes, 0));
      expect(names.some((n) => n.includes("layers.1."))).toBe(false);
      src.close();
      expect(b.loadStats!.method).toMatch(/read pool/);
      expect(Buffer.compare(Buffer.from((await logitsOf(a)).buffer), Buffer.from((await logitsOf(b)).buffer))).toBe(0);
    } finally {
      a.close();
      b.close();
    }
  });

  it("a truncated shard is named", () => {
    const t = join(dir, "trunc");
    cpSync(TINY_K3, t, { recursive: true });
    const shard = join(t, "model-00002-of-00003.safetensors");
    const src = openWeights(t);
    const names = residentNames(src, readConfig(t), () => true, true);
    // cut after the header was read: the load itself finds the shard short
    truncateSync(shard, 400_000);
    expect(() => preloadWeights(src, names)).toThrowError(WeightError);
    expect(() => preloadWeights(src, names)).toThrowError(/model-00002-of-00003\.safetensors: truncated shard: it has 400000 bytes but the tensors need bytes up to \d+/);
    src.close();
    // opened after the cut: refused at open, naming the shard
    expect(() => Model.load(t)).toThrowError(/model-00002-of-00003\.safetensors/);
  });

  it("residentCeiling: each of the load's ceilings over its blocks, without loading; a bad file named", () => {
    const src = openWeights(TINY_K3);
    const names = residentNames(src, readConfig(TINY_K3), () => true, true);
    const pre = preloadWeights(src, names, { ceiling: true });
    const blockBytes = pre.stats.blockBytes;
    expect(pre.fresh!.boundGbps).toBe(Math.min(pre.ceilingGbps!, pre.fresh!.backingGbps));
    pre.source.close();
    for (const kind of ["disk", "fresh-direct", "fresh-buffered", "backing"] as const) {
      const c = residentCeiling(src, names, kind);
      expect(c.bytes, kind).toBe(blockBytes);
      expect(c.gbps, kind).toBeGreaterThan(0);
    }
    src.close();
  });

  it("k3 run --json: report.load with the ceiling of the same reads; --load-method per-tensor; bad values refused", async () => {
    const j = join(dir, "r.json");
    const RUN = ["run", "--model", TINY_K3, "--prompt", "hello", "--max-tokens", "3", "--threads", "1", "--quiet"];
    expect((await captureCli([...RUN, "--json", j, "--load-ceiling"])).code).toBe(0);
    const pool = JSON.parse(readFileSync(j, "utf8"));
    expect(pool.load.bytes).toBeGreaterThan(1e6);
    expect(pool.load.seconds).toBeGreaterThan(0);
    expect(pool.load.gbps).toBeCloseTo(pool.load.bytes / pool.load.seconds / 1e9, 6);
    expect(pool.load.ceiling_gbps).toBeGreaterThan(0);
    expect(pool.load.ratio).toBeCloseTo(pool.load.gbps / pool.load.ceiling_gbps, 6);
    // The ceilings of a load into fresh memory, measured in the same run, and the load against each.
    const f = pool.load.fresh;
    for (const k of ["read_direct_gbps", "read_buffered_gbps", "fresh_read_gbps", "backing_gbps", "bound_gbps"]) expect(f[k], k).toBeGreaterThan(0);
    expect(f.fresh_read_gbps).toBe(Math.max(f.read_direct_gbps, f.read_buffered_gbps));
    expect(f.bound_gbps).toBe(Math.min(pool.load.ceiling_gbps, f.backing_gbps));
    expect(f.vs.disk).toBeCloseTo(pool.load.ratio, 9);
    expect(f.vs.fresh_read).toBeCloseTo(pool.load.gbps / f.fresh_read_gbps, 9);
    expect(f.vs.backing).toBeCloseTo(pool.load.gbps / f.backing_gbps, 9);
    expect(f.vs.bound).toBeCloseTo(pool.load.gbps / f.bound_gbps, 9);
    expect(pool.load.page_faults_minor).toBeGreaterThanOrEqual(0);
    expect(pool.load.method).toMatch(/read pool/);
    expect((await captureCli([...RUN, "--json", j, "--load-method", "per-tensor"])).code).toBe(0);
    const per = JSON.parse(readFileSync(j, "utf8"));
    expect(per.load.method).toMatch(/per-tensor/);
    expect(per.load.ceiling_gbps).toBeNull();
    expect(per.load.fresh).toBeNull();
    expect(per.generated_ids).toEqual(pool.generated_ids);
    const bad = await captureCli([...RUN, "--load-method", "mmap"]);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/--load-method mmap: expected pool or per-tensor/);
  });
});
