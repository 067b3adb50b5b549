// Shared by the tests: where the third-party data is, the oracle (tiktoken@1.0.22 WASM), backends.
import { existsSync, readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { get_encoding, type Tiktoken as FullTiktoken } from "tiktoken";
import { Tiktoken } from "tiktoken/lite";
import { getEncoding, KIMI_PATTERN, loadKimiTokenizer, nativeLoadError, type Tokenizer } from "../src/index.js";
// A dependency-free module of @k3/test-utils (not a dependency of this package), imported by path.
import { mulberry32 } from "../../test-utils/src/random.js";

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
export const rng = mulberry32;

/** The hostile alphabet of docs/formats.md §2.4, plus case and script edges. */
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

/** Common Chinese characters: multi-character tokens form between these, unlike random ones. */
const COMMON_HAN =
  "的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年得就那要下以生会自着去之过家学对可她里后小么心多天而能好都然没日于起还发成事只作当想看文无开手十用主行方又如前所本见经头面公同三已老从动两长知民样现分将外但身些与高意进把法此实回二理美点月明其种声全工己话儿者向情部正名定女问力机给等几很业最间新什打便位因重被走电四第门相次东政海口使教西再平真听世气信北少关并内加化由却代军产入先山五太水万市眼体别处总才场师书比住员九笑性通目华报立马命张活难神数件安表原车白应路期叫死常提感金何更反合放做系计或司利受光王果亲界及今京务制解各任至清物台象记边共风战干接它许八特觉望直服毛林题建南度统色字请交爱让认算论百吃义科怎元社术结六功指思非流每青管夫连远资队跟带花快条院变联言权往展该领传近留红治决周保达办运武半候七必城父强步完革深区即求品士转量空甚众技轻程告江语英基派满式李息写呢识极令黄德收脸钱党倒未持取设始版双历越史商千片容研像找友孩站广改议形委早房音火际则首单据导影失拿网香似斯专石若兵弟谁校读志飞观争究包组造落视济喜离虽坏兴切";
const CJK_OTHER = ["，", "。", "、", "！", "？", "：", "“", "”", "（", "）", "《", "》", "\u3000", "a", " ", "1", "\n", "é", "😀", "カ", "한"];

/**
 * A string of up to `maxChars` characters, mostly Han (common ones, any of U+4E00..U+9FFF, any
 * 3-byte code point), with CJK punctuation, ASCII and a few 2- and 4-byte characters: it drives
 * the merge that starts from whole 3-byte characters (native/src/char_start.c) and its fallback,
 * on both sides of the heap threshold.
 */
export function cjkString(next: () => number, maxChars: number): string {
  const n = 1 + Math.floor(next() * maxChars);
  let s = "";
  for (let i = 0; i < n; i++) {
    const u = next();
    if (u < 0.6) s += COMMON_HAN[Math.floor(next() * COMMON_HAN.length)];
    else if (u < 0.75) s += String.fromCharCode(0x4e00 + Math.floor(next() * (0x9fff - 0x4e00 + 1)));
    else if (u < 0.85) {
      const c = 0x800 + Math.floor(next() * (0x10000 - 0x800));
      s += c >= 0xd800 && c < 0xe000 ? "\u4e2d" : String.fromCharCode(c);
    } else s += CJK_OTHER[Math.floor(next() * CJK_OTHER.length)];
  }
  return s;
}
