/**
 * Byte-level BPE training that writes a tiktoken rank file.
 *
 * - Ranks 0..255 are the 256 single bytes in GPT-2's printable order ('!' = 0, as in cl100k,
 *   o200k and Kimi's files), so any input encodes.
 * - The text is split with the pattern first (Kimi's by default, the same splitter the encoder
 *   runs); merges never cross a piece boundary. Identical pieces are counted once with a weight.
 * - Each step merges the adjacent pair with the highest count over all pieces (overlapping
 *   occurrences in a run like "aaa" count twice). Ties: the pair with the lowest first rank, then
 *   the lowest second rank. Occurrences are merged left to right, non-overlapping.
 * - When a merge spells bytes that already are a token (reached by another pair), the existing id
 *   is reused and no rank is added; training goes on until `vocabSize` ranks exist.
 * - Pair counts are updated incrementally: a merge only revisits the pieces that hold the pair
 *   (found through a pair -> pieces index), and the best pair comes from a lazy max-heap whose
 *   stale entries are dropped when popped. Same input, same ranks: the result does not depend on
 *   iteration order, because the choice is a total order on (count, first, second).
 */
import { TokenizerError } from "./errors.js";
import { familyOf, KIMI_PATTERN } from "./patterns.js";
import { KIMI_K2_SPECIALS, KIMI_K3_SPECIALS } from "./presets.js";
import { splitPieces, Utf8Text } from "./pretokenize.js";
import { translatePattern } from "./regex-pattern.js";

export interface TrainBpeOptions {
  /** Number of ranks to produce, the 256 single bytes included (specials come after them). */
  vocabSize: number;
  /** tiktoken pat_str used to split the text before counting pairs. Default: Kimi's. */
  pattern?: string;
  /**
   * Special tokens placed after the ranks, as Kimi lays them out: `k3` / `k2` (Kimi's names, 256
   * ids, unnamed ids `<|reserved_token_{id}|>`), a list of names (ids in list order), or none.
   */
  specials?: "k3" | "k2" | readonly string[];
}

export interface TrainedBpe {
  /** Token bytes by rank (index = rank). */
  tokens: Uint8Array[];
  /** Special text -> id (ids from tokens.length up). */
  specialTokens: Map<string, number>;
  pattern: string;
  /** Merges tried, including those that reused an existing token. */
  merges: number;
}

/** The 256 byte values in GPT-2 printable order ('!'..'~', '¡'..'¬', '®'..'ÿ', then the rest). */
export function byteRankOrder(): number[] {
  const printable: number[] = [];
  for (let b = 0x21; b <= 0x7e; b++) printable.push(b);
  for (let b = 0xa1; b <= 0xac; b++) printable.push(b);
  for (let b = 0xae; b <= 0xff; b++) printable.push(b);
  const seen = new Set(printable);
  for (let b = 0; b < 256; b++) if (!seen.has(b)) printable.push(b);
  return printable;
}

// Pair keys: first * 2^21 + second (exact in a double for ids below 2^21).
const ID_LIMIT = 1 << 21;
const pairKey = (a: number, b: number) => a * ID_LIMIT + b;

/** Trains byte-level BPE ranks on `texts` (each text split on its own). */
export function trainBpe(texts: string | readonly string[], options: TrainBpeOptions): TrainedBpe {
  const { vocabSize } = options;
  const pattern = options.pattern ?? KIMI_PATTERN;
  if (!Number.isInteger(vocabSize) || vocabSize < 256 || vocabSize >= ID_LIMIT)
    throw new TokenizerError(`trainBpe: vocabSize must be an integer in 256..${ID_LIMIT - 1}, got ${vocabSize}`);
  const list = typeof texts === "string" ? [texts] : texts;

  const tokens: Uint8Array[] = byteRankOrder().map((b) => Uint8Array.of(b));
  const idOfBytes = new Map<string, number>();
  tokens.forEach((t, id) => idOfBytes.set(latin1(t, 0, 1), id));
  const byteId = new Int32Array(256);
  tokens.forEach((t, id) => (byteId[t[0]] = id));

  const words = countPieces(list, pattern, byteId);
  const counts = new Map<number, number>();
  const where = new Map<number, number[]>();
  for (let w = 0; w < words.ids.length; w++) addPairs(words, w, counts, where, null, -1);
  const heap = new PairHeap();
  for (const [key, c] of counts) heap.push(c, key);

  const stamp = new Int32Array(words.ids.length).fill(-1);
  let merges = 0;
  while (tokens.length < vocabSize) {
    const key = popBest(heap, counts);
    if (key < 0)
      throw new TokenizerError(`trainBpe: the text has no pair left to merge after ${tokens.length} ranks (vocabSize ${vocabSize})`);
    const a = Math.floor(key / ID_LIMIT);
    const b = key - a * ID_LIMIT;
    const merged = concat(tokens[a], tokens[b]);
    const text = latin1(merged, 0, merged.length);
    let id = idOfBytes.get(text);
    if (id === undefined) {
      id = tokens.length;
      tokens.push(merged);
      idOfBytes.set(text, id);
    }
    const touched = new Set<number>();
    for (const w of where.get(key) ?? []) {
      if (stamp[w] === merges) continue; // listed twice
      stamp[w] = merges;
      subtractPairs(words, w, counts, touched);
      mergeInWord(words, w, a, b, id);
      addPairs(words, w, counts, where, touched, id);
    }
    where.delete(key);
    counts.delete(key);
    for (const k of touched) {
      const c = counts.get(k) ?? 0;
      if (c > 0) heap.push(c, k);
      else counts.delete(k);
    }
    merges++;
  }
  return { tokens, specialTokens: specialMap(options.specials, tokens.length), pattern, merges };
}

