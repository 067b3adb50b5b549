// The two merge strategies (tiktoken's linear scan, used under 100 bytes, and the heap used at
// 100 bytes and above) give identical output, in the native core and in the TypeScript fallback.
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { describe, expect, it } from "vitest";
import { heapMergeForTest, linearMergeForTest } from "../src/bpe.js";
import { getEncoding, O200K_PATTERN, Tokenizer } from "../src/index.js";
import { NativeBackend } from "../src/native-backend.js";
import { nativeBinding } from "../src/native.js";
import { Family } from "../src/pretokenize.js";
import { RankTable } from "../src/rank-table.js";
import { readRankFile } from "../src/ranks.js";
import { backends, rng } from "./helpers.js";

const require = createRequire(import.meta.url);
const ranksPath = join(dirname(require.resolve("gpt-tokenizer")), "..", "data", "o200k_base.tiktoken");
const vocab = readRankFile(ranksPath);
const table = new RankTable(vocab);

/** Pieces of 2..100 bytes from small alphabets, so that many merges and rank ties happen. */
function pieces(count: number): Uint8Array[] {
  const next = rng(42);
  const alphabets = ["ab", "abcdefgh", "aaaaaaab", "the quick brown fox ", "中文字", "😀x", "\u0000\u00ff", "    \n"];
  const out: Uint8Array[] = [];
  for (let i = 0; i < count; i++) {
    const a = [...alphabets[i % alphabets.length]];
    const len = 2 + Math.floor(next() * 98);
    let s = "";
    while (Buffer.byteLength(s) < len) s += a[Math.floor(next() * a.length)];
    out.push(new TextEncoder().encode(s).subarray(0, 100));
  }
  return out;
}

const ts = (p: Uint8Array, heap: boolean) => {
  const out: number[] = [];
  (heap ? heapMergeForTest : linearMergeForTest)(table, p, 0, p.length, out);
  return out;
};

describe("merge strategies agree", () => {
  it("TypeScript: linear == heap on 800 pieces", () => {
    for (const p of pieces(800)) expect(ts(p, true)).toEqual(ts(p, false));
  });

  (backends.includes("native") ? it : it.skip)("native: linear == heap == TypeScript on 800 pieces", () => {
    const binding = nativeBinding();
    if (!binding) throw new Error("native addon expected");
    const nb = new NativeBackend(binding, vocab, Family.O200k, []);
    for (const p of pieces(800)) {
      const lin = nb.mergePiece(p, false);
      expect(nb.mergePiece(p, true)).toEqual(lin);
      expect(lin).toEqual(ts(p, false));
    }
    expect(() => binding.mergePiece({}, new Uint8Array(2), 0, new Uint32Array(2))).toThrow(/tokenizer handle/);
    expect(() => nb.mergePiece(new Uint8Array(101), false)).toThrow(/at most 100 bytes/);
  });

  it("backends agree on long mixed pieces", () => {
    const text = "x".repeat(150) + "y".repeat(99) + "ab".repeat(300) + "中文".repeat(200);
    const a = Array.from(getEncoding("o200k_base", { backend: "typescript" }).encodeOrdinary(text));
    for (const b of backends) expect(Array.from(getEncoding("o200k_base", { backend: b }).encodeOrdinary(text))).toEqual(a);
  });
});

describe("large ranks", () => {
  it("ranks near 2^31 merge identically in both backends (heap keys stay exact)", () => {
    const base = 2 ** 31 - 1000;
    const lines: string[] = [];
    for (let b = 0; b < 256; b++) lines.push(`${Buffer.from([b]).toString("base64")} ${base + b}`);
    ["ab", "abab", "ba", "abababab", "bb"].forEach((t, i) => lines.push(`${Buffer.from(t).toString("base64")} ${base - 10 + i}`));
    const text = "ab".repeat(120) + "b" + "ab".repeat(7);
    const results = backends.map((backend) =>
      Array.from(new Tokenizer({ ranks: lines.join("\n"), pattern: O200K_PATTERN, backend }).encodeOrdinary(text)),
    );
    for (const r of results) expect(r).toEqual(results[0]);
    expect(results[0][0]).toBe(base - 10 + 3); // "abababab" first
  });
});
