/**
 * Parsing of tiktoken rank files (`base64(token) rank` per line, as `load_tiktoken_bpe`), into the
 * flat Vocabulary arrays. The base64 decode is hand-written over the raw bytes: one pass, no
 * per-line allocation, which keeps the 2.8 MB Kimi file well under the 100 ms load budget.
 */
import { createHash } from "node:crypto";
import { readRegularFileSync } from "@k3/native";
import { VocabularyError } from "./errors.js";
import type { Vocabulary } from "./rank-table.js";
import { nativeBinding } from "./native.js";

const B64 = new Int16Array(256).fill(-1);
"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".split("").forEach((ch, i) => {
  B64[ch.charCodeAt(0)] = i;
});

/** Largest rank file read (Kimi's is 2.8 MB, o200k's 3.6 MB). */
export const MAX_RANK_FILE_BYTES = 64 << 20;

/**
 * Reads and parses a rank file; `expectedSha256` (hex) is verified first when given. Only a regular
 * file of at most MAX_RANK_FILE_BYTES is read (a FIFO hung the loader forever).
 */
export function readRankFile(path: string, expectedSha256?: string): Vocabulary {
  let data: Uint8Array;
  try {
    data = readRegularFileSync(path, MAX_RANK_FILE_BYTES);
  } catch (err) {
    throw new VocabularyError(`rank file ${path}: cannot read (${(err as Error).message})`, { cause: err });
  }
  if (expectedSha256) {
    const got = createHash("sha256").update(data).digest("hex");
    if (got !== expectedSha256.toLowerCase())
      throw new VocabularyError(`rank file ${path}: sha256 is ${got}, expected ${expectedSha256}`);
  }
  return parseRanks(data, path);
}

/**
 * Parses rank-file bytes. `name` appears in error messages. Uses the native parser when the addon
 * is loaded (same rules); a malformed file is re-parsed here for the detailed message.
 */
export function parseRanks(data: Uint8Array, name = "<ranks>"): Vocabulary {
  const binding = nativeBinding();
  if (binding) {
    const maxLines = Math.floor(data.length / 6) + 2; // a line is at least 7 bytes ("AA== 0" + newline)
    const pool = new Uint8Array(Math.ceil((data.length * 3) / 4) + 4);
    const offsets = new Uint32Array(maxLines + 1);
    const ranks = new Uint32Array(maxLines);
    const r = binding.parseRankFile(data, pool, offsets, ranks);
    if (Array.isArray(r)) {
      const [n, used] = r;
      if (n === 0) throw new VocabularyError(`rank file ${name}: no tokens`);
      const vocab: Vocabulary = { pool: pool.subarray(0, used), offsets: offsets.subarray(0, n + 1), ranks: ranks.subarray(0, n) };
      validateVocabulary(vocab, name);
      return vocab;
    }
  }
  return parseRanksTs(data, name);
}

/** The TypeScript parser (also the source of the detailed error messages). */
export function parseRanksTs(data: Uint8Array, name = "<ranks>"): Vocabulary {
  // Upper bounds: one token per line, 3/4 of the bytes for the pool.
  let lines = 1;
  for (let i = 0; i < data.length; i++) if (data[i] === 10) lines++;
  const pool = new Uint8Array(Math.ceil((data.length * 3) / 4) + 4);
  const offsets = new Uint32Array(lines + 1);
  const ranks = new Uint32Array(lines);
  let n = 0;
  let w = 0;
  let lineNo = 0;
  let i = 0;
  while (i < data.length) {
    lineNo++;
    let e = i;
    while (e < data.length && data[e] !== 10 && data[e] !== 13) e++;
    const lineEnd = e;
    // Skip blank lines (splitlines + `if line`), and the \n of a \r\n.
    let s = i;
    i = lineEnd < data.length && data[lineEnd] === 13 && data[lineEnd + 1] === 10 ? lineEnd + 2 : lineEnd + 1;
    if (s === lineEnd) continue;
    // base64 field
    offsets[n] = w;
    let acc = 0;
    let bits = 0;
    let padding = 0;
    const fieldStart = s;
    while (s < lineEnd && data[s] !== 32 && data[s] !== 9) {
      const ch = data[s++];
      if (ch === 61) {
        padding++;
        continue;
      }
      const v = B64[ch];
      if (v < 0 || padding > 0) throw bad(name, lineNo, `invalid base64 character ${JSON.stringify(String.fromCharCode(ch))}`);
      acc = ((acc << 6) | v) & 0xffffff;
      bits += 6;
      if (bits >= 8) {
        bits -= 8;
        pool[w++] = (acc >> bits) & 0xff;
      }
    }
    const fieldLen = s - fieldStart;
    if (fieldLen === 0 || fieldLen % 4 !== 0 || padding > 2)
      throw bad(name, lineNo, "the token is not canonical base64 (length not a multiple of 4)");
    if (w === offsets[n]) throw bad(name, lineNo, "empty token");
    // rank field
    while (s < lineEnd && (data[s] === 32 || data[s] === 9)) s++;
    let rank = 0;
    const rankStart = s;
    while (s < lineEnd && data[s] >= 48 && data[s] <= 57) {
      rank = rank * 10 + (data[s++] - 48);
      if (rank > 0x7ffffffe) throw bad(name, lineNo, "rank is larger than 2^31-2");
    }
    while (s < lineEnd && (data[s] === 32 || data[s] === 9)) s++;
    if (s === rankStart || s !== lineEnd) throw bad(name, lineNo, "expected `<base64 token> <rank>`");
    ranks[n++] = rank;
  }
  offsets[n] = w;
  if (n === 0) throw new VocabularyError(`rank file ${name}: no tokens`);
  const vocab: Vocabulary = { pool: pool.slice(0, w), offsets: offsets.slice(0, n + 1), ranks: ranks.slice(0, n) };
  validateVocabulary(vocab, name);
  return vocab;
}

function bad(name: string, line: number, what: string): VocabularyError {
  return new VocabularyError(`rank file ${name}, line ${line}: ${what}`);
}

/** Facts about a vocabulary's ranks that the tokenizer needs (computed once at load). */
export interface RankInfo {
  maxRank: number;
  /** ranks[i] === i for every token (the standard files): id tables are the offsets themselves. */
  contiguous: boolean;
}

/**
 * Ranks unique (tiktoken's CoreBPE asserts it). The single-byte and duplicate-bytes checks happen
 * where the hash table is built (RankTable and the native core), in the same pass as the inserts.
 */
export function validateVocabulary(v: Vocabulary, name: string): RankInfo {
  const n = v.ranks.length;
  const ranks = v.ranks;
  let maxRank = 0;
  let contiguous = true;
  for (let i = 0; i < n; i++) {
    const r = ranks[i];
    if (r > maxRank) maxRank = r;
    if (r !== i) contiguous = false;
  }
  if (!contiguous) {
    const seen = new Uint8Array(maxRank + 1);
    for (let i = 0; i < n; i++) {
      if (seen[ranks[i]]) throw new VocabularyError(`rank file ${name}: rank ${ranks[i]} appears twice`);
      seen[ranks[i]] = 1;
    }
  }
  const info = { maxRank, contiguous };
  rankInfo.set(v, info);
  return info;
}

const rankInfo = new WeakMap<Vocabulary, RankInfo>();

/** RankInfo of a vocabulary, validating it if that has not happened yet. */
export function rankInfoOf(v: Vocabulary, name: string): RankInfo {
  return rankInfo.get(v) ?? validateVocabulary(v, name);
}
