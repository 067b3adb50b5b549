// Differential fuzz against tiktoken@1.0.22: random strings from the hostile alphabet, ours
// (native) vs the oracle, per encoding; reports cases and mismatches (and the first few).
import { get_encoding } from "tiktoken";
import type { Tokenizer } from "../src/index.js";
import { cjkString } from "../test/helpers.js";

const HOSTILE = [
  "a", "B", "s", "S", "t", "T", "r", "e", "l", "L", "d", "m", "v", "x", " ", "  ", "\t", "\n", "\r", "\r\n",
  "\u00a0", "\u3000", "\u0085", "\ufeff", "\u2028", "\u1680", "\u200a", "\u001c", "!", "'", "/", ".", ",", "1", "2",
  "9", "\u0663", "\u00b2", "\uff14", "中", "日", "々", "〇", "\u3001", "ſ", "\u212a", "é", "e\u0301", "\u0301", "😀",
  "👩\u200d👧", "\ufe0f", "ʰ", "ǅ", "İ", "ı", "ก", "\u05d0", "\u0627", "\u0640", "\u200e", "カ", "한", "<|", "|>",
  "\u{11380}", "\u{10940}", "\ud83d", "\ude00", "_", "^", "\u0000", "\u00ad",
];

interface OracleLike {
  encode_ordinary(text: string): Uint32Array;
}

/** Hostile-alphabet strings (default), or Han-heavy ones (`cjk`, test/helpers.ts cjkString). */
export function runFuzz(
  cases: number,
  ours: Record<string, Tokenizer>,
  extraOracles: Record<string, OracleLike>,
  kind: "hostile" | "cjk" = "hostile",
) {
  const rows: Record<string, string | number>[] = [];
  for (const [name, tok] of Object.entries(ours)) {
    const oracle: OracleLike = extraOracles[name] ?? get_encoding(name as "cl100k_base");
    let seed = 0x9e3779b9 ^ name.length;
    const next = () => ((seed = (Math.imul(seed, 1664525) + 1013904223) >>> 0) / 4294967296);
    let mismatches = 0;
    const examples: string[] = [];
    const t0 = performance.now();
    for (let k = 0; k < cases; k++) {
      let s = "";
      if (kind === "cjk") s = cjkString(next, 80);
      else {
        const n = 1 + Math.floor(next() * 16);
        for (let i = 0; i < n; i++) s += HOSTILE[Math.floor(next() * HOSTILE.length)];
      }
      const a = tok.encodeOrdinary(s);
      const b = oracle.encode_ordinary(s);
      if (a.length !== b.length || a.some((x, i) => x !== b[i])) {
        mismatches++;
        if (examples.length < 3) examples.push(JSON.stringify(s));
      }
    }
    rows.push({ encoding: name, strings: kind, cases, mismatches, seconds: (performance.now() - t0) / 1000, examples: examples.join(" ") || "–" });
    console.log(JSON.stringify(rows[rows.length - 1]));
  }
  return rows;
}
