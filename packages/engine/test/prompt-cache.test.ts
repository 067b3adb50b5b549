/**
 * The prompt cache: a hit gives exactly the bits of a cold prefill (logits compared as bytes, ids
 * and text of greedy runs), through the engine API and through the real server (worker thread);
 * LRU and byte caps; prompts that are a strict prefix of, or diverge from, a snapshot never use it.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { setThreadCount } from "@k3/dense";
import { afterAll, describe, expect, it } from "vitest";
import { Engine } from "../src/engine.js";
import { GB } from "../src/presets.js";
import { PromptCache, snapshotGrain, snapshotPoint, stateBytes } from "../src/prompt-cache.js";
import { KdaState } from "../src/layers/kda.js";
import type { ModelState } from "../src/model.js";
import { startServer } from "../src/server.js";
import { TINY_48B, TINY_K3 } from "./helpers.js";

const bigBox = { totalBytes: 256 * GB, availableBytes: 250 * GB };
const meta = JSON.parse(readFileSync(join(TINY_K3, "expected.json"), "utf8"));
const CHUNK = 4;

/** The bytes of a Float32Array, for bit-for-bit comparison (toEqual on floats would accept -0 == 0). */
const bytesOf = (x: Float32Array) => Buffer.from(x.buffer, x.byteOffset, x.byteLength);

/** A base prompt long enough for every length below: the reference prompt, then greedy ids. */
const base: number[] = [...meta.prompt_ids, ...meta.greedy_ids];

setThreadCount(1);
const engine = await Engine.load(TINY_K3, { mem: bigBox, preset: "laptop", chunkSize: CHUNK });
const fwd = { chunkSize: CHUNK };

/** Cold: one forward(prompt) from a fresh state. */
async function coldLogits(e: Engine, prompt: number[]): Promise<Float32Array> {
  return e.model.forward(prompt, e.newState(), { chunkSize: CHUNK });
}

afterAll(() => engine.close());

