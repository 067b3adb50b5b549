/**
 * The byte-string → rank map of a vocabulary, as flat arrays: every token's bytes in one pool,
 * looked up through an open-addressing hash table keyed by the bytes (FNV-1a). Used by the
 * TypeScript fallback; the native core builds the same kind of table in C.
 */
import { VocabularyError } from "./errors.js";

export interface Vocabulary {
  /** Token bytes, concatenated in file order. */
  pool: Uint8Array;
  /** offsets[i]..offsets[i+1] are the bytes of token i (file order); length = count + 1. */
  offsets: Uint32Array;
  /** ranks[i] is the rank of token i. */
  ranks: Uint32Array;
}

export class RankTable {
  private readonly slots: Int32Array;
  private readonly mask: number;

  constructor(readonly vocab: Vocabulary) {
    const n = vocab.ranks.length;
    let size = 1;
    while (size < n * 2) size <<= 1;
    this.slots = new Int32Array(size).fill(-1);
    this.mask = size - 1;
    const { pool, offsets } = vocab;
    const single = new Uint8Array(256);
    for (let i = 0; i < n; i++) {
      if (offsets[i + 1] - offsets[i] === 1) single[pool[offsets[i]]] = 1;
      let h = hashBytes(pool, offsets[i], offsets[i + 1]) & this.mask;
      const len = offsets[i + 1] - offsets[i];
      while (this.slots[h] >= 0) {
        const o = offsets[this.slots[h]];
        if (offsets[this.slots[h] + 1] - o === len && pool.subarray(o, o + len).every((b, k) => b === pool[offsets[i] + k]))
          throw new VocabularyError(`vocabulary: token of rank ${vocab.ranks[i]} has the same bytes as rank ${vocab.ranks[this.slots[h]]}`);
        h = (h + 1) & this.mask;
      }
      this.slots[h] = i;
    }
    const missing = single.indexOf(0);
    if (missing >= 0)
      throw new VocabularyError(`vocabulary: byte 0x${missing.toString(16).padStart(2, "0")} has no token (all 256 single bytes are required)`);
  }

  /** Rank of bytes[start, end), or -1 when it is not a token. */
  get(bytes: Uint8Array, start: number, end: number): number {
    const { pool, offsets, ranks } = this.vocab;
    const len = end - start;
    let h = hashBytes(bytes, start, end) & this.mask;
    for (;;) {
      const i = this.slots[h];
      if (i < 0) return -1;
      const o = offsets[i];
      if (offsets[i + 1] - o === len) {
        let k = 0;
        while (k < len && pool[o + k] === bytes[start + k]) k++;
        if (k === len) return ranks[i];
      }
      h = (h + 1) & this.mask;
    }
  }
}

/** FNV-1a over bytes[start, end). */
export function hashBytes(bytes: Uint8Array, start: number, end: number): number {
  let h = 0x811c9dc5;
  for (let i = start; i < end; i++) h = Math.imul(h ^ bytes[i], 0x01000193);
  return h >>> 0;
}
