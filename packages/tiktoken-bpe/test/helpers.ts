// Shared by the tests: where the third-party data is, the oracle (tiktoken@1.0.22 WASM), backends.
import { existsSync, readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { get_encoding, type Tiktoken as FullTiktoken } from "tiktoken";
import { Tiktoken } from "tiktoken/lite";
import { getEncoding, KIMI_PATTERN, loadKimiTokenizer, nativeLoadError, type Tokenizer } from "../src/index.js";

const here = dirname(fileURLToPath(import.meta.url));
export const repoRoot = resolve(here, "../../..");
export const dataDir = process.env.K3_TEST_DATA ?? resolve(repoRoot, "../shared/data");
export const kimiDir = join(dataDir, "kimi-tokenizer");
export const hasKimi = existsSync(join(kimiDir, "tiktoken.model"));
export const fixturesDir = join(repoRoot, "fixtures/models");
if (!hasKimi) console.warn(`[tiktoken-bpe] Kimi tests skipped: no ${join(kimiDir, "tiktoken.model")} (set K3_TEST_DATA)`);

export type BackendName = "native" | "typescript";
/** The backends under test: both when the addon loads. */
export const backends: BackendName[] = nativeLoadError() ? ["typescript"] : ["native", "typescript"];
if (nativeLoadError()) console.warn(`[tiktoken-bpe] native addon not loaded: ${nativeLoadError()?.message}`);

export interface Oracle {
  encode(text: string, allowed?: "all" | string[], disallowed?: "all" | string[]): Uint32Array;
  encode_ordinary(text: string): Uint32Array;
}

const oracles = new Map<string, Oracle>();
export function oracle(name: "cl100k_base" | "o200k_base" | "kimi"): Oracle {
  let o = oracles.get(name);
  if (!o) {
    if (name === "kimi") {
      const tok = kimi("typescript");
      o = new Tiktoken(readFileSync(join(kimiDir, "tiktoken.model"), "utf8"), Object.fromEntries(tok.specialTokens), KIMI_PATTERN);
    } else o = get_encoding(name) as FullTiktoken;
    oracles.set(name, o);
  }
  return o;
}

const kimiCache = new Map<string, Tokenizer>();
export function kimi(backend: BackendName): Tokenizer {
  let t = kimiCache.get(backend);
  if (!t) {
    t = loadKimiTokenizer(kimiDir, { specials: "k2", backend });
    kimiCache.set(backend, t);
  }
  return t;
}

export function tokenizer(name: "cl100k_base" | "o200k_base" | "kimi", backend: BackendName): Tokenizer {
  return name === "kimi" ? kimi(backend) : getEncoding(name, { backend });
}

/** Deterministic PRNG (mulberry32) so a failing fuzz case can be reproduced. */
export function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** The hostile alphabet of tokenizer.md section 4.13, plus case and script edges. */
export const HOSTILE = [
  "a", "B", "s", "S", "t", "T", "r", "e", "l", "L", "d", "m", "v", "x", " ", "  ", "\t", "\n", "\r", "\r\n",
  "\u00a0", "\u3000", "\u0085", "\ufeff", "\u2028", "\u1680", "\u200a", "\u001c", "!", "'", "/", ".", ",", "1", "2",
  "9", "\u0663", "\u00b2", "\uff14", "中", "日", "々", "〇", "\u3001", "ſ", "\u212a", "é", "e\u0301", "\u0301", "😀",
  "👩\u200d👧", "\ufe0f", "ʰ", "ǅ", "İ", "ı", "ก", "\u05d0", "\u0627", "\u0640", "\u200e", "カ", "한", "<|", "|>",
  "\u{11380}", "\u{10940}", "\ud83d", "\ude00", "_", "^", "\u0000", "\u00ad",
];

export function hostileString(next: () => number, maxParts: number): string {
  const n = 1 + Math.floor(next() * maxParts);
  let s = "";
  for (let i = 0; i < n; i++) s += HOSTILE[Math.floor(next() * HOSTILE.length)];
  return s;
}