describe("prompt cache: bit identity", () => {
  it("snapshot points are the largest chunk multiple that leaves a token", () => {
    expect([1, 2, 4, 5, 8, 9, 17].map((p) => snapshotPoint(p, 4))).toEqual([0, 0, 0, 4, 4, 8, 16]);
    expect(snapshotPoint(65, 64)).toBe(64);
    expect(snapshotPoint(64, 64)).toBe(0);
  });

  it("forward split at a chunk multiple = one forward, bit for bit; an unaligned split is not (the test can fail)", async () => {
    const prompt = base.slice(0, 17);
    const cold = await coldLogits(engine, prompt);
    for (const s of [4, 8, 16]) {
      const st = engine.newState();
      await engine.model.forward(prompt.slice(0, s), st, fwd);
      const hot = await engine.model.forward(prompt.slice(s), st, fwd);
      expect(bytesOf(hot).equals(bytesOf(cold)), `split at ${s}`).toBe(true);
    }
    // Control: a split at 3 moves every later chunk boundary (and a 1-token chunk runs the KDA
    // recurrence instead of the chunked form), so the bits differ. This is why snapshots are aligned.
    const st = engine.newState();
    await engine.model.forward(prompt.slice(0, 3), st, fwd);
    const off = await engine.model.forward(prompt.slice(3), st, fwd);
    expect(bytesOf(off).equals(bytesOf(cold))).toBe(false);
    let maxDiff = 0;
    for (let i = 0; i < cold.length; i++) maxDiff = Math.max(maxDiff, Math.abs(off[i] - cold[i]));
    expect(maxDiff).toBeLessThan(1e-3);
  });

  for (const P of [1, 3, 4, 5, 7, 8, 9, 17, 38]) {
    it(`a prompt of ${P} tokens: restored snapshot + rest = cold prefill (logits bytes, greedy ids and text)`, async () => {
      const prompt = base.slice(0, P);
      const opts = { maxTokens: 6, temperature: 0, stopIds: [] as number[] };
      const cold = await engine.complete(prompt, { ...opts, promptCache: null });
      expect(cold.cachedTokens).toBe(0);
      const cache = new PromptCache({ slots: 4 });
      // First run stores the snapshot (cold itself), the second restores it.
      const first = await engine.complete(prompt, { ...opts, promptCache: cache });
      const second = await engine.complete(prompt, { ...opts, promptCache: cache });
      const s = snapshotPoint(P, CHUNK);
      expect(first.cachedTokens).toBe(0);
      expect(second.cachedTokens).toBe(s);
      // The report counts the restored tokens apart: prefill speed covers the prefilled ones only.
      expect(second.report.prompt_cached_tokens).toBe(s);
      expect(second.report.prefill_tokens_per_second).toBeCloseTo((P - s) / second.report.prefill_seconds, 6);
      expect(cache.size).toBe(s > 0 ? 1 : 0);
      for (const r of [first, second]) {
        expect(r.ids).toEqual(cold.ids);
        expect(r.text).toBe(cold.text);
      }
      // The logits themselves, through the same restore the engine does.
      const hit = cache.lookup(engine.promptCacheKey, prompt);
      expect(hit?.ids.length ?? 0).toBe(s);
      const st = hit ? cache.restore(hit) : engine.newState();
      const hot = await engine.model.forward(prompt.slice(st.pos), st, fwd);
      expect(bytesOf(hot).equals(bytesOf(await coldLogits(engine, prompt)))).toBe(true);
      // A longer prompt extending this one starts from the snapshot and stores a fresher one.
      const longer = base.slice(0, P + 6);
      const ext = await engine.complete(longer, { ...opts, promptCache: cache });
      const coldExt = await engine.complete(longer, { ...opts, promptCache: null });
      expect(ext.cachedTokens).toBe(s);
      expect(ext.ids).toEqual(coldExt.ids);
      expect(ext.text).toBe(coldExt.text);
      expect(cache.snapshots().at(-1)!.ids.length).toBe(snapshotPoint(P + 6, CHUNK));
    });
  }

  it("the cached object is never advanced: a hit leaves the snapshot's state untouched", async () => {
    const cache = new PromptCache({ slots: 2 });
    const prompt = base.slice(0, 13);
    await engine.complete(prompt, { maxTokens: 3, temperature: 0, promptCache: cache });
    const snap = cache.snapshots()[0];
    const before = snap.state.layers.map((l) => Buffer.from(l.save()));
    const pos = snap.state.pos;
    await engine.complete(base.slice(0, 21), { maxTokens: 3, temperature: 0, promptCache: cache });
    expect(snap.state.pos).toBe(pos);
    expect(snap.state.layers.map((l) => Buffer.from(l.save()))).toEqual(before);
  });

  it("sampling options do not enter the key; a seeded sample on a hit equals the cold one", async () => {
    const cache = new PromptCache();
    const prompt = base.slice(0, 11);
    await engine.complete(prompt, { maxTokens: 2, temperature: 0, promptCache: cache });
    const opts = { maxTokens: 8, temperature: 0.9, topP: 0.95, seed: 7 };
    const hot = await engine.complete(prompt, { ...opts, promptCache: cache });
    const cold = await engine.complete(prompt, { ...opts, promptCache: null });
    expect(hot.cachedTokens).toBe(8);
    expect(hot.ids).toEqual(cold.ids);
  });

  it("the engine-owned cache (EngineOptions.promptCache) logs the reuse; a given state bypasses the cache", async () => {
    const lines: string[] = [];
    const e = await Engine.load(TINY_K3, { mem: bigBox, preset: "laptop", chunkSize: CHUNK, promptCache: { slots: 1 }, log: (l) => lines.push(l) });
    try {
      const prompt = base.slice(0, 10);
      await e.complete(prompt, { maxTokens: 2, temperature: 0 });
      const r = await e.complete(prompt, { maxTokens: 2, temperature: 0 });
      expect(r.cachedTokens).toBe(8);
      expect(lines.filter((l) => l.startsWith("prompt cache:"))).toEqual([
        expect.stringMatching(/^prompt cache: 0 of 10 prompt tokens reused, 10 prefilled; snapshot at 8 tokens/),
        expect.stringMatching(/^prompt cache: 8 of 10 prompt tokens reused, 2 prefilled$/),
      ]);
      const withState = await e.complete(prompt, { maxTokens: 2, temperature: 0, state: e.newState() });
      expect(withState.cachedTokens).toBe(0);
      expect(withState.ids).toEqual(r.ids);
      expect(() => new PromptCache({ slots: -1 })).toThrow(/prompt cache slots -1/);
      await expect(Engine.load(TINY_K3, { mem: bigBox, promptCache: { slots: 1, maxBytes: -5 } })).rejects.toThrow(/maxBytes -5/);
      await expect(Engine.load(TINY_K3, { mem: bigBox, chunkSize: 2.5 })).rejects.toThrow(/--chunk 2.5: expected an integer in 1\.\.4096/);
    } finally {
      e.close();
    }
  });

  it("a prefill in which an expert was dropped (I/O error) leaves no snapshot", async () => {
    const lines: string[] = [];
    const e = await Engine.load(TINY_K3, { mem: bigBox, preset: "laptop", chunkSize: CHUNK, promptCache: { slots: 2 }, log: (l) => lines.push(l) });
    try {
      // Stand in for a failed expert read: every forward reports one drop, as MoeFfn does.
      const forward = e.model.forward.bind(e.model);
      e.model.forward = async (...args: Parameters<typeof forward>) => {
        const r = await forward(...args);
        e.model.counters.expertDrops++;
        return r;
      };
      await e.complete(base.slice(0, 10), { maxTokens: 1, temperature: 0 });
      expect(e.promptCache!.size).toBe(0);
      expect(lines.at(-1)).toMatch(/no snapshot \(1 expert drop\(s\) in this prefill\)/);
    } finally {
      e.close();
    }
  });

  it("a hit is checked against the KV plan like a cold run (restored tokens are counted once)", async () => {
    const probe = await Engine.load(TINY_K3, { mem: bigBox, preset: "laptop" });
    const perToken = probe.census.kvBytesPerToken;
    probe.close();
    const e = await Engine.load(TINY_K3, { mem: bigBox, preset: "laptop", chunkSize: CHUNK, budgets: { kvBytes: 30 * perToken }, promptCache: { slots: 1 } });
    try {
      expect(e.plan.kvCapacityTokens).toBe(30);
      const prompt = base.slice(0, 20);
      await e.complete(prompt, { maxTokens: 10, temperature: 0 });
      const hot = await e.complete(prompt, { maxTokens: 10, temperature: 0 });
      expect(hot.cachedTokens).toBe(16);
      await expect(e.complete(prompt, { maxTokens: 11, temperature: 0 })).rejects.toThrow(/context of 31 tokens/);
    } finally {
      e.close();
    }
  });

  it("at --chunk 256 snapshots sit at multiples of 64: a 200-token prompt leaves one at 192, and the hit's logits are the cold run's bits", async () => {
    expect(snapshotGrain(256)).toBe(64);
    expect(snapshotGrain(100)).toBe(100); // not a multiple of 64: the chunk's own cuts
    for (const dir of [TINY_K3, TINY_48B]) {
      const e = await Engine.load(dir, { mem: bigBox, preset: "laptop", chunkSize: 256 });
      try {
        const V = e.config.vocabSize;
        const first = Array.from({ length: 200 }, (_, i) => (i * 7919 + 13) % (V - 300));
        const turn2 = [...first, ...Array.from({ length: 71 }, (_, i) => (i * 31 + 5) % (V - 300))];
        const cache = new PromptCache({ slots: 2 });
        const opts = { maxTokens: 4, temperature: 0, stopIds: [] as number[] };
        await e.complete(first, { ...opts, promptCache: cache });
        const hot = await e.complete(turn2, { ...opts, promptCache: cache });
        expect(hot.cachedTokens, dir).toBe(192); // was none at 256: floor(199 / 256) * 256 = 0
        const cold = await e.complete(turn2, { ...opts, promptCache: null });
        expect(hot.ids).toEqual(cold.ids);
        // the restored state continued with the rest gives the cold prefill's logits, bit for bit
        const st = e.newState();
        await e.model.forward(turn2.slice(0, 192), st, { chunkSize: 256, noLogits: true });
        const split = await e.model.forward(turn2.slice(192), st, { chunkSize: 256 });
        const whole = await e.model.forward(turn2, e.newState(), { chunkSize: 256 });
        expect(Buffer.from(split.buffer, split.byteOffset, split.byteLength).equals(Buffer.from(whole.buffer, whole.byteOffset, whole.byteLength)), dir).toBe(true);
      } finally {
        e.close();
      }
    }
  });

  it("tiny Kimi-Linear (another KDA/MLA layout): hit = cold", async () => {
    const e = await Engine.load(TINY_48B, { mem: bigBox, preset: "laptop", chunkSize: 8 });
    try {
      const prompt = e.encodeText("The quick brown fox jumps over the lazy dog, then the dog naps in the sun.");
      expect(prompt.length).toBeGreaterThan(9);
      const cache = new PromptCache();
      const opts = { maxTokens: 5, temperature: 0, stopIds: [] as number[] };
      await e.complete(prompt, { ...opts, promptCache: cache });
      const hot = await e.complete(prompt, { ...opts, promptCache: cache });
      const cold = await e.complete(prompt, { ...opts, promptCache: null });
      expect(hot.cachedTokens).toBe(snapshotPoint(prompt.length, 8));
      expect(hot.cachedTokens).toBeGreaterThan(0);
      expect(hot.ids).toEqual(cold.ids);
      expect(hot.text).toBe(cold.text);
    } finally {
      e.close();
    }
  });
});

