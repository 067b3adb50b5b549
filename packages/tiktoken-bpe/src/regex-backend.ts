/** Encoder backend for arbitrary patterns: JS RegExp split (regex-pattern.ts) + TypeScript BPE. */
import { bytePairEncode } from "./bpe.js";
import { RankTable, type Vocabulary } from "./rank-table.js";
import type { SpecialMatcher } from "./specials.js";
import type { EncoderBackend } from "./ts-backend.js";

const utf8 = new TextEncoder();
const text = new TextDecoder("utf-8", { ignoreBOM: true });

export class RegexBackend implements EncoderBackend {
  readonly kind = "typescript";
  private readonly table: RankTable;

  constructor(vocab: Vocabulary, private readonly regex: RegExp, private readonly specials: SpecialMatcher) {
    this.table = new RankTable(vocab);
  }

  findSpecial(bytes: Uint8Array, len: number, mask: Uint8Array): number {
    return this.specials.find(bytes, 0, len, mask, { pos: 0 });
  }

  encode(bytes: Uint8Array, len: number, allowed: Uint8Array | null): Uint32Array {
    const out: number[] = [];
    this.run(bytes, len, allowed, out);
    return Uint32Array.from(out);
  }

  count(bytes: Uint8Array, len: number, allowed: Uint8Array | null): number {
    return this.run(bytes, len, allowed, null);
  }

  private run(bytes: Uint8Array, len: number, allowed: Uint8Array | null, out: number[] | null): number {
    const found = { pos: 0 };
    let start = 0;
    let n = 0;
    for (;;) {
      const s = allowed ? this.specials.find(bytes, start, len, allowed, found) : -1;
      const segEnd = s >= 0 ? found.pos : len;
      const segment = text.decode(bytes.subarray(start, segEnd));
      for (const m of segment.matchAll(this.regex)) {
        const piece = utf8.encode(m[0]);
        n += bytePairEncode(this.table, piece, 0, piece.length, out);
      }
      if (s < 0) break;
      const tok = this.specials.tokens[s];
      if (out) out.push(tok.id);
      n++;
      start = found.pos + tok.bytes.length;
    }
    return n;
  }
}
