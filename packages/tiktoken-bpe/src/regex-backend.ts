/** Encoder backend for arbitrary patterns: JS RegExp split (regex-pattern.ts) + TypeScript BPE. */
import { bytePairEncode } from "./bpe.js";
import type { Vocabulary } from "./rank-table.js";
import type { SpecialMatcher } from "./specials.js";
import { SegmentedBackend } from "./ts-backend.js";

const utf8 = new TextEncoder();
const text = new TextDecoder("utf-8", { ignoreBOM: true });

export class RegexBackend extends SegmentedBackend {
  constructor(vocab: Vocabulary, private readonly regex: RegExp, specials: SpecialMatcher) {
    super(vocab, specials);
  }

  protected encodeSegment(bytes: Uint8Array, start: number, end: number, out: number[] | null): number {
    let n = 0;
    for (const m of text.decode(bytes.subarray(start, end)).matchAll(this.regex)) {
      const piece = utf8.encode(m[0]);
      n += bytePairEncode(this.table, piece, 0, piece.length, out);
    }
    return n;
  }
}
