/** EncoderBackend over the native core; output buffers are reused between calls. */
import type { TiktokenBinding } from "./native.js";
import type { Family } from "./pretokenize.js";
import type { Vocabulary } from "./rank-table.js";
import type { SpecialToken } from "./specials.js";
import type { EncoderBackend } from "./ts-backend.js";

export class NativeBackend implements EncoderBackend {
  readonly kind = "native";
  private readonly handle: object;
  private out = new Uint32Array(1024);

  constructor(private readonly binding: TiktokenBinding, vocab: Vocabulary, family: Family, specials: SpecialToken[]) {
    const total = specials.reduce((s, t) => s + t.bytes.length, 0);
    const pool = new Uint8Array(total);
    const offsets = new Uint32Array(specials.length + 1);
    const ids = new Uint32Array(specials.length);
    let w = 0;
    specials.forEach((t, i) => {
      offsets[i] = w;
      pool.set(t.bytes, w);
      w += t.bytes.length;
      ids[i] = t.id;
    });
    offsets[specials.length] = w;
    this.handle = binding.create(vocab.pool, vocab.offsets, vocab.ranks, family, pool, offsets, ids);
  }

  findSpecial(bytes: Uint8Array, len: number, mask: Uint8Array): number {
    return this.binding.findSpecial(this.handle, bytes, len, mask);
  }

  encode(bytes: Uint8Array, len: number, allowed: Uint8Array | null): Uint32Array {
    if (this.out.length < len) this.out = new Uint32Array(Math.max(len, this.out.length * 2));
    const n = this.binding.encode(this.handle, bytes, len, allowed, this.out);
    return this.out.slice(0, n);
  }

  count(bytes: Uint8Array, len: number, allowed: Uint8Array | null): number {
    return this.binding.count(this.handle, bytes, len, allowed);
  }

  /** Test hook for the two merge strategies. */
  mergePiece(piece: Uint8Array, heap: boolean): number[] {
    const out = new Uint32Array(piece.length);
    const n = this.binding.mergePiece(this.handle, piece, heap ? 1 : 0, out);
    return Array.from(out.subarray(0, n));
  }
}
