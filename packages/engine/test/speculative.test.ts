/** Exact n-gram speculative decoding: drafting rules, and output/state bit-identical to plain decoding. */
import { describe, expect, it } from "vitest";
import { setThreadCount } from "@k3/dense";
import { ChatSession } from "../src/chat.js";
import { Engine } from "../src/engine.js";
import { GB } from "../src/presets.js";
import { ngramDraft } from "../src/speculative.js";
import { TINY_48B, TINY_K3 } from "./helpers.js";

describe("ngramDraft", () => {
  it("drafts what followed the longest earlier copy of the suffix", () => {
    // ... 5 6 7 8 9 ... 5 6 7 -> 8 9 (the suffix 5 6 7 was seen once, 3 tokens < 4: not enough alone)
    expect(ngramDraft([1, 5, 6, 7, 8, 9, 2, 5, 6, 7], 4)).toEqual([]);
    // a 4-token suffix seen once is enough
    expect(ngramDraft([1, 4, 5, 6, 7, 8, 9, 2, 4, 5, 6, 7], 4)).toEqual([8, 9, 2, 4]);
    expect(ngramDraft([1, 4, 5, 6, 7, 8, 9, 2, 4, 5, 6, 7], 2)).toEqual([8, 9]);
  });

  it("two sightings must agree: the draft stops where their continuations part", () => {
    // suffix (3 4) seen twice before, followed by 5 6 then 9 | 7
    expect(ngramDraft([3, 4, 5, 6, 9, 3, 4, 5, 6, 7, 0, 3, 4], 4)).toEqual([5, 6]);
    // ...and not at all when they part at once
    expect(ngramDraft([3, 4, 5, 1, 3, 4, 6, 1, 3, 4], 4)).toEqual([]);
  });

  it("a repeating cycle drafts its continuation; no context, no draft", () => {
    const cycle = [10, 11, 12, 13, 10, 11, 12, 13, 10, 11];
    expect(ngramDraft(cycle, 5)).toEqual([12, 13, 10, 11, 12]);
    expect(ngramDraft([], 4)).toEqual([]);
    expect(ngramDraft([7], 4)).toEqual([]);
    expect(ngramDraft(cycle, 0)).toEqual([]);
  });
});

const bigBox = { totalBytes: 256 * GB, availableBytes: 250 * GB };

/** A prompt whose continuation the random tiny models tend to repeat (so drafts get confirmed). */
function repetitivePrompt(engine: Engine): number[] {
  const phrase = engine.encodeText("the cat sat on the mat and the dog sat on the log", false);
  return [engine.config.bosTokenId, ...phrase, ...phrase, ...phrase];
}

