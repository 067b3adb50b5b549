// JSON mode around K3's channels (json-mode.ts): the incremental channel tracker agrees with
// parseK3Output, and a chat with thinking thinks freely, is switched to the response channel in
// time, and ends with a value of the schema.
import { loadKimiTokenizer, parseK3Output } from "@k3/tiktoken-bpe";
import { describe, expect, it } from "vitest";
import { ANY_OBJECT } from "../src/json-grammar.js";
import { jsonConstraint, K3Channels, ThinkThenJson } from "../src/json-mode.js";
import { Pcg32, Sampler } from "../src/sampler.js";
import { TINY_K3, rawConfig } from "./helpers.js";

const tok = loadKimiTokenizer(TINY_K3, { specials: "k3" });
const vocabSize: number = rawConfig(TINY_K3).text_config?.vocab_size ?? rawConfig(TINY_K3).vocab_size;
const sp = (n: string) => tok.specialTokenId(n);
const words = (s: string) => Array.from(tok.encodeOrdinary(s));

describe("K3Channels", () => {
  it("puts each id in the channel parseK3Output puts its text in, on 300 random replies", () => {
    const rng = new Pcg32(12, 1);
    const pieces = [
      words("hello"), words(" world"), words("{\"a\": 1}"), [sp("<|close|>"), ...words("think"), sp("<|sep|>")], [sp("<|open|>"), ...words("response"), sp("<|sep|>")],
      [sp("<|open|>"), ...words("tools"), sp("<|sep|>")], [sp("<|close|>"), ...words("tools"), sp("<|sep|>")], [sp("<|close|>"), ...words("response"), sp("<|sep|>")], [sp("<|end_of_msg|>")], [sp("<|open|>")],
    ];
    for (let trial = 0; trial < 300; trial++) {
      const thinking = trial % 2 === 0;
      const ids: number[] = [];
      for (let k = 0; k < 8; k++) ids.push(...pieces[Math.floor(rng.nextUnit() * pieces.length)]);
      const ch = new K3Channels(tok, thinking);
      const think: number[] = [];
      const response: number[] = [];
      for (const id of ids) {
        const c = ch.push(id);
        if (c === "think") think.push(id);
        if (c === "response") response.push(id);
        // parseK3Output stops reading at the end of the message.
        if (id === sp("<|end_of_msg|>")) break;
      }
      const out = parseK3Output(tok, ids, { thinking });
      expect(tok.decode(response), JSON.stringify(ids)).toBe(out.content);
      if (out.reasoning !== null) expect(tok.decode(think)).toBe(out.reasoning);
    }
  });
});

describe("JSON mode after thinking", () => {
  it("thinks, is switched to the response channel in time, and ends with a JSON object, for 30 random-logit runs", () => {
    for (let seed = 0; seed < 30; seed++) {
      const maxTokens = 20 + seed;
      const c = jsonConstraint(tok, vocabSize, ANY_OBJECT, true) as ThinkThenJson;
      const sampler = new Sampler({ temperature: 1, seed });
      const rng = new Pcg32(seed, 9);
      const ids: number[] = [];
      let complete = false;
      for (let i = 0; i < maxTokens && !complete; i++) {
        const row = new Float32Array(vocabSize).map(() => (rng.nextUnit() - 0.5) * 6);
        // The model would like to close the think channel early now and then.
        if (seed % 3 === 0 && i === 3) row[sp("<|close|>")] = 100;
        c.mask(row, maxTokens - i);
        const id = sampler.sample(row);
        ids.push(id);
        complete = c.accept(id);
      }
      expect(complete, `seed ${seed}`).toBe(true);
      const out = parseK3Output(tok, ids, { thinking: true });
      expect(typeof JSON.parse(out.content)).toBe("object");
      // Nothing but the one switch: no other channel, no end of message inside the think channel.
      expect(ids.filter((id) => id === sp("<|open|>"))).toHaveLength(1);
      expect(ids).not.toContain(sp("<|end_of_msg|>"));
      if (seed % 3 === 0) expect(ids.indexOf(sp("<|close|>"))).toBe(3);
    }
  });
});