describe("prompt cache: which snapshot, LRU and bytes", () => {
  /** The state after prefilling base[0:n] (n a multiple of CHUNK). */
  async function prefilled(n: number): Promise<ModelState> {
    const st = engine.newState();
    await engine.model.forward(base.slice(0, n), st, fwd);
    return st;
  }
  const key = () => engine.promptCacheKey;

  it("counts the layer state bytes: KDA conv + S, MLA rows up to the position (compact copies)", async () => {
    const st = await prefilled(8);
    const cache = new PromptCache();
    const snap = cache.store(key(), st)!;
    let want = 0;
    for (const l of st.layers) want += l instanceof KdaState ? l.byteLength : l.length * l.width * 4;
    expect(snap.bytes).toBe(want);
    expect(stateBytes(snap.state)).toBe(want);
    expect(cache.bytes).toBe(want);
    // The stored copy is independent of the state it came from.
    await engine.model.forward([5], st, fwd);
    expect(snap.state.pos).toBe(8);
  });

  it("evicts the least recently used snapshot; a lookup refreshes it", async () => {
    const cache = new PromptCache({ slots: 2 });
    const other = [...base.slice(0, 3), (base[3] + 1) % 1024, ...base.slice(4, 12)];
    const s8 = await prefilled(8);
    const sOther = engine.newState();
    await engine.model.forward(other.slice(0, 8), sOther, fwd);
    cache.store(key(), s8);
    cache.store(key(), sOther);
    expect(cache.lookup(key(), base.slice(0, 12))!.ids.length).toBe(8); // refreshes the base snapshot
    cache.store(key(), await prefilled(4)); // evicts `other`, the least recently used
    expect(cache.size).toBe(2);
    expect(cache.lookup(key(), other)).toBeNull();
    expect(cache.snapshots().map((s) => s.ids.length)).toEqual([8, 4]);
    // Storing an identical snapshot again only refreshes it.
    cache.store(key(), s8);
    expect(cache.snapshots().map((s) => s.ids.length)).toEqual([4, 8]);
    expect(cache.stats()).toMatchObject({ stored: 3, evicted: 1, hits: 1, lookups: 2 });
  });

  it("caps the bytes: older snapshots go first, one larger than the cap is not stored", async () => {
    const s4 = await prefilled(4);
    const s8 = await prefilled(8);
    const b4 = stateBytes(new PromptCache().store(key(), s4)!.state);
    const b8 = stateBytes(new PromptCache().store(key(), s8)!.state);
    expect(b8).toBeGreaterThan(b4); // the MLA rows grow with the position
    const cache = new PromptCache({ slots: 8, maxBytes: b4 + b8 - 1 });
    cache.store(key(), s4);
    cache.store(key(), s8);
    expect(cache.snapshots().map((s) => s.ids.length)).toEqual([8]);
    expect(cache.bytes).toBe(b8);
    const tiny = new PromptCache({ slots: 8, maxBytes: b4 - 1 });
    expect(tiny.store(key(), s4)).toBeNull();
    expect(tiny.size).toBe(0);
    expect(tiny.stats().tooLarge).toBe(1);
    // Through generate: the prefill still runs and gives the cold output.
    const r = await engine.complete(base.slice(0, 9), { maxTokens: 3, temperature: 0, promptCache: tiny });
    const cold = await engine.complete(base.slice(0, 9), { maxTokens: 3, temperature: 0, promptCache: null });
    expect(r.ids).toEqual(cold.ids);
    expect(new PromptCache({ slots: 0 }).enabled).toBe(false);
  });

  it("a prompt that is a strict prefix of, or diverges inside, a snapshot does not use it", async () => {
    const cache = new PromptCache({ slots: 4 });
    cache.store(key(), await prefilled(4));
    cache.store(key(), await prefilled(8));
    // Strict prefix, and the exact snapshot ids (no token would be left for the logits).
    expect(cache.lookup(key(), base.slice(0, 6))!.ids.length).toBe(4);
    expect(cache.lookup(key(), base.slice(0, 8))!.ids.length).toBe(4);
    expect(cache.lookup(key(), base.slice(0, 4))).toBeNull();
    // Diverging at token 6 (inside the 8-snapshot) falls back to the 4-snapshot; at token 1, to nothing.
    const at6 = [...base.slice(0, 6), (base[6] + 1) % 1024, ...base.slice(7, 14)];
    expect(cache.lookup(key(), at6)!.ids.length).toBe(4);
    const at1 = [base[0], (base[1] + 1) % 1024, ...base.slice(2, 14)];
    expect(cache.lookup(key(), at1)).toBeNull();
    // Diverging at the snapshot's last token.
    const at7 = [...base.slice(0, 7), (base[7] + 1) % 1024, ...base.slice(8, 14)];
    expect(cache.lookup(key(), at7)!.ids.length).toBe(4);
    // Another engine numerics key (chunk size 8) never sees these snapshots.
    expect(cache.lookup(key().replace(`/chunk${CHUNK}/`, "/chunk8/"), base.slice(0, 14))).toBeNull();
    // And the generations agree with cold ones.
    for (const p of [at6, at1, at7, base.slice(0, 6)]) {
      const hot = await engine.complete(p, { maxTokens: 4, temperature: 0, stopIds: [], promptCache: cache });
      const cold = await engine.complete(p, { maxTokens: 4, temperature: 0, stopIds: [], promptCache: null });
      expect(hot.ids).toEqual(cold.ids);
    }
  });
});

