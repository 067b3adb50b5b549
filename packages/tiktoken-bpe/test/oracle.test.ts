// Byte-exactness against tiktoken@1.0.22 (WASM build of tiktoken's Rust core): the adversarial
// list of docs/formats.md §2.3 and a bounded differential fuzz, for every encoding and backend.
import { describe, expect, it } from "vitest";
import { backends, cjkString, hasKimi, hostileString, oracle, rng, tokenizer } from "./helpers.js";
import { ADVERSARIAL } from "./adversarial.js";

const encodings = ["cl100k_base", "o200k_base", "kimi"] as const;
const FUZZ = Number(process.env.K3_FUZZ_CASES ?? 5000);
const CJK_FUZZ = Number(process.env.K3_CJK_FUZZ_CASES ?? 1500);

for (const enc of encodings) {
  for (const backend of backends) {
    const run = enc === "kimi" && !hasKimi ? describe.skip : describe;
    run(`${enc} (${backend}) vs tiktoken`, () => {
      it("adversarial inputs give the oracle's ids", () => {
        const tok = tokenizer(enc, backend);
        const o = oracle(enc);
        let checked = 0;
        for (const text of ADVERSARIAL) {
          expect(Array.from(tok.encodeOrdinary(text)), JSON.stringify(text)).toEqual(Array.from(o.encode_ordinary(text)));
          checked++;
        }
        expect(checked).toBe(ADVERSARIAL.length);
      });

      it(`differential fuzz: ${FUZZ} hostile strings, zero mismatches`, () => {
        const tok = tokenizer(enc, backend);
        const o = oracle(enc);
        const next = rng(0x5eed + enc.length);
        const bad: string[] = [];
        for (let k = 0; k < FUZZ; k++) {
          const s = hostileString(next, 12);
          const a = tok.encodeOrdinary(s);
          const b = Array.from(o.encode_ordinary(s));
          if (a.length !== b.length || a.some((x, i) => x !== b[i])) bad.push(JSON.stringify(s));
        }
        expect(bad.slice(0, 10)).toEqual([]);
      });

      it(`differential fuzz: ${CJK_FUZZ} Han-heavy strings up to 80 chars, zero mismatches`, () => {
        const tok = tokenizer(enc, backend);
        const o = oracle(enc);
        const next = rng(0xc1c + enc.length);
        const bad: string[] = [];
        for (let k = 0; k < CJK_FUZZ; k++) {
          const s = cjkString(next, 80);
          const a = tok.encodeOrdinary(s);
          const b = Array.from(o.encode_ordinary(s));
          if (a.length !== b.length || a.some((x, i) => x !== b[i])) bad.push(JSON.stringify(s));
        }
        expect(bad.slice(0, 10)).toEqual([]);
      });

      it("special tokens: allowed, disallowed (throws), ignored", () => {
        const tok = tokenizer(enc, backend);
        const o = oracle(enc);
        const names = [...tok.specialTokens.keys()];
        const special = names[0];
        const texts = [`a${special}b`, `${special}`, `x  ${special}`, `${special}${special}`, `<|im_<${special}end|>`, `${special.slice(0, -1)}`];
        for (const t of texts) {
          expect(Array.from(tok.encode(t, { allowedSpecial: "all" })), t).toEqual(Array.from(o.encode(t, "all")));
          expect(Array.from(tok.encode(t, { allowedSpecial: [special] })), t).toEqual(Array.from(o.encode(t, [special])));
          expect(Array.from(tok.encode(t, { disallowedSpecial: [] })), t).toEqual(Array.from(o.encode(t, [], [])));
          expect(Array.from(tok.encodeWithSpecialTokens(t))).toEqual(Array.from(o.encode(t, "all")));
          const oracleError = (() => {
            try {
              o.encode(t);
              return undefined;
            } catch (err) {
              return String((err as Error).message ?? err);
            }
          })();
          if (oracleError !== undefined) expect(() => tok.encode(t)).toThrow(oracleError);
          else expect(Array.from(tok.encode(t))).toEqual(Array.from(o.encode(t)));
        }
      });

      it("decode(encode(x)) == x (lone surrogates become U+FFFD)", () => {
        const tok = tokenizer(enc, backend);
        for (const text of ADVERSARIAL) {
          const expected = Buffer.from(text, "utf8").toString("utf8"); // WTF-16 → UTF-8 with U+FFFD
          expect(tok.decode(tok.encodeOrdinary(text))).toBe(expected);
        }
      });
    });
  }
}
