/**
 * Generation API on the tiny models: the greedy continuation of the reference through the public
 * API, chat encoding = the reference prompt, stop ids, stop strings, abort, seeded sampling, and
 * byte-identical output across memory presets, prefill chunk sizes, thread counts and SIMD levels.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { bestSimdLevel, setSimdLevel, setThreadCount, type SimdLevel } from "@k3/dense";
import { afterAll, describe, expect, it } from "vitest";
import { Engine } from "../src/engine.js";
import { GB, headChunkRowsFor, PRESET_NAMES, ringSlotBytesFor } from "../src/presets.js";
import { TINY_48B, TINY_K3 } from "./helpers.js";

const bigBox = { totalBytes: 256 * GB, availableBytes: 250 * GB };
const meta = JSON.parse(readFileSync(join(TINY_K3, "expected.json"), "utf8"));
const meta48 = JSON.parse(readFileSync(join(TINY_48B, "expected.json"), "utf8"));

afterAll(() => {
  setSimdLevel(bestSimdLevel());
  setThreadCount(1);
});

describe("engine on tiny-k3", async () => {
  setThreadCount(1);
  const engine = await Engine.load(TINY_K3, { mem: bigBox, preset: "laptop" });

  it("knows both K3 end ids", () => {
    expect(engine.stopIds).toEqual([769, 770]);
    expect(engine.chatFormat).toBe("k3");
  });

  it("renders the reference chat prompt", () => {
    const ids = engine.encodeChat([{ role: "user", content: "Write a function that adds two numbers." }], { thinking: true, effort: null });
    expect(ids).toEqual(meta.prompt_ids);
  });

  it("generates the reference greedy continuation through the public API", async () => {
    const events: { token: number; text: string }[] = [];
    const it = engine.generate(meta.prompt_ids, { maxTokens: 20, temperature: 0, stopIds: [] });
    let r = await it.next();
    while (!r.done) {
      events.push(r.value);
      r = await it.next();
    }
    const result = r.value;
    // The tiny model may emit an end id inside the 20: the reference greedy run has no stop tokens.
    const cut = meta.greedy_ids.findIndex((id: number) => engine.stopIds.includes(id));
    const want = cut < 0 ? meta.greedy_ids : meta.greedy_ids.slice(0, cut);
    expect(result.ids).toEqual(want);
    expect(events.filter((e) => e.token >= 0).map((e) => e.token)).toEqual(want);
    expect(events.map((e) => e.text).join("")).toBe(result.text);
    expect(result.text).toBe(engine.tokenizer.decode(want));
    expect(result.report.generated_tokens).toBe(want.length);
    expect(result.report.prompt_tokens).toBe(meta.prompt_ids.length);
    expect(result.report.peak_rss_bytes).toBeGreaterThan(0);
  });

  it("stops on an end id without emitting it", async () => {
    const first = meta.greedy_ids[0];
    const r = await engine.complete(meta.prompt_ids, { maxTokens: 5, stopIds: [meta.greedy_ids[2]] });
    expect(r.stopReason).toBe("stop");
    expect(r.stopId).toBe(meta.greedy_ids[2]);
    expect(r.ids).toEqual([first, meta.greedy_ids[1]]);
  });

  it("cuts at a stop string and never streams past it", async () => {
    const full = await engine.complete(meta.prompt_ids, { maxTokens: 12 });
    const stop = full.text.slice(4, 7);
    const pieces: string[] = [];
    const it = engine.generate(meta.prompt_ids, { maxTokens: 12, stop: [stop] });
    let r = await it.next();
    while (!r.done) {
      pieces.push(r.value.text);
      r = await it.next();
    }
    expect(r.value.stopReason).toBe("stop");
    expect(r.value.text).toBe(full.text.slice(0, full.text.indexOf(stop)));
    expect(pieces.join("")).toBe(r.value.text);
  });

  it("honours an AbortSignal", async () => {
    const ac = new AbortController();
    ac.abort();
    const r = await engine.complete(meta.prompt_ids, { maxTokens: 5, signal: ac.signal });
    expect(r.stopReason).toBe("abort");
    expect(r.ids).toEqual([]);
  });

  it("honours an abort in the middle of a generation", async () => {
    const ac = new AbortController();
    const it = engine.generate(meta.prompt_ids, { maxTokens: 20, signal: ac.signal, stopIds: [] });
    let r = await it.next();
    let seen = 0;
    while (!r.done) {
      if (++seen === 3) ac.abort();
      r = await it.next();
    }
    expect(r.value.stopReason).toBe("abort");
    expect(r.value.ids).toEqual(meta.greedy_ids.slice(0, 3));
  });

  it("reads a cancel flag between layers (and inside them): a prefill stops within one layer of it (issue #15)", async () => {
    const ids = engine.encodeText("The quick brown fox jumps over the lazy dog. ".repeat(30));
    expect(ids.length).toBeGreaterThan(3 * 64);
    expect(engine.config.numLayers).toBe(13);
    // The flag is set once 20 layers have run (mid-chunk: chunk 2, layer 7 of 13); no other layer may start after it.
    let ran = 0;
    let reads = 0;
    const state = engine.model.newState();
    await expect(engine.model.forward(ids, state, { chunkSize: 64, onLayer: () => ran++, cancelled: () => (reads++, ran >= 20) })).rejects.toThrow(/generation aborted/);
    expect(ran).toBe(20);
    // once before each layer, and inside MoE layers before routing and after each group of experts
    expect(reads).toBeGreaterThanOrEqual(21);
    // Through generate: the flag set during the prefill ends it with no token.
    let calls = 0;
    const r = await engine.complete(ids, { maxTokens: 5, stopIds: [], promptCache: null, cancelled: () => ++calls > 5 });
    expect(r.stopReason).toBe("abort");
    expect(r.ids).toEqual([]);
    expect(calls).toBe(6);
  });

  it("refuses a prompt over 32,768 tokens (the limit k3 run and the server share) before any prefill", async () => {
    const { ContextError } = await import("../src/errors.js");
    let ran = 0;
    const gen = engine.generate(new Array(32769).fill(65), { maxTokens: 1, cancelled: () => (ran++, false) });
    await expect(gen.next()).rejects.toThrow(new ContextError("the prompt has 32769 tokens; at most 32768"));
    expect(ran).toBe(0);
  });

  it("seeded sampling is deterministic and differs across seeds", async () => {
    const run = async (seed: number) => (await engine.complete(meta.prompt_ids, { maxTokens: 12, temperature: 1.2, topK: 50, topP: 0.95, seed, stopIds: [] })).ids.join(",");
    const a = await run(1);
    expect(await run(1)).toBe(a);
    expect(await run(2)).not.toBe(a);
  });

  it("text prompts are encoded with specials disabled", () => {
    const ids = engine.encodeText("<|open|>", false);
    expect(ids).not.toContain(771);
  });
});

describe("byte-identical output across presets, chunk sizes, threads and SIMD levels", async () => {
  setThreadCount(1);
  const base = await Engine.load(TINY_K3, { mem: bigBox, preset: "laptop" });
  const want = (await base.complete(meta.prompt_ids, { maxTokens: 20, stopIds: [] })).ids;
  const levels: SimdLevel[] = (["scalar", "avx2", "avx512"] as SimdLevel[]).filter((l) => {
    try {
      setSimdLevel(l);
      return true;
    } catch {
      return false;
    }
  });
  setSimdLevel(bestSimdLevel());

  it("every memory preset (ultra reads embedding rows and lm_head chunks from disk)", async () => {
    for (const preset of PRESET_NAMES) {
      const e = await Engine.load(TINY_K3, { mem: bigBox, preset });
      const r = await e.complete(meta.prompt_ids, { maxTokens: 20, stopIds: [] });
      expect(r.ids, preset).toEqual(want);
      if (preset === "ultra") {
        const D = e.config.hiddenSize;
        const V = e.config.vocabSize;
        // every fed token's embedding row + one full lm_head pass per sampled token
        const fed = meta.prompt_ids.length + r.ids.length - 1;
        // Device bytes of O_DIRECT reads: each read's 4 KiB-aligned superset (at most 2 pages more).
        const asked = fed * D * 2 + r.ids.length * V * D * 2;
        const reads = fed + r.ids.length * Math.ceil(V / headChunkRowsFor(V, D * 2));
        expect(r.report.bytes_read.embed_head).toBeGreaterThanOrEqual(asked);
        expect(r.report.bytes_read.embed_head).toBeLessThanOrEqual(asked + reads * 8192);
        // ... and they bypass the page cache (the tiny model's files are on a disk that allows O_DIRECT).
        const io = e.model.embedHeadIo()!;
        expect(io.reads).toBe(reads);
        if (io.direct) expect(io.bufferedReads).toBe(0);
        expect(r.report.plan_check!.mismatches).toEqual([]);
      } else expect(r.report.bytes_read.embed_head).toBe(0);
      e.close();
    }
  });

  it("chunked prefill (1, 5, 64 tokens per chunk) and 2 threads", async () => {
    for (const chunkSize of [1, 5]) {
      const e = await Engine.load(TINY_K3, { mem: bigBox, preset: "laptop", chunkSize });
      expect((await e.complete(meta.prompt_ids, { maxTokens: 20, stopIds: [] })).ids, `chunk ${chunkSize}`).toEqual(want);
    }
    setThreadCount(2);
    expect((await base.complete(meta.prompt_ids, { maxTokens: 20, stopIds: [] })).ids, "2 threads").toEqual(want);
    setThreadCount(1);
  });

  it("prefill chunks of any multiple of 64 give the same logits bits (prompts of 129 and 200 tokens, every position)", async () => {
    for (const dir of [TINY_K3, TINY_48B]) {
      const e = await Engine.load(dir, { mem: bigBox, preset: "laptop" });
      const V = e.config.vocabSize;
      for (const T of [129, 200]) {
        const ids = Array.from({ length: T }, (_, i) => (i * 7919 + 13) % (V - 300));
        let ref: Float32Array | null = null;
        for (const chunkSize of [64, 128, 256, 4096]) {
          const logits = await e.model.forward(ids, e.newState(), { chunkSize, allLogits: true });
          expect(logits.length).toBe(T * V);
          ref ??= logits;
          expect(Buffer.from(logits.buffer, logits.byteOffset, logits.byteLength).equals(Buffer.from(ref.buffer, ref.byteOffset, ref.byteLength)), `${dir} T=${T} chunk ${chunkSize}`).toBe(true);
        }
      }
      e.close();
    }
  });

  it(`every SIMD level (${levels.join(", ")})`, async () => {
    let ref: Float32Array | null = null;
    for (const level of levels) {
      setSimdLevel(level);
      const logits = await base.model.forward(meta.prompt_ids, base.newState());
      ref ??= logits;
      expect(Buffer.from(logits.buffer).equals(Buffer.from(ref.buffer)), `logits at ${level}`).toBe(true);
      expect((await base.complete(meta.prompt_ids, { maxTokens: 20, stopIds: [] })).ids, level).toEqual(want);
    }
    setSimdLevel(bestSimdLevel());
  });
});

describe("prefetch and read pieces change I/O only: byte-identical output", async () => {
  setThreadCount(1);
  const off = await Engine.load(TINY_K3, { mem: bigBox, preset: "laptop", prefetch: false, pieceMb: 0 });
  const wantLogits = await off.model.forward(meta.prompt_ids, off.newState());
  const want = (await off.complete(meta.prompt_ids, { maxTokens: 20, stopIds: [] })).ids;
  off.close();
  afterAll(() => setThreadCount(1));

  // One test per preset: the whole grid took 52 s alone, against vitest's 60 s per test on a busy machine.
  it.each(PRESET_NAMES)("preset %s x threads 1/2/3 x {prefetch + 4 MiB pieces, prefetch only, pieces only}: same logits bits and tokens", async (preset) => {
    for (const [prefetch, pieceMb] of [[true, 4], [true, 0], [false, 4]] as const) {
      const e = await Engine.load(TINY_K3, { mem: bigBox, preset, prefetch, pieceMb });
      for (const threads of [1, 2, 3]) {
        setThreadCount(threads);
        const what = `${preset}, prefetch ${prefetch}, pieces ${pieceMb} MiB, ${threads} threads`;
        const logits = await e.model.forward(meta.prompt_ids, e.newState());
        expect(Buffer.from(logits.buffer).equals(Buffer.from(wantLogits.buffer)), what).toBe(true);
        const r = await e.complete(meta.prompt_ids, { maxTokens: 20, stopIds: [] });
        expect(r.ids, what).toEqual(want);
        expect(r.report.prefetch, what).toBe(prefetch);
        expect(r.report.piece_bytes, what).toBe(pieceMb << 20);
        if (prefetch) {
          // The predictor ran for every MoE layer but the last, and its accuracy is a fraction.
          expect(r.report.prefetch_predicted, what).toBeGreaterThan(0);
          expect(r.report.prefetch_accuracy!, what).toBeGreaterThan(0);
          expect(r.report.prefetch_accuracy!, what).toBeLessThanOrEqual(1);
          expect(r.report.prefetch_hit_rate! + r.report.resident_hit_rate!, what).toBeLessThanOrEqual(1);
        } else {
          expect(r.report.prefetch_predicted, what).toBe(0);
          expect(r.report.prefetch_hit_rate, what).toBe(0);
        }
      }
      setThreadCount(1);
      e.close();
    }
  });

  it("prefetch reads ahead when nothing is cached: prefetch hits replace demand reads, same tokens", async () => {
    const budgets = { cacheBytes: 0 };
    const on = await Engine.load(TINY_K3, { mem: bigBox, preset: "laptop", budgets });
    const plain = await Engine.load(TINY_K3, { mem: bigBox, preset: "laptop", budgets, prefetch: false });
    const a = await on.complete(meta.prompt_ids, { maxTokens: 8, stopIds: [] });
    const b = await plain.complete(meta.prompt_ids, { maxTokens: 8, stopIds: [] });
    expect(a.ids).toEqual(b.ids);
    expect(b.report.resident_hit_rate).toBe(0);
    expect(a.report.resident_hit_rate).toBe(0);
    expect(a.report.prefetch_issued).toBeGreaterThan(0);
    expect(a.report.prefetch_hit_rate!).toBeGreaterThan(0);
    expect(a.report.expert_requests).toBe(b.report.expert_requests);
    // Every byte the expert store read is in the report, lookahead reads that completed before
    // their layer ran (issued before a dense layer's mixer, or a layer ahead) included, and in the
    // per-kind figures the floor is computed from.
    for (const [e, r] of [[on, a], [plain, b]] as const) {
      const store = e.model.experts!.stats().deviceBytes;
      const perKind = r.report.per_kind.moe_experts;
      expect(r.report.bytes_read.experts).toBe(store);
      expect(perKind.prefill.bytes_read + perKind.decode.bytes_read).toBe(store);
    }
    on.close();
    plain.close();
  });

  it("tiny-kimi-linear (bf16 experts, plain residuals): same logits bits with and without prefetch, 1 and 3 threads", async () => {
    const a = await Engine.load(TINY_48B, { mem: bigBox, preset: "laptop", budgets: { cacheBytes: 0 } });
    const b = await Engine.load(TINY_48B, { mem: bigBox, preset: "laptop", budgets: { cacheBytes: 0 }, prefetch: false, pieceMb: 0 });
    for (const threads of [1, 3]) {
      setThreadCount(threads);
      const x = await a.model.forward(meta48.prompt_ids, a.newState());
      const y = await b.model.forward(meta48.prompt_ids, b.newState());
      expect(Buffer.from(x.buffer).equals(Buffer.from(y.buffer)), `${threads} threads`).toBe(true);
    }
    setThreadCount(1);
    // A whole-prompt prefill needs more experts than there are slots (demand waves), so prefetch
    // stands aside there; decode is where it lands hits.
    const ra = await a.complete(meta48.prompt_ids, { maxTokens: 8, stopIds: [] });
    const rb = await b.complete(meta48.prompt_ids, { maxTokens: 8, stopIds: [] });
    expect(ra.ids).toEqual(rb.ids);
    expect(ra.report.prefetch_hit_rate!).toBeGreaterThan(0);
    a.close();
    b.close();
  });

  it("--piece-mb must be an integer number of MiB", async () => {
    await expect(Engine.load(TINY_K3, { mem: bigBox, preset: "laptop", pieceMb: 0.5 })).rejects.toThrow(/--piece-mb 0.5: expected an integer number of MiB/);
  });
});

describe("engine on tiny-kimi-linear", async () => {
  setThreadCount(1);
  const engine = await Engine.load(TINY_48B, { mem: bigBox, preset: "laptop" });
  it("uses the im_* chat format and its end ids", () => {
    expect(engine.chatFormat).toBe("kimi-linear");
    expect(engine.stopIds).toContain(engine.tokenizer.specialTokens.get("[EOS]"));
    expect(engine.encodeChat([{ role: "user", content: "Write a function that adds two numbers." }])).toEqual(meta48.prompt_ids);
  });
});

describe("trunk streaming from a packed trunk (k3 pack) gives the same output", async () => {
  const { packTrunk } = await import("@k3/moe-stream");
  const { mkdtempSync } = await import("node:fs");
  const { tmpdir } = await import("node:os");
  const { censusOf } = await import("../src/census.js");
  const { readConfig } = await import("../src/config.js");
  setThreadCount(1);
  const { rmSync } = await import("node:fs");
  const trunkDir = mkdtempSync(join(tmpdir(), "k3-trunk-"));
  afterAll(() => rmSync(trunkDir, { recursive: true, force: true }));
  await packTrunk(TINY_K3, trunkDir);
  const census = censusOf(readConfig(TINY_K3));
  const largest = Math.max(...census.layerTrunkBytes);
  const base = await Engine.load(TINY_K3, { mem: bigBox, preset: "laptop" });
  const want = (await base.complete(meta.prompt_ids, { maxTokens: 20, stopIds: [] })).ids;
  base.close();

  for (const ringSlots of [1, 2]) {
    it(`${ringSlots} ring slot(s), some layers pinned`, async () => {
      // Ring slots are the largest packed layer rounded up to 4 KiB pieces (what the streamer allocates).
      const budgets = { trunkBytes: ringSlots * ringSlotBytesFor(largest) + 4 * largest, ringSlots };
      const e = await Engine.load(TINY_K3, { mem: bigBox, preset: "laptop", budgets, trunkDir });
      expect(e.plan.streamedLayers.length).toBeGreaterThan(0);
      expect(e.plan.pinnedLayers.length).toBeGreaterThan(0);
      const r = await e.complete(meta.prompt_ids, { maxTokens: 20, stopIds: [] });
      expect(r.ids).toEqual(want);
      expect(r.report.bytes_read.trunk).toBeGreaterThan(0);
      // The plan held: every streamed layer's packed bytes per decoded token, the ring it allocated.
      const pc = r.report.plan_check!;
      expect(pc.mismatches).toEqual([]);
      expect(pc.memory.find((m) => m.name === "trunk ring")!.measured).toBeLessThanOrEqual(pc.memory.find((m) => m.name === "trunk ring")!.planned);
      e.close();
    });
  }
});