describe("prompt cache through the server (worker thread)", () => {
  it("a 3-turn chat: turns 2 and 3 report cached_tokens > 0 and the exact text of a server without the cache", async () => {
    const { WorkerBackend } = await import("../src/backend.js");
    const worker = new URL("../src/worker.ts", import.meta.url);
    const start = (slots: number) => WorkerBackend.start({ dir: TINY_K3, options: { threads: 1, preset: "laptop", promptCache: { slots } } }, worker);
    const [withCache, without] = await Promise.all([start(1), start(0)]);
    const logs: string[] = [];
    withCache.onLog = (l) => logs.push(l);
    const servers = await Promise.all([startServer(withCache, { port: 0 }), startServer(without, { port: 0 })]);
    try {
      // A system prompt longer than one 64-token chunk, so turn 1 leaves a snapshot at the default chunk size.
      const system = "You are a careful assistant. ".repeat(12) + "Answer briefly.";
      const users = ["Write a function that adds two numbers.", "Now make it subtract.", "And multiply?"];
      const history: { role: string; content: string }[] = [{ role: "system", content: system }];
      for (const [turn, user] of users.entries()) {
        history.push({ role: "user", content: user });
        const body = JSON.stringify({ messages: history, max_tokens: 24, temperature: 0 });
        const [a, b] = await Promise.all(
          servers.map((s) => fetch(s.url + "/v1/chat/completions", { method: "POST", headers: { "content-type": "application/json" }, body }).then((r) => r.json() as Promise<any>)),
        );
        expect(a.choices[0].message).toEqual(b.choices[0].message);
        expect(a.usage.prompt_tokens).toBe(b.usage.prompt_tokens);
        expect(a.usage.completion_tokens).toBe(b.usage.completion_tokens);
        expect(b.usage.prompt_tokens_details.cached_tokens).toBe(0);
        const cached = a.usage.prompt_tokens_details.cached_tokens;
        if (turn === 0) expect(cached).toBe(0);
        else {
          expect(cached).toBeGreaterThan(0);
          expect(cached % 64).toBe(0);
          expect(cached).toBeLessThan(a.usage.prompt_tokens);
        }
        history.push({ role: "assistant", content: a.choices[0].message.content });
        if (turn === 2) {
          // The same request streamed: the final chunk's usage carries cached_tokens, the text is the same.
          const sse = await fetch(servers[0].url + "/v1/chat/completions", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ messages: history.slice(0, -1), max_tokens: 24, temperature: 0, stream: true }) }).then((r) => r.text());
          const chunks = sse.split("\n\n").filter((e) => e && e !== "data: [DONE]").map((e) => JSON.parse(e.replace(/^data: /, "")));
          expect(chunks.map((c) => c.choices[0].delta.content ?? "").join("")).toBe(a.choices[0].message.content);
          expect(chunks.at(-1).usage.prompt_tokens_details.cached_tokens).toBeGreaterThanOrEqual(cached);
        }
      }
      expect(logs.filter((l) => /^prompt cache: \d+ of \d+ prompt tokens reused/.test(l))).toHaveLength(4);
    } finally {
      await Promise.all(servers.map((s) => s.close()));
      await Promise.all([withCache.close(), without.close()]);
    }
  });

  it("k3 serve refuses a bad --prompt-cache before loading anything", async () => {
    const { main } = await import("../src/cli.js");
    let stderr = "";
    const orig = process.stderr.write.bind(process.stderr);
    process.stderr.write = ((chunk: string | Uint8Array) => ((stderr += String(chunk)), true)) as typeof process.stderr.write;
    try {
      expect(await main(["serve", "--prompt-cache", "1.5"])).toBe(2);
      expect(await main(["serve", "--prompt-cache-mb", "lots"])).toBe(2);
    } finally {
      process.stderr.write = orig;
    }
    expect(stderr).toMatch(/--prompt-cache 1.5: expected an integer in 0\.\.1024/);
    expect(stderr).toMatch(/--prompt-cache-mb lots/);
  });
});
