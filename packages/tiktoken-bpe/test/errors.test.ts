// Bad input gets a typed error that names what is wrong: rank files, special maps, options.
import { describe, expect, it } from "vitest";
import { parseRanks, Tokenizer, TokenizerError, VocabularyError, CL100K_PATTERN, getEncoding } from "../src/index.js";
import { backends } from "./helpers.js";

/** A valid rank file: the 256 single bytes plus a few merges. */
function byteRanks(extra: string[] = []): string {
  const lines: string[] = [];
  for (let b = 0; b < 256; b++) lines.push(`${Buffer.from([b]).toString("base64")} ${b}`);
  extra.forEach((t, i) => lines.push(`${Buffer.from(t).toString("base64")} ${256 + i}`));
  return lines.join("\n") + "\n";
}

describe("rank files", () => {
  it("parse: \\r\\n, blank lines, tabs", () => {
    const v = parseRanks(Buffer.from(byteRanks(["ab"]).replace(/\n/g, "\r\n") + "\n\n"));
    expect(v.ranks.length).toBe(257);
  });
  it("errors name the line and the problem", () => {
    expect(() => parseRanks(Buffer.from("YQ== 0\nYg==\n"), "f.tiktoken")).toThrow(/f.tiktoken, line 2: expected `<base64 token> <rank>`/);
    expect(() => parseRanks(Buffer.from("Y*== 0\n"), "f")).toThrow(/line 1: invalid base64 character "\*"/);
    expect(() => parseRanks(Buffer.from("YQ 0\n"), "f")).toThrow(/line 1: the token is not canonical base64/);
    expect(() => parseRanks(Buffer.from("YQ== x\n"), "f")).toThrow(/line 1: expected/);
    expect(() => parseRanks(Buffer.from("YQ== 99999999999\n"), "f")).toThrow(/line 1: rank is larger/);
    expect(() => parseRanks(Buffer.from(""), "f")).toThrow(/f: no tokens/);
    expect(() => parseRanks(Buffer.from(byteRanks() + "YWI= 5\n"), "f")).toThrow(/rank 5 appears twice/);
  });
  for (const backend of backends) {
    it(`duplicate token bytes and missing single bytes are refused (${backend})`, () => {
      expect(() => new Tokenizer({ ranks: byteRanks(["ab", "ab"]), pattern: CL100K_PATTERN, backend })).toThrow(/same bytes as rank/);
      const noZero = byteRanks().replace(/^AA== 0\n/, "");
      expect(() => new Tokenizer({ ranks: noZero, pattern: CL100K_PATTERN, backend })).toThrow(/byte 0x00 has no token/);
    });
  }
});

describe("tokenizer options", () => {
  it("special maps and encode options are checked", () => {
    const ranks = byteRanks(["ab"]);
    expect(() => new Tokenizer({ ranks, pattern: CL100K_PATTERN, specialTokens: { "<s>": 5 } })).toThrow(/id 5 of "<s>" is also a BPE rank/);
    expect(() => new Tokenizer({ ranks, pattern: CL100K_PATTERN, specialTokens: { "<s>": 300, "</s>": 300 } })).toThrow(/id 300 is used twice/);
    expect(() => new Tokenizer({ ranks, pattern: CL100K_PATTERN, specialTokens: { "<s>": -1 } })).toThrow(VocabularyError);
    expect(() => new Tokenizer({ ranks, pattern: "" })).toThrow(/pattern/);
    const tok = new Tokenizer({ ranks, pattern: CL100K_PATTERN, specialTokens: { "<s>": 300 } });
    expect(() => tok.encode("x", { allowedSpecial: ["<nope>"] })).toThrow(/"<nope>", which is not a special token/);
    expect(() => tok.encode("x", { allowedSpecial: "some" as "all" })).toThrow(TokenizerError);
    expect(() => tok.encode(5 as unknown as string)).toThrow(/text must be a string/);
    expect(() => tok.encode("x", { mode: "hf" as "kimi-hf" })).toThrow(/mode must be/);
    expect(Array.from(tok.encode("ab<s>", { allowedSpecial: "all" }))).toEqual([256, 300]);
    expect(tok.nVocab).toBe(301);
    expect(() => getEncoding("p50k_base" as "cl100k_base")).toThrow(/unknown encoding/);
    expect(() => getEncoding("cl100k_base", { ranksPath: "/nonexistent.tiktoken" })).toThrow(/cannot read/);
  });
});
