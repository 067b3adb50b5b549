// JSON mode's token mask (json-mask.ts) on small vocabularies: the trie walk (with the in-string
// shortcut) gives exactly the brute-force mask, the budget closes every value within max_tokens,
// and random logits under the mask always give text JSON.parse takes.
import { describe, expect, it } from "vitest";
import { ANY_OBJECT, initialState, minCompletion, stepBytes, type JsonState, type SchemaNode } from "../src/json-grammar.js";
import { allowedTokens, JsonConstraint, JsonVocab, staysInString } from "../src/json-mask.js";
import { compileSchema } from "../src/json-schema.js";
import { Pcg32, Sampler } from "../src/sampler.js";

const enc = new TextEncoder();
const dec = new TextDecoder("utf-8", { fatal: true });

/** Every single byte, plus multi-byte pieces a BPE vocabulary has; id 3 is a special (null). */
function smallVocab(): JsonVocab {
  const pieces = ['{"', '"}', '":', '",', '": "', ' {', '{}', '[]', ' [', '],', '},', 'true', 'false', 'null', ' null', '12', '0.', '.5', 'e-', '-1', '\\n', '\\u00', 'hello', ' world', 'a"', '"a', '"name', '":"', 'x"}', '\n  ', '  ', 'ab\\', '"}]', 'é', '日本', '🎉'];
  const tokens: (Uint8Array | null)[] = [];
  for (let b = 0; b < 256; b++) tokens.push(Uint8Array.of(b));
  tokens[3] = null;
  for (const p of pieces) tokens.push(enc.encode(p));
  tokens.push(Uint8Array.of(0xe6, 0x97)); // half of 日
  tokens.push(Uint8Array.of(0xa5, 0x22)); // its last byte and a quote
  return new JsonVocab(tokens);
}

function bruteForce(vocab: JsonVocab, state: JsonState, budget: number): Uint8Array {
  const out = new Uint8Array(vocab.size);
  vocab.tokens.forEach((t, id) => {
    if (!t) return;
    const s = stepBytes(state, t);
    if (s && minCompletion(s) <= budget) out[id] = 1;
  });
  return out;
}

const SCHEMA = compileSchema({ type: "object", properties: { name: { type: "string" }, n: { type: "integer" }, tags: { type: "array", items: { enum: ["a", "bc"] } } }, required: ["name", "n"] });

describe("token mask", () => {
  const vocab = smallVocab();
  it("equals the brute-force mask at every prefix of several texts, with and without a budget", () => {
    const cases: [SchemaNode, string][] = [
      [ANY_OBJECT, '{"a": [1, -2.5e3, true, null, {"b": "x\\n\\u00e9 日本 🎉"}], "c": {}}'],
      [SCHEMA, '{"name": "hello world", "n": -12, "tags": ["a", "bc"]}'],
    ];
    let checked = 0;
    for (const [schema, text] of cases) {
      const b = enc.encode(text);
      for (let i = 0; i < b.length; i++) {
        const state = stepBytes(initialState(schema), b.subarray(0, i))!;
        for (const budget of [Infinity, minCompletion(state) + 3, minCompletion(state) + 2, minCompletion(state) + 1, minCompletion(state)]) {
          const got = allowedTokens(vocab, state, budget).allowed;
          expect(Array.from(got), `${text.slice(0, i)} budget ${budget}`).toEqual(Array.from(bruteForce(vocab, state, budget)));
          checked++;
        }
      }
    }
    expect(checked).toBeGreaterThan(200);
  });

  it("sorts tokens that stay in a string", () => {
    for (const [s, ok] of [["hello", true], ["a\"", false], ["ab\\", false], ["\n", false], ["é", true], ["日本", true]] as const) expect(staysInString(enc.encode(s)), s).toBe(ok);
    expect(staysInString(Uint8Array.of(0xe6, 0x97))).toBe(true);
    expect(staysInString(Uint8Array.of(0xa5))).toBe(false);
    expect(staysInString(Uint8Array.of(0xe0, 0x80))).toBe(false);
  });

  it("random logits under the mask always give JSON within max_tokens, the special id is never drawn", () => {
    for (const [schema, label] of [[ANY_OBJECT, "json_object"], [SCHEMA, "schema"]] as const) {
      for (let seed = 0; seed < 40; seed++) {
        // Enough for the shortest value in single-byte tokens, up to 40 more.
        const maxTokens = minCompletion(initialState(schema)) + (seed % 5) * 10;
        const rng = new Pcg32(seed, 3);
        const sampler = new Sampler({ temperature: 1, seed }, 0);
        const c = new JsonConstraint(vocab, schema);
        const ids: number[] = [];
        let complete = false;
        for (let i = 0; i < maxTokens && !complete; i++) {
          const row = new Float32Array(vocab.size + 2).map(() => (rng.nextUnit() - 0.5) * 8);
          c.mask(row, maxTokens - i);
          expect(row[3]).toBe(-Infinity);
          expect(row[vocab.size]).toBe(-Infinity);
          const id = sampler.sample(row);
          ids.push(id);
          complete = c.accept(id);
        }
        const text = dec.decode(Uint8Array.from(ids.flatMap((id) => Array.from(vocab.tokens[id]!))));
        expect(complete, `${label} seed ${seed}: ${text}`).toBe(true);
        const v = JSON.parse(text);
        expect(typeof v).toBe("object");
        if (schema === SCHEMA) {
          expect(typeof v.name).toBe("string");
          expect(Number.isInteger(v.n)).toBe(true);
          for (const k of Object.keys(v)) expect(["name", "n", "tags"]).toContain(k);
        }
      }
    }
  });
});
