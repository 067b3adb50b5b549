/**
 * The pure-TypeScript encoders: used when the native addon cannot load, and tested against it
 * (same pre-tokenizer algorithm, same merge rules, same special-token scan, identical ids).
 * `TypeScriptBackend` splits with the hand-written pre-tokenizers; regex-backend.ts splits other
 * patterns with a JS RegExp. Both share the special-token walk below.
 */
import { bytePairEncode } from "./bpe.js";
import { Family, pieceEnd, Utf8Text } from "./pretokenize.js";
import { RankTable, type Vocabulary } from "./rank-table.js";
import { SpecialMatcher } from "./specials.js";

export interface EncoderBackend {
  readonly kind: "native" | "typescript";
  /** Index of the leftmost special (of those with mask 1) in bytes[0, len), -1 when none. */
  findSpecial(bytes: Uint8Array, len: number, mask: Uint8Array): number;
  /** Ids of bytes[0, len); specials with allowed[i] = 1 become their id, null = none allowed. */
  encode(bytes: Uint8Array, len: number, allowed: Uint8Array | null): Uint32Array;
  /** Same count as encode(...).length without building the array. */
  count(bytes: Uint8Array, len: number, allowed: Uint8Array | null): number;
}

/** Walks the allowed specials; each segment between them is split and merged by the subclass. */
export abstract class SegmentedBackend implements EncoderBackend {
  readonly kind = "typescript";
  protected readonly table: RankTable;

  constructor(vocab: Vocabulary, private readonly specials: SpecialMatcher) {
    this.table = new RankTable(vocab);
  }

  /** Encodes bytes[start, end) (no specials inside); pushes ids to `out` when given; returns the count. */
  protected abstract encodeSegment(bytes: Uint8Array, start: number, end: number, out: number[] | null): number;

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
      // Each segment between specials is split on its own: `$` and `(?!\S)` see its end.
      n += this.encodeSegment(bytes, start, segEnd, out);
      if (s < 0) break;
      const tok = this.specials.tokens[s];
      if (out) out.push(tok.id);
      n++;
      start = found.pos + tok.bytes.length;
    }
    return n;
  }
}

export class TypeScriptBackend extends SegmentedBackend {
  constructor(vocab: Vocabulary, private readonly family: Family, specials: SpecialMatcher) {
    super(vocab, specials);
  }

  protected encodeSegment(bytes: Uint8Array, start: number, end: number, out: number[] | null): number {
    const text = new Utf8Text(bytes);
    let n = 0;
    for (let p = start; p < end; ) {
      const q = pieceEnd(text, p, end, this.family);
      n += bytePairEncode(this.table, bytes, p, q, out);
      p = q;
    }
    return n;
  }
}