for (const [name, dir] of [["tiny-k3", TINY_K3], ["tiny-kimi-linear", TINY_48B]] as const) {
  describe(`speculative decoding is exact (${name})`, async () => {
    setThreadCount(1);
    // The default KDA form ("auto": chunked prefill): verification still reproduces plain decoding.
    const engine = await Engine.load(dir, { mem: bigBox, preset: "laptop" });
    const prompt = repetitivePrompt(engine);

    // Drafters that know the plain run's answer, get part of it wrong, or guess at random: the
    // output must not depend on the guesses, only the number of forward passes may.
    const plainState = engine.newState();
    const plain = await engine.complete(prompt, { maxTokens: 48, state: plainState, stopIds: [] });
    const truth = (context: readonly number[], max: number) => plain.ids.slice(context.length - prompt.length, context.length - prompt.length + max);
    let seed = 1;
    const rand = () => ((seed = (seed * 1103515245 + 12345) >>> 0), seed % engine.config.vocabSize);
    const drafters: Record<string, (c: readonly number[], max: number) => number[]> = {
      oracle: truth,
      "every third wrong": (c, max) => truth(c, max).map((t, j) => (j % 3 === 2 ? (t + 1) % engine.config.vocabSize : t)),
      random: (_c, max) => Array.from({ length: max }, rand),
      "n-gram (no repeats in this output: no drafts)": undefined as never,
    };

    it("greedy: the same ids, text and final state whatever the drafts; confirmed drafts save forwards", async () => {
      expect(plain.report.decode_forwards).toBe(47);
      for (const [label, drafter] of Object.entries(drafters))
        for (const spec of [1, 3, 8]) {
          const state = engine.newState();
          const r = await engine.complete(prompt, { maxTokens: 48, state, stopIds: [], spec, drafter });
          const what = `${label}, spec ${spec}`;
          expect(r.ids, what).toEqual(plain.ids);
          expect(r.text).toBe(plain.text);
          // The state holds exactly the fed tokens, bit for bit (unconfirmed drafts rolled back).
          expect(state.pos).toBe(plainState.pos);
          expect(state.ids).toEqual(plainState.ids);
          for (let l = 0; l < state.layers.length; l++)
            expect(Buffer.from(engine.model.saveLayerState(state.layers[l])).equals(Buffer.from(engine.model.saveLayerState(plainState.layers[l]))), `${what} layer ${l}`).toBe(true);
          const st = r.report.spec;
          expect(st.max_draft).toBe(spec);
          expect(st.accepted).toBeLessThanOrEqual(st.drafted);
          // Every confirmed draft saved one decode forward.
          expect(r.report.decode_forwards, what).toBe(47 - st.accepted);
          if (label === "oracle") expect(st.accepted, what).toBe(st.drafted);
          if (label === "oracle" && spec === 8) expect(r.report.decode_forwards).toBeLessThanOrEqual(Math.ceil(47 / 9));
          if (label === "every third wrong" && spec >= 3) expect(st.accepted).toBeLessThan(st.drafted);
          if (label.startsWith("n-gram")) expect(st.drafted).toBe(0);
        }
    });

    it("a drafter returning something that is not token ids is refused by name", async () => {
      await expect(engine.complete(prompt, { maxTokens: 4, spec: 2, drafter: () => [1, -3] })).rejects.toThrow(/speculative drafter: returned \[1,-3\], expected an array of token ids/);
    });

    it("seeded sampling draws the same tokens with and without drafts", async () => {
      const opts = { maxTokens: 40, temperature: 0.7, topK: 20, seed: 42, stopIds: [] };
      const plain = await engine.complete(prompt, opts);
      const spec = await engine.complete(prompt, { ...opts, spec: 4, drafter: (c, max) => plain.ids.slice(c.length - prompt.length, c.length - prompt.length + max) });
      expect(spec.ids).toEqual(plain.ids);
      expect(spec.report.spec.accepted).toBeGreaterThan(0);
    });

    it("a chat continued after speculative turns says exactly what a plain chat says", async () => {
      const run = async (spec: number) => {
        const chat = new ChatSession(engine, { system: "Repeat after me." });
        const replies: number[][] = [];
        for (const msg of ["one two three one two three one two three", "again: one two three one two three"]) {
          // Half-right guesses: confirmations and rollbacks both happen inside each turn.
          const gen = chat.send(msg, { maxTokens: 24, spec, stopIds: [], drafter: (c, max) => Array.from({ length: max }, (_, j) => (j % 2 ? c[c.length - 1] : (c[c.length - 2] ?? 0))) });
          let r = await gen.next();
          while (!r.done) r = await gen.next();
          replies.push(r.value.ids);
        }
        return replies;
      };
      expect(await run(4)).toEqual(await run(0));
    });

    it("refuses a draft length outside 0..8", async () => {
      await expect(engine.complete(prompt, { maxTokens: 2, spec: 9 })).rejects.toThrow(/spec 9: expected an integer draft length in 0\.\.8/);
      await expect(Engine.load(dir, { mem: bigBox, preset: "laptop", spec: -1 })).rejects.toThrow(/spec -1/);
    });
  });
}
