/**
 * trainBpe: the ranks it writes load in the `tiktoken` npm package (WASM of tiktoken's Rust core)
 * and in ours, and both encode held-out text to identical ids; any bytes round-trip; the result is
 * deterministic; the documented tie-break and merge order hold on hand-checked inputs.
 */
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { Tiktoken } from "tiktoken/lite";
import { describe, expect, it } from "vitest";
import { byteRankOrder, KIMI_PATTERN, kimiTokenizerConfig, loadKimiTokenizer, O200K_PATTERN, rankFileText, Tokenizer, trainBpe } from "../src/index.js";
import { backends, dataDir, rng } from "./helpers.js";
import { tmpdir } from "node:os";

const enPath = join(dataDir, "corpus", "en.txt");
const hasEn = existsSync(enPath);
if (!hasEn) console.warn(`[tiktoken-bpe] trainBpe corpus tests use the built-in sample: no ${enPath} (set K3_TEST_DATA)`);

// A built-in sample (used alone when the corpus is absent): prose, code, digits, Chinese, emoji.
const SAMPLE = [
  "The borrow checker compares scopes to determine whether all borrows are valid. ",
  "fn main() {\n    let mut v = vec![1, 2, 3];\n    for i in &mut v { *i += 50; }\n    println!(\"{:?}\", v);\n}\n",
  "Ownership is a set of rules that govern how a Rust program manages memory. It's 2026; we're here. ",
  "所有权是一组规则，管理 Rust 程序如何管理内存。 Emoji 🦀🦀 and numbers 12345 6789. ",
].join("").repeat(20);

function corpus(): { train: string; heldOut: string } {
  if (!hasEn) return { train: SAMPLE, heldOut: "Borrowing rules: one mutable reference or any number of immutable ones. 中文 🦀 x = 42;\n" };
  const text = readFileSync(enPath, "utf8");
  const cut = Math.floor(text.length * 0.9);
  return { train: text.slice(0, cut), heldOut: text.slice(cut) };
}

