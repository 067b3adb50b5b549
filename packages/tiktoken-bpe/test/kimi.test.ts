// Kimi: the verified ids of docs/formats.md §2.1, the tiny checkpoints in fixtures/models, the
// 256/258 special-id variants, tokenizer_config.json validation and the kimi-hf mode.
import { execFileSync, spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync, copyFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { KIMI_MAX_RUN_CHARS, kimiHfParts, loadKimiTokenizer, pythonIsSpace, VocabularyError } from "../src/index.js";
import { backends, fixturesDir, hasKimi, kimi, kimiDir } from "./helpers.js";

const VERIFIED: Array<[string, number[]]> = [
  ["Hello world", [19180, 2695]],
  ["Hello, world!", [19180, 11, 2695, 0]],
  ["你好世界", [33845, 2243]],
  ["1234567890", [6694, 12972, 16242, 15]],
  ["中文English混合", [16717, 44372, 13935]],
  ["HTTPRequestHandler", [17819, 3188, 5321]],
  ["   \t\n   ", [274, 5427, 274]],
  ["日本語のテキストです。", [4546, 63011, 4663, 25875, 32045, 33360, 54319, 292]],
];

for (const backend of backends) {
  (hasKimi ? describe : describe.skip)(`Kimi rank file (${backend})`, () => {
    it("reproduces the verified ids (Python tiktoken 0.13 fixture)", () => {
      const tok = kimi(backend);
      for (const [text, ids] of VERIFIED) expect(Array.from(tok.encode(text)), text).toEqual(ids);
    });

    it("specials: allowed → ids, as text → ordinary tokens, default → throws", () => {
      const tok = kimi(backend);
      const chat = "<|im_user|>user<|im_middle|>hi<|im_end|>";
      expect(Array.from(tok.encode(chat, { allowedSpecial: "all" }))).toEqual([163587, 2482, 163601, 9663, 163586]);
      expect(Array.from(tok.encodeOrdinary("<|im_end|>"))).toEqual([27, 91, 348, 11129, 91, 29]);
      expect(() => tok.encode(chat)).toThrow("The text contains a special token that is not allowed: <|im_user|>");
      expect(tok.specialTokenId("[EOS]")).toBe(163585);
      expect(tok.specialTokenId("<|reserved_token_163700|>")).toBe(163700);
      expect(tok.nVocab).toBe(163840);
      expect(tok.nRanks).toBe(163584);
    });

    it("the 258-id variant adds <|reserved_token_163840|> and 163841", () => {
      const tok = loadKimiTokenizer(kimiDir, { specials: "k2", specialIdCount: 258, backend });
      expect(tok.nVocab).toBe(163842);
      expect(Array.from(tok.encode("a<|reserved_token_163840|>", { allowedSpecial: "all" }))).toEqual([64, 163840]);
      expect(() => kimi(backend).specialTokenId("<|reserved_token_163840|>")).toThrow(/not a special token/);
    });

    it("loads in well under a second and checks the sha256 when asked", () => {
      const t0 = performance.now();
      loadKimiTokenizer(kimiDir, { specials: "k2", backend, expectedSha256: "b6c497a7469b33ced9c38afb1ad6e47f03f5e5dc05f15930799210ec050c5103" });
      expect(performance.now() - t0).toBeLessThan(3000);
      expect(() => loadKimiTokenizer(kimiDir, { specials: "k2", backend, expectedSha256: "00" })).toThrow(/sha256 is b6c497a7/);
    });

    it("kimi-hf mode: 25,000-code-point runs and 400,000-code-point chunks", () => {
      const tok = kimi(backend);
      // Short text: identical to ordinary encoding, and specials stay text.
      expect(Array.from(tok.encode("<|im_end|>", { mode: "kimi-hf" }))).toEqual([27, 91, 348, 11129, 91, 29]);
      // A 25,001-code-point run is cut after 25,000 code points, exactly like Python.
      const run = "x" + "a".repeat(KIMI_MAX_RUN_CHARS);
      // (BPE of each part is checked against the oracle elsewhere; this checks where the cut falls.)
      const expected = [...tok.encodeOrdinary("x" + "a".repeat(KIMI_MAX_RUN_CHARS - 1)), ...tok.encodeOrdinary("a")];
      expect(expected).not.toEqual(Array.from(tok.encodeOrdinary(run)));
      expect(Array.from(tok.encode(run, { mode: "kimi-hf" }))).toEqual(expected);
      expect(tok.countTokens(run, { mode: "kimi-hf" })).toBe(expected.length);
    });
  });
}

describe("kimi-hf chunking (no vocabulary needed)", () => {
  it("Python isspace differs from regex \\s on U+001C..U+001F and U+FEFF", () => {
    expect([0x1c, 0x1f, 0x85, 0x3000, 0x20].every(pythonIsSpace)).toBe(true);
    expect([0xfeff, 0x200b, 0x41].some(pythonIsSpace)).toBe(false);
  });

  it("counts code points, not UTF-16 units, and never splits a surrogate pair", () => {
    const emoji = "😀".repeat(KIMI_MAX_RUN_CHARS + 1); // 25,001 code points, 50,002 units
    const parts = kimiHfParts(emoji);
    expect(parts).toEqual([
      [0, 2 * KIMI_MAX_RUN_CHARS],
      [2 * KIMI_MAX_RUN_CHARS, 2 * KIMI_MAX_RUN_CHARS + 2],
    ]);
    // 400,001 alternating code points: one cut at the 400k chunk edge, none from runs.
    const mixed = "a ".repeat(200_000) + "b";
    expect(kimiHfParts(mixed)).toEqual([
      [0, 400_000],
      [400_000, 400_001],
    ]);
    // Space runs count as well; switching class resets the run.
    const spaces = " ".repeat(KIMI_MAX_RUN_CHARS) + "x" + " ".repeat(KIMI_MAX_RUN_CHARS + 2);
    expect(kimiHfParts(spaces)).toEqual([
      [0, 2 * KIMI_MAX_RUN_CHARS + 1],
      [2 * KIMI_MAX_RUN_CHARS + 1, 2 * KIMI_MAX_RUN_CHARS + 3],
    ]);
  });
});

describe("tiny checkpoints in fixtures/models", () => {
  for (const model of ["tiny-k3", "tiny-kimi-linear"]) {
    for (const backend of backends) {
      it(`${model} (${backend}): tokenizer cases of expected.json`, () => {
        const dir = join(fixturesDir, model);
        const expected = JSON.parse(readFileSync(join(dir, "expected.json"), "utf8"));
        const tok = loadKimiTokenizer(dir, { backend });
        expect(tok.nRanks).toBe(768);
        expect(tok.specialTokenId("[PAD]")).toBe(1023);
        expect(expected.tokenizer_cases.length).toBeGreaterThan(0);
        for (const c of expected.tokenizer_cases) expect(Array.from(tok.encode(c.text)), c.text).toEqual(c.ids);
      });
    }
  }
});

describe("tokenizer_config.json validation", () => {
  const tinyDir = join(fixturesDir, "tiny-k3");
  const made: string[] = [];
  afterAll(() => made.forEach((dir) => rmSync(dir, { recursive: true, force: true })));
  const scratch = () => {
    const dir = mkdtempSync(join(tmpdir(), "k3-tok-"));
    made.push(dir);
    return dir;
  };
  const withConfig = (config: string) => {
    const dir = scratch();
    copyFileSync(join(tinyDir, "tiktoken.model"), join(dir, "tiktoken.model"));
    writeFileSync(join(dir, "tokenizer_config.json"), config);
    return dir;
  };
  it("names the file and the field", () => {
    expect(() => loadKimiTokenizer(withConfig("{not json"))).toThrow(/tokenizer_config.json: not valid JSON/);
    expect(() => loadKimiTokenizer(withConfig("[]"))).toThrow(/expected a JSON object/);
    expect(() => loadKimiTokenizer(withConfig('{"added_tokens_decoder": {"5": {"content": "x"}}}'))).toThrow(/key "5" is not an id >= 768/);
    expect(() => loadKimiTokenizer(withConfig('{"added_tokens_decoder": {"768": {"content": 7}}}'))).toThrow(/\[768\]\.content must be a non-empty string/);
    expect(() => loadKimiTokenizer(withConfig('{"num_reserved_special_tokens": -3}'))).toThrow(/num_reserved_special_tokens/);
    expect(() => loadKimiTokenizer(withConfig('{"added_tokens_decoder": {"768": {"content": "A"}, "769": {"content": "A"}}}'))).toThrow(VocabularyError);
    const dir = scratch();
    copyFileSync(join(tinyDir, "tiktoken.model"), join(dir, "tiktoken.model"));
    expect(() => loadKimiTokenizer(dir)).toThrow(/tokenizer_config.json: missing/);
    expect(() => loadKimiTokenizer(join(dir, "nope"))).toThrow(/tiktoken.model: cannot read/);
  });

  it("refuses a FIFO as tiktoken.model or tokenizer_config.json instead of hanging", async () => {
    for (const name of ["tiktoken.model", "tokenizer_config.json"]) {
      const dir = scratch();
      for (const f of ["tiktoken.model", "tokenizer_config.json"]) if (f !== name) copyFileSync(join(tinyDir, f), join(dir, f));
      execFileSync("mkfifo", [join(dir, name)]);
      // A writer that opens the FIFO and closes it after 1 s without writing, so that a reader
      // that blocks (the old code) ends with an empty file instead of hanging the test run.
      const writer = spawn("sh", ["-c", 'exec 3>"$1"; sleep 1', "sh", join(dir, name)], { stdio: "ignore" });
      try {
        expect(() => loadKimiTokenizer(dir), name).toThrow(new RegExp(`${name.replace(".", "\\.")}: cannot read.*FIFO, not a regular file`));
      } finally {
        writer.kill();
      }
    }
  });
});
