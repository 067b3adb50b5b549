// Pathological input: 1 MB without whitespace and long runs must encode quickly (no quadratic
// merge, no backtracking blow-up, no stack overflow) and give the same ids as the oracle where the
// oracle can finish (its WASM core predates the heap merge and is quadratic on long pieces).
import { describe, expect, it } from "vitest";
import { backends, hasKimi, oracle, rng, tokenizer } from "./helpers.js";

const MB = 1 << 20;
const LIMIT_MS = Number(process.env.K3_LONG_LIMIT_MS ?? 3000); // generous: the machine is shared

function randomFrom(alphabet: string, n: number, seed: number): string {
  const next = rng(seed);
  let s = "";
  for (let i = 0; i < n; i++) s += alphabet[Math.floor(next() * alphabet.length)];
  return s;
}

const base64Alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
const inputs: Array<[string, () => string]> = [
  ["1 MB of 'a'", () => "a".repeat(MB)],
  ["1 MB of random letters", () => randomFrom("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ", MB, 1)],
  ["1 MB of '_'", () => "_".repeat(MB)],
  ["1 MB of '^'", () => "^".repeat(MB)],
  ["1 MB base64 blob", () => randomFrom(base64Alphabet, MB, 2)],
  ["1 MB of spaces", () => " ".repeat(MB)],
  ["1 MB of newlines", () => "\n".repeat(MB)],
  ["1 MB of digits", () => randomFrom("0123456789", MB, 3)],
  ["100k emoji", () => "😀".repeat(100_000)],
  ["1 MB of U+3000", () => "\u3000".repeat(MB / 3)],
  ["minified-JS-like", () => randomFrom("abc(){};=+.,'\"[]<>!&|?:0123", MB, 4)],
];

for (const backend of backends) {
  for (const enc of ["cl100k_base", "o200k_base", "kimi"] as const) {
    if (backend === "typescript" && enc !== "o200k_base") continue; // the fallback: o200k only
    (enc === "kimi" && !hasKimi ? describe.skip : describe)(`long input, ${enc} (${backend})`, () => {
      for (const [name, make] of inputs) {
        // Full list on o200k (largest vocabulary); a subset elsewhere and on the slower TS fallback
        // (×4 time limit), to keep `pnpm test` short. The bench runs everything.
        const subset = ["1 MB of 'a'", "1 MB base64 blob"];
        if ((backend === "typescript" || enc !== "o200k_base") && !subset.includes(name)) continue;
        if (backend === "typescript" && !["1 MB of 'a'", "100k emoji"].includes(name)) continue;
        it(`${name}: under ${backend === "native" ? LIMIT_MS : LIMIT_MS * 4} ms, decode round-trips`, () => {
          const tok = tokenizer(enc, backend);
          const text = make();
          const t0 = performance.now();
          const ids = tok.encodeOrdinary(text);
          const ms = performance.now() - t0;
          expect(ms).toBeLessThan(backend === "native" ? LIMIT_MS : LIMIT_MS * 4);
          expect(tok.decode(ids)).toBe(text);
          expect(tok.countTokens(text, { disallowedSpecial: [] })).toBe(ids.length);
        });
      }
      // Once per encoding (first backend): the oracle's WASM merge is quadratic on these pieces.
      if (backend === backends[0]) it("same ids as the oracle on 8k-byte pieces (long enough for the heap merge)", () => {
        const tok = tokenizer(enc, backend);
        for (const text of ["a".repeat(8_000), randomFrom("abcdefgh", 8_000, 5), " ".repeat(8_000) + "x", randomFrom(base64Alphabet, 8_000, 6)]) {
          expect(Array.from(tok.encodeOrdinary(text))).toEqual(Array.from(oracle(enc).encode_ordinary(text)));
        }
      });
    });
  }
}