/** The rank file text: `base64(token) rank` per line, as tiktoken's load_tiktoken_bpe reads. */
export function rankFileText(tokens: readonly Uint8Array[]): string {
  let out = "";
  tokens.forEach((t, rank) => (out += `${Buffer.from(t.buffer, t.byteOffset, t.byteLength).toString("base64")} ${rank}\n`));
  return out;
}

/**
 * A `tokenizer_config.json` object in Kimi's layout for the trained specials (what
 * `loadKimiTokenizer` and HF's TikTokenTokenizer read): every special id named in
 * `added_tokens_decoder`, `num_reserved_special_tokens` = their count.
 */
export function kimiTokenizerConfig(trained: TrainedBpe): Record<string, unknown> {
  const decoder: Record<string, unknown> = {};
  for (const [content, id] of [...trained.specialTokens].sort((x, y) => x[1] - y[1]))
    decoder[String(id)] = { content, lstrip: false, normalized: false, rstrip: false, single_word: false, special: true };
  const has = (s: string) => trained.specialTokens.has(s);
  return {
    added_tokens_decoder: decoder,
    bos_token: has("[BOS]") ? "[BOS]" : null,
    eos_token: has("[EOS]") ? "[EOS]" : null,
    pad_token: has("[PAD]") ? "[PAD]" : null,
    unk_token: has("[UNK]") ? "[UNK]" : null,
    model_max_length: 1048576,
    tokenizer_class: "TikTokenTokenizer",
    num_reserved_special_tokens: trained.specialTokens.size,
    comment: `trained by @k3/tiktoken-bpe trainBpe: ${trained.tokens.length} ranks + ${trained.specialTokens.size} specials`,
  };
}

// ------------------------------------------------------------------------------------ pieces

interface Words {
  /** Token ids of each distinct piece; merged in place, `len` is the live length. */
  ids: Int32Array[];
  len: Int32Array;
  freq: Float64Array;
}

/** Splits every text with the pattern and counts distinct pieces (as byte ids). */
function countPieces(texts: readonly string[], pattern: string, byteId: Int32Array): Words {
  const pieceCount = new Map<string, number>();
  const family = familyOf(pattern);
  const regex = family === undefined ? translatePattern(pattern) : undefined;
  const encoder = new TextEncoder();
  const add = (bytes: Uint8Array, s: number, e: number) => {
    const k = latin1(bytes, s, e);
    pieceCount.set(k, (pieceCount.get(k) ?? 0) + 1);
  };
  for (const text of texts) {
    if (regex) {
      for (const m of text.matchAll(regex)) {
        const piece = encoder.encode(m[0]);
        add(piece, 0, piece.length);
      }
    } else {
      const bytes = encoder.encode(text);
      splitPieces(new Utf8Text(bytes), 0, bytes.length, family!, (s, e) => add(bytes, s, e));
    }
  }
  const n = pieceCount.size;
  const words: Words = { ids: new Array(n), len: new Int32Array(n), freq: new Float64Array(n) };
  let w = 0;
  for (const [k, c] of pieceCount) {
    const ids = new Int32Array(k.length);
    for (let i = 0; i < k.length; i++) ids[i] = byteId[k.charCodeAt(i)];
    words.ids[w] = ids;
    words.len[w] = k.length;
    words.freq[w++] = c;
  }
  return words;
}

/**
 * Adds the pairs of word w to the counts; touched keys are collected. Word w is listed under its
 * pairs that hold `fresh` (every pair when fresh is -1): after a merge, a pair without the new id
 * was already in the word before it, so the word is already listed there.
 */