describe("trainBpe", () => {
  const { train, heldOut } = corpus();
  const vocabSize = hasEn ? 4096 : 400;
  const t0 = performance.now();
  const trained = trainBpe(train, { vocabSize, specials: "k3" });
  const seconds = (performance.now() - t0) / 1000;
  const rankText = rankFileText(trained.tokens);

  it("byte-level: ranks 0..255 are the single bytes in GPT-2 order, then merges of two earlier tokens", () => {
    expect(trained.tokens.length).toBe(vocabSize);
    const order = byteRankOrder();
    expect(new Set(order).size).toBe(256);
    expect(order[0]).toBe(0x21); // '!'
    for (let r = 0; r < 256; r++) expect(Array.from(trained.tokens[r])).toEqual([order[r]]);
    const known = new Map<string, number>();
    trained.tokens.forEach((t, r) => known.set(Buffer.from(t).toString("latin1"), r));
    expect(known.size).toBe(vocabSize); // no duplicate bytes
    for (let r = 256; r < vocabSize; r++) {
      const s = Buffer.from(trained.tokens[r]).toString("latin1");
      let split = false;
      for (let i = 1; i < s.length && !split; i++) {
        const a = known.get(s.slice(0, i)), b = known.get(s.slice(i));
        split = a !== undefined && b !== undefined && a < r && b < r;
      }
      expect(split, `rank ${r} is a merge of two lower ranks`).toBe(true);
    }
    console.log(`[tiktoken-bpe] trainBpe: ${vocabSize} ranks from ${(Buffer.byteLength(train) / 1e6).toFixed(2)} MB in ${seconds.toFixed(2)} s`);
  });

  it.each(backends)("ranks load in tiktoken (WASM) and ours (%s): identical ids on held-out text", (backend) => {
    const specials = Object.fromEntries(trained.specialTokens);
    const oracle = new Tiktoken(rankText, specials, KIMI_PATTERN);
    const ours = new Tokenizer({ ranks: rankText, pattern: KIMI_PATTERN, specialTokens: trained.specialTokens, backend });
    try {
      const want = oracle.encode(heldOut, [], []);
      const got = ours.encode(heldOut, { disallowedSpecial: [] });
      expect(got.length).toBeGreaterThan(0);
      expect(Array.from(got)).toEqual(Array.from(want));
      expect(ours.decode(got)).toBe(heldOut);
      // Specials are the K3 layout after the ranks.
      expect(ours.specialTokenId("<|end_of_msg|>")).toBe(vocabSize + 2);
      expect(Array.from(ours.encode("<|open|>hi", { allowedSpecial: "all" }))).toEqual(Array.from(oracle.encode("<|open|>hi", "all")));
      if (hasEn) expect(Buffer.byteLength(heldOut) / got.length).toBeGreaterThan(3); // it learned something
    } finally {
      oracle.free();
    }
  });

  it("tiktoken.model + tokenizer_config.json load with loadKimiTokenizer (K3 specials)", () => {
    const dir = mkdtempSync(join(tmpdir(), "k3-bpe-"));
    try {
      writeFileSync(join(dir, "tiktoken.model"), rankText);
      writeFileSync(join(dir, "tokenizer_config.json"), JSON.stringify(kimiTokenizerConfig(trained)));
      const tok = loadKimiTokenizer(dir);
      expect(tok.nRanks).toBe(vocabSize);
      expect(tok.nVocab).toBe(vocabSize + 256);
      expect(tok.specialTokenId("[BOS]")).toBe(vocabSize);
      expect(tok.specialTokenId("[EOS]")).toBe(vocabSize + 1);
      expect(tok.specialTokenId(`<|reserved_token_${vocabSize + 6}|>`)).toBe(vocabSize + 6);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("random bytes round-trip (every byte is a rank), tiktoken agrees", () => {
    const ours = new Tokenizer({ ranks: rankText, pattern: KIMI_PATTERN });
    const oracle = new Tiktoken(rankText, {}, KIMI_PATTERN);
    const next = rng(14);
    try {
      for (let n = 0; n < 200; n++) {
        const bytes = new Uint8Array(1 + Math.floor(next() * 64)).map(() => Math.floor(next() * 256));
        const text = new TextDecoder().decode(bytes); // invalid UTF-8 becomes U+FFFD, as tiktoken sees it
        const ids = ours.encodeOrdinary(text);
        expect(Buffer.from(ours.decodeBytes(ids))).toEqual(Buffer.from(new TextEncoder().encode(text)));
        expect(Array.from(ids)).toEqual(Array.from(oracle.encode_ordinary(text)));
      }
      // Raw bytes (not via a string): each single-byte id decodes to its byte.
      for (let b = 0; b < 256; b++) expect(Array.from(ours.decodeBytes([byteRankOrder().indexOf(b)]))).toEqual([b]);
    } finally {
      oracle.free();
    }
  });

  it("deterministic: the same input gives the same rank file; text order does not matter", () => {
    const texts = [SAMPLE.slice(0, 3000), SAMPLE.slice(3000, 6000)];
    const a = rankFileText(trainBpe(texts, { vocabSize: 400 }).tokens);
    expect(rankFileText(trainBpe(texts, { vocabSize: 400 }).tokens)).toBe(a);
    expect(rankFileText(trainBpe([texts[1], texts[0]], { vocabSize: 400 }).tokens)).toBe(a);
  });

  it("merges the most frequent pair first; ties go to the lowest (first, second) ranks", () => {
    const id = (ch: string) => byteRankOrder().indexOf(ch.charCodeAt(0));
    // "ab" x3, "cd" x3, "ef" x1, no whitespace pieces: the "ab"/"cd" tie goes to the pair with the lower first rank.
    const r = trainBpe(["ab ab ab cd cd cd ef"], { vocabSize: 258, pattern: "\\S+" });
    const names = r.tokens.slice(256).map((t) => Buffer.from(t).toString());
    expect(id("a")).toBeLessThan(id("c"));
    expect(names).toEqual(["ab", "cd"]);
    // Count beats rank: "zz" x4 beats "ab" x3.
    expect(r.tokens.length).toBe(258);
    const z = trainBpe(["ab ab ab zz zz zz zz"], { vocabSize: 257, pattern: "\\S+" });
    expect(Buffer.from(z.tokens[256]).toString()).toBe("zz");
    // A merge whose bytes already exist reuses the token and adds no rank: "abc" from (ab, c) and (a, bc).
    const dup = trainBpe(["abc abc abc bc bc bc bc bc bc ab ab ab ab ab ab ab ab"], { vocabSize: 259, pattern: "\\S+" });
    expect(dup.tokens.slice(256).map((t) => Buffer.from(t).toString())).toEqual(["ab", "bc", "abc"]);
  });

  it("the pattern bounds merges (no token crosses a piece), other patterns work, bad sizes are refused", () => {
    // Under Kimi's pattern a space is only a piece's first byte or part of a whitespace run.
    for (const t of trained.tokens.slice(256)) {
      const s = Buffer.from(t).toString("latin1");
      if (s.indexOf(" ", 1) < 0) continue;
      expect(/^\s+$/.test(s), `token ${JSON.stringify(s)} crosses a piece`).toBe(true);
    }
    expect(trained.tokens.slice(256).some((t) => t[0] === 0x20 && t.length > 2)).toBe(true);
    const o = trainBpe(SAMPLE, { vocabSize: 400, pattern: O200K_PATTERN });
    expect(o.tokens.length).toBe(400);
    expect(() => trainBpe("ab", { vocabSize: 300 })).toThrow(/no pair left/);
    expect(() => trainBpe("ab", { vocabSize: 100 })).toThrow(/vocabSize/);
  });

  it("a few MB train in seconds (incremental counts)", () => {
    if (hasEn) expect(seconds).toBeLessThan(30);
  });
});
