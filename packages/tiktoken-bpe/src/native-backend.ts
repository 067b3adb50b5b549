/** Slack the native decode needs after the result (K3_DECODE_PAD in native/src/decode.h). */
const DECODE_PAD = 16;
/** Decode buffers up to this size are kept for the next call; larger ones are used once. */
const KEEP_DECODE_BYTES = 16 << 20;

/** EncoderBackend over the native core; output buffers are reused between calls. */
import { UnknownTokenError } from "./errors.js";
import type { TiktokenBinding } from "./native.js";
import type { Family } from "./pretokenize.js";
import type { Vocabulary } from "./rank-table.js";
import type { SpecialToken } from "./specials.js";
import type { EncoderBackend } from "./ts-backend.js";

export class NativeBackend implements EncoderBackend {
  readonly kind = "native";
  private readonly handle: object;
  private out = new Uint32Array(1024);
  private decodeOut = new Uint8Array(4096);

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

  /** Concatenated bytes of ids (a fresh array); unknown ids throw UnknownTokenError. */
  decodeBytes(ids: Uint32Array): Uint8Array {
    let out: Uint8Array = this.decodeOut;
    let r = this.binding.decodeInto(this.handle, ids, out);
    if (r >= 0 && r + DECODE_PAD > out.length) {
      out = this.decodeBuffer(r);
      r = this.binding.decodeInto(this.handle, ids, out);
    }
    if (r < 0) throw new UnknownTokenError(ids[-r - 1], -r - 1);
    return out.slice(0, r);
  }

  /** UTF-8 text of the ids' bytes: one U+FFFD per maximal invalid subpart, a BOM is kept. */
  decode(ids: Uint32Array): string {
    let r = this.binding.decodeString(this.handle, ids, this.decodeOut);
    if (typeof r === "number" && r >= 0) r = this.binding.decodeString(this.handle, ids, this.decodeBuffer(r));
    if (typeof r === "number") throw new UnknownTokenError(ids[-r - 1], -r - 1);
    return r;
  }

  /** An output buffer for `needed` bytes: the kept one grown, or a one-off when very large. */
  private decodeBuffer(needed: number): Uint8Array {
    const size = needed + DECODE_PAD;
    if (size > KEEP_DECODE_BYTES) return new Uint8Array(size);
    this.decodeOut = new Uint8Array(Math.max(size, Math.min(KEEP_DECODE_BYTES, this.decodeOut.length * 2)));
    return this.decodeOut;
  }

  /** Frees the native encoder now; later calls on this handle throw (checked in C). */
  dispose(): void {
    this.binding.destroy(this.handle);
  }

  /** Test hook for the two merge strategies. */
  mergePiece(piece: Uint8Array, heap: boolean): number[] {
    const out = new Uint32Array(piece.length);
    const n = this.binding.mergePiece(this.handle, piece, heap ? 1 : 0, out);
    return Array.from(out.subarray(0, n));
  }
}