function addPairs(words: Words, w: number, counts: Map<number, number>, where: Map<number, number[]>, touched: Set<number> | null, fresh: number): void {
  const ids = words.ids[w];
  const f = words.freq[w];
  for (let i = 0; i + 1 < words.len[w]; i++) {
    const k = pairKey(ids[i], ids[i + 1]);
    counts.set(k, (counts.get(k) ?? 0) + f);
    touched?.add(k);
    if (fresh >= 0 && ids[i] !== fresh && ids[i + 1] !== fresh) continue;
    const list = where.get(k);
    if (list === undefined) where.set(k, [w]);
    else if (list[list.length - 1] !== w) list.push(w);
  }
}

function subtractPairs(words: Words, w: number, counts: Map<number, number>, touched: Set<number>): void {
  const ids = words.ids[w];
  const f = words.freq[w];
  for (let i = 0; i + 1 < words.len[w]; i++) {
    const k = pairKey(ids[i], ids[i + 1]);
    counts.set(k, counts.get(k)! - f);
    touched.add(k);
  }
}

/** Replaces every (a, b) in word w by id, left to right, non-overlapping. */
function mergeInWord(words: Words, w: number, a: number, b: number, id: number): void {
  const ids = words.ids[w];
  const n = words.len[w];
  let out = 0;
  for (let i = 0; i < n; ) {
    if (i + 1 < n && ids[i] === a && ids[i + 1] === b) {
      ids[out++] = id;
      i += 2;
    } else ids[out++] = ids[i++];
  }
  words.len[w] = out;
}

/** Pops heap entries until one matches its pair's live count; -1 when no pair is left. */
function popBest(heap: PairHeap, counts: Map<number, number>): number {
  while (heap.size > 0) {
    const [c, key] = heap.pop();
    if (counts.get(key) === c && c > 0) return key;
  }
  return -1;
}

/** Max-heap on (count desc, key asc): key order is (first rank, second rank) order. */
class PairHeap {
  private c: number[] = [];
  private k: number[] = [];

  get size(): number {
    return this.c.length;
  }

  private above(i: number, j: number): boolean {
    return this.c[i] > this.c[j] || (this.c[i] === this.c[j] && this.k[i] < this.k[j]);
  }

  private swap(i: number, j: number): void {
    const c = this.c[i], k = this.k[i];
    this.c[i] = this.c[j];
    this.k[i] = this.k[j];
    this.c[j] = c;
    this.k[j] = k;
  }

  push(count: number, key: number): void {
    this.c.push(count);
    this.k.push(key);
    let i = this.c.length - 1;
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (!this.above(i, p)) break;
      this.swap(i, p);
      i = p;
    }
  }

  pop(): [number, number] {
    const top: [number, number] = [this.c[0], this.k[0]];
    const lastC = this.c.pop()!, lastK = this.k.pop()!;
    if (this.c.length > 0) {
      this.c[0] = lastC;
      this.k[0] = lastK;
      let i = 0;
      const n = this.c.length;
      for (;;) {
        const l = 2 * i + 1, r = l + 1;
        let m = i;
        if (l < n && this.above(l, m)) m = l;
        if (r < n && this.above(r, m)) m = r;
        if (m === i) break;
        this.swap(i, m);
        i = m;
      }
    }
    return top;
  }
}

// ------------------------------------------------------------------------------------ helpers

function specialMap(specials: TrainBpeOptions["specials"], first: number): Map<string, number> {
  const map = new Map<string, number>();
  if (specials === undefined) return map;
  if (specials === "k3" || specials === "k2") {
    const names = specials === "k3" ? KIMI_K3_SPECIALS : KIMI_K2_SPECIALS;
    for (let off = 0; off < 256; off++) map.set(names[off] ?? `<|reserved_token_${first + off}|>`, first + off);
    return map;
  }
  specials.forEach((name, i) => {
    if (map.has(name)) throw new TokenizerError(`trainBpe: special ${JSON.stringify(name)} is listed twice`);
    map.set(name, first + i);
  });
  return map;
}

function concat(x: Uint8Array, y: Uint8Array): Uint8Array {
  const out = new Uint8Array(x.length + y.length);
  out.set(x, 0);
  out.set(y, x.length);
  return out;
}

/** Bytes as a string of code points 0..255 (a cheap exact Map key). */
function latin1(bytes: Uint8Array, s: number, e: number): string {
  let out = "";
  for (let i = s; i < e; i += 4096) out += String.fromCharCode(...bytes.subarray(i, Math.min(e, i + 4096)));
  return out;
}
