/**
 * The Tokenizer: tiktoken's Encoding semantics (encode / encode_ordinary / special-token checks /
 * decode) over any rank file, pattern and special-token map, on the native core when it loads and
 * on the TypeScript fallback otherwise. Ids are returned as a `Uint32Array` (like the `tiktoken`
 * npm package; `Array.from(ids)` for a `number[]`); decode accepts `number[]` or `Uint32Array`.
 */
import { DisallowedSpecialError, TokenizerError, UnknownTokenError, VocabularyError } from "./errors.js";
import { encodeKimiHf } from "./kimi-hf.js";
import { NativeBackend } from "./native-backend.js";
import { nativeBinding } from "./native.js";
import { familyOf } from "./patterns.js";
import type { Family } from "./pretokenize.js";
import { parseRanks, rankInfoOf, type RankInfo } from "./ranks.js";
import type { Vocabulary } from "./rank-table.js";
import { RegexBackend } from "./regex-backend.js";
import { translatePattern } from "./regex-pattern.js";
import { SpecialMatcher, type SpecialToken } from "./specials.js";
import { TypeScriptBackend, type EncoderBackend } from "./ts-backend.js";

export type SpecialSet = "all" | Iterable<string>;

export interface TokenizerOptions {
  /** Parsed vocabulary, or the contents of a tiktoken rank file (bytes or text). */
  ranks: Vocabulary | Uint8Array | string;
  /** tiktoken pat_str. The cl100k, o200k and Kimi patterns run hand-written splitters. */
  pattern: string;
  /** Special-token text → id. Ids must not collide with ranks. */
  specialTokens?: Record<string, number> | Map<string, number>;
  name?: string;
  /** `auto` (default): native when the addon loads, else TypeScript. */
  backend?: "auto" | "native" | "typescript";
}

export interface EncodeOptions {
  /** Specials encoded as their id. Default: none. */
  allowedSpecial?: SpecialSet;
  /** Specials whose text throws DisallowedSpecialError. Default `all` (minus the allowed ones). */
  disallowedSpecial?: SpecialSet;
  /**
   * `tiktoken` (default): plain tiktoken. `kimi-hf`: Kimi's HF `TikTokenTokenizer.encode`
   * (400,000-code-point chunks, 25,000-code-point space/non-space runs, specials as text).
   */
  mode?: "tiktoken" | "kimi-hf";
}

/** Incremental decoder: never returns part of a UTF-8 character. */
export interface StreamDecoder {
  /** Adds one id; returns the text that is now complete ("" if the character is unfinished). */
  push(id: number): string;
  /** Ends the stream: an unfinished tail becomes U+FFFD. */
  flush(): string;
}

const utf8 = new TextEncoder();
/** Only ever used without `stream`, so every call starts from a clean state. */
const textDecoder = new TextDecoder("utf-8", { ignoreBOM: true });

export class Tokenizer {
  readonly name: string;
  readonly pattern: string;
  /** max id + 1 (tiktoken's n_vocab). */
  readonly nVocab: number;
  /** Number of BPE ranks (ids below the specials, for the standard files). */
  readonly nRanks: number;
  /** Special-token text → id. */
  readonly specialTokens: ReadonlyMap<string, number>;
  /** `native` or `typescript`: which encoder runs. */
  readonly backendKind: "native" | "typescript";

  private readonly vocab: Vocabulary;
  private readonly specials: SpecialToken[];
  private readonly specialIndex = new Map<string, number>();
  private readonly specialIds: Set<number>;
  private readonly backend: EncoderBackend;
  private readonly family: Family | undefined;
  /** id → bytes tables, built on first decode (see decodeTables). */
  private decodeTablesCache: { start: Uint32Array; len: Int32Array; pool: Uint8Array } | undefined;
  private scratch = new Uint8Array(4096);
  /** ids of a number[] given to decode, as a Uint32Array (the native decode takes those). */
  private idScratch = new Uint32Array(256);
  /** TypeScript decode output, reused between calls. */
  private decodeScratch = new Uint8Array(4096);
  /** The native backend when it is in use: it decodes in C. */
  private readonly nativeDecoder: NativeBackend | undefined;
  /** Stream cache (streamEntry): id → slot, text and packed unfinished tail per slot. */
  private readonly streamSlots = new Map<number, number>();
  private readonly streamTexts: string[] = [];
  private readonly streamTails: number[] = [];
  private readonly allMask: Uint8Array;
  private readonly rankInfo: RankInfo;
  /** Ranks present (only for non-contiguous vocabularies; contiguous: id < nRanks). */
  private readonly rankSet: Uint8Array | undefined;
  private wasDisposed = false;

  constructor(options: TokenizerOptions) {
    const { pattern } = options;
    if (typeof pattern !== "string" || pattern.length === 0) throw new TokenizerError("Tokenizer: `pattern` must be a non-empty pat_str string");
    this.pattern = pattern;
    this.name = options.name ?? "custom";
    const r = options.ranks;
    this.vocab =
      typeof r === "string" ? parseRanks(utf8.encode(r)) : r instanceof Uint8Array ? parseRanks(r) : checkVocabulary(r);
    this.nRanks = this.vocab.ranks.length;

    // Specials
    const entries = options.specialTokens instanceof Map ? [...options.specialTokens] : Object.entries(options.specialTokens ?? {});
    this.rankInfo = rankInfoOf(this.vocab, this.name);
    const { maxRank } = this.rankInfo;
    if (!this.rankInfo.contiguous) {
      this.rankSet = new Uint8Array(maxRank + 1);
      for (const x of this.vocab.ranks) this.rankSet[x] = 1;
    }
    const seenIds = new Set<number>();
    this.specials = entries.map(([name, id]) => {
      if (typeof name !== "string" || name.length === 0) throw new VocabularyError("specialTokens: a name is empty");
      if (!Number.isInteger(id) || id < 0 || id > 0x7fffffff)
        throw new VocabularyError(`specialTokens: id of ${JSON.stringify(name)} must be a non-negative integer, got ${id}`);
      if (this.isRank(id)) throw new VocabularyError(`specialTokens: id ${id} of ${JSON.stringify(name)} is also a BPE rank`);
      if (seenIds.has(id)) throw new VocabularyError(`specialTokens: id ${id} is used twice`);
      seenIds.add(id);
      return { name, id, bytes: utf8.encode(name) };
    });
    this.specials.forEach((t, i) => this.specialIndex.set(t.name, i));
    this.specialTokens = new Map(this.specials.map((t) => [t.name, t.id]));
    this.allMask = new Uint8Array(this.specials.length).fill(1);
    this.specialIds = new Set(this.specials.map((t) => t.id));
    let maxId = maxRank;
    for (const t of this.specials) if (t.id > maxId) maxId = t.id;
    this.nVocab = maxId + 1;

    // Encoder
    this.family = familyOf(pattern);
    const matcher = new SpecialMatcher(this.specials);
    const want = options.backend ?? "auto";
    const binding = want === "typescript" || this.family === undefined ? undefined : nativeBinding();
    if (want === "native" && !binding)
      throw new TokenizerError(
        this.family === undefined
          ? "Tokenizer: backend 'native' covers the cl100k, o200k and Kimi patterns only"
          : "Tokenizer: backend 'native' requested but the addon did not load (see nativeLoadError())",
      );
    if (binding && this.family !== undefined) this.backend = new NativeBackend(binding, this.vocab, this.family, this.specials);
    else if (this.family !== undefined) this.backend = new TypeScriptBackend(this.vocab, this.family, matcher);
    else this.backend = new RegexBackend(this.vocab, translatePattern(pattern), matcher);
    this.backendKind = this.backend.kind;
    this.nativeDecoder = this.backend instanceof NativeBackend ? this.backend : undefined;
  }

  /**
   * Frees the native encoder (a few MB for a 160k-rank file) now rather than when the garbage
   * collector finalizes it, which happens only on event-loop turns: code that builds tokenizers in a
   * synchronous loop would otherwise grow without bound. Every later call throws TokenizerError;
   * a second dispose() does nothing.
   */
  dispose(): void {
    if (this.wasDisposed) return;
    this.wasDisposed = true;
    this.nativeDecoder?.dispose();
    this.decodeTablesCache = undefined;
    this.streamSlots.clear();
    this.streamTexts.length = 0;
    this.streamTails.length = 0;
  }

  /** True after dispose(). */
  get disposed(): boolean {
    return this.wasDisposed;
  }

  /** tiktoken `encode`: specials per options; throws DisallowedSpecialError by default on special text. */
  encode(text: string, options: EncodeOptions = {}): Uint32Array {
    if (options.mode === "kimi-hf") return encodeKimiHf(this, text);
    if (options.mode !== undefined && options.mode !== "tiktoken")
      throw new TokenizerError(`encode: mode must be 'tiktoken' or 'kimi-hf', got ${JSON.stringify(options.mode)}`);
    const len = this.toUtf8(text);
    const allowed = this.checkSpecials(len, options);
    return this.backend.encode(this.scratch, len, allowed);
  }

  /** tiktoken `encode_ordinary`: special-token text is ordinary text. */
  encodeOrdinary(text: string): Uint32Array {
    const len = this.toUtf8(text);
    return this.backend.encode(this.scratch, len, null);
  }

  /** tiktoken `encode_with_special_tokens`: every special's text becomes its id. */
  encodeWithSpecialTokens(text: string): Uint32Array {
    const len = this.toUtf8(text);
    return this.backend.encode(this.scratch, len, this.specials.length ? this.allMask : null);
  }

  /** Number of ids encode(text, options) would return, without building them. */
  countTokens(text: string, options: EncodeOptions = {}): number {
    if (options.mode === "kimi-hf") return encodeKimiHf(this, text).length;
    const len = this.toUtf8(text);
    const allowed = this.checkSpecials(len, options);
    return this.backend.count(this.scratch, len, allowed);
  }

  /** Concatenated bytes of the ids (specials give their UTF-8 text). Unknown ids throw. */
  decodeBytes(ids: ArrayLike<number>): Uint8Array {
    const u = this.idArray(ids);
    if (this.nativeDecoder) return this.nativeDecoder.decodeBytes(u);
    const [out, n] = this.decodeToScratch(u);
    return out.slice(0, n);
  }

  /** Text of the ids; invalid UTF-8 becomes U+FFFD per maximal invalid subpart; a BOM is kept. */
  decode(ids: ArrayLike<number>): string {
    const u = this.idArray(ids);
    if (this.nativeDecoder) return this.nativeDecoder.decode(u);
    const [out, n] = this.decodeToScratch(u);
    return textDecoder.decode(out.subarray(0, n));
  }

  /** Bytes of one id (tiktoken `decode_single_token_bytes`). */
  tokenBytes(id: number): Uint8Array {
    return this.decodeBytes([id]);
  }

  /**
   * Decoder for a stream of ids that holds back an unfinished UTF-8 character. Each push returns
   * exactly what a streaming WHATWG TextDecoder (ignoreBOM) returns for the id's bytes. With no
   * bytes held back (the usual case) a push is a cache lookup: the text of the id's bytes up to
   * any unfinished character at their end, and that unfinished tail (see streamEntry).
   */
  streamDecoder(): StreamDecoder {
    let held: Uint8Array = new Uint8Array(0); // bytes of an unfinished character (0..3)
    return {
      push: (id: number) => {
        if (held.length === 0) {
          const k = this.streamEntry(id);
          const tail = this.streamTails[k];
          if (tail !== 0) held = tailBytes(tail);
          return this.streamTexts[k];
        }
        const bytes = this.decodeBytes([id]);
        const all = new Uint8Array(held.length + bytes.length);
        all.set(held);
        all.set(bytes, held.length);
        const cut = unfinishedTailStart(all);
        held = all.slice(cut);
        return textDecoder.decode(all.subarray(0, cut));
      },
      flush: () => {
        const rest = held.length ? textDecoder.decode(held) : "";
        held = new Uint8Array(0);
        return rest;
      },
    };
  }

  /** Id of a special token; throws when the name is not one. */
  specialTokenId(name: string): number {
    const id = this.specialTokens.get(name);
    if (id === undefined) throw new TokenizerError(`specialTokenId: ${JSON.stringify(name)} is not a special token of ${this.name}`);
    return id;
  }

  /** True when id is a special token's id. */
  isSpecialId(id: number): boolean {
    return this.specialIds.has(id);
  }

  // ------------------------------------------------------------------ internals

  private isRank(id: number): boolean {
    if (this.rankInfo.contiguous) return id < this.nRanks;
    return this.rankSet !== undefined && id < this.rankSet.length && this.rankSet[id] === 1;
  }

  /**
   * Slot of id in the stream cache: the text of its bytes up to any unfinished character at their
   * end, and that unfinished tail (up to 3 bytes, packed as len | b0 << 8 | b1 << 16 | b2 << 24;
   * 0 = none). Unknown ids throw (from decodeBytes) and are not cached.
   */
  private streamEntry(id: number): number {
    const k = this.streamSlots.get(id);
    if (k !== undefined) return k;
    const bytes = this.decodeBytes([id]);
    const cut = unfinishedTailStart(bytes);
    let tail = 0;
    for (let i = cut; i < bytes.length; i++) tail |= bytes[i] << (8 * (i - cut + 1));
    if (cut < bytes.length) tail |= bytes.length - cut;
    const slot = this.streamTexts.length;
    this.streamTexts.push(textDecoder.decode(bytes.subarray(0, cut)));
    this.streamTails.push(tail >>> 0);
    this.streamSlots.set(id, slot);
    return slot;
  }

  /**
   * ids as a Uint32Array: the argument itself, or a copy of a number[] (or other array-like) in
   * idScratch. A value that is not an integer in [0, 2^32) throws UnknownTokenError here; ids
   * beyond the vocabulary throw in the decoders.
   */
  private idArray(ids: ArrayLike<number>): Uint32Array {
    this.checkLive();
    if (ids instanceof Uint32Array) return ids;
    const n = ids.length;
    if (this.idScratch.length < n) this.idScratch = new Uint32Array(Math.max(n, this.idScratch.length * 2));
    const u = this.idScratch;
    for (let i = 0; i < n; i++) {
      const id = ids[i];
      if (id >>> 0 !== id) throw new UnknownTokenError(id, i);
      u[i] = id;
    }
    return u.subarray(0, n);
  }

  /** TypeScript decode: the bytes of ids into decodeScratch (or a one-off buffer); returns it and the count. */
  private decodeToScratch(ids: Uint32Array): [Uint8Array, number] {
    const { start, len, pool } = this.decodeTables();
    const n = ids.length;
    let total = 0;
    for (let i = 0; i < n; i++) {
      const id = ids[i];
      const l = id < len.length ? len[id] : -1;
      if (l < 0) throw new UnknownTokenError(id, i);
      total += l;
    }
    let out = this.decodeScratch;
    if (out.length < total) {
      out = new Uint8Array(Math.max(total, out.length * 2));
      if (total <= 16 << 20) this.decodeScratch = out; // kept for the next call unless very large
    }
    let w = 0;
    for (let i = 0; i < n; i++) {
      const id = ids[i];
      let s = start[id];
      const e = s + len[id];
      // Most tokens are a few bytes: a byte loop beats creating a subarray for set().
      if (e - s <= 32) while (s < e) out[w++] = pool[s++];
      else {
        out.set(pool.subarray(s, e), w);
        w += e - s;
      }
    }
    return [out, w];
  }

  /**
   * id → (offset, length) in one pool of every token's bytes, specials included; length -1 marks an
   * unknown id. Built on first use so that loading stays cheap.
   */
  private decodeTables(): { start: Uint32Array; len: Int32Array; pool: Uint8Array } {
    this.checkLive();
    if (this.decodeTablesCache) return this.decodeTablesCache;
    const { pool: vpool, offsets, ranks } = this.vocab;
    const specialBytes = this.specials.reduce((s, t) => s + t.bytes.length, 0);
    const pool = new Uint8Array(vpool.length + specialBytes);
    pool.set(vpool);
    const start = new Uint32Array(this.nVocab);
    const len = new Int32Array(this.nVocab).fill(-1);
    if (this.rankInfo.contiguous) {
      start.set(offsets.subarray(0, ranks.length));
      for (let i = 0; i < ranks.length; i++) len[i] = offsets[i + 1] - offsets[i];
    } else {
      for (let i = 0; i < ranks.length; i++) {
        start[ranks[i]] = offsets[i];
        len[ranks[i]] = offsets[i + 1] - offsets[i];
      }
    }
    let w = vpool.length;
    for (const t of this.specials) {
      pool.set(t.bytes, w);
      start[t.id] = w;
      len[t.id] = t.bytes.length;
      w += t.bytes.length;
    }
    this.decodeTablesCache = { start, len, pool };
    return this.decodeTablesCache;
  }

  /** UTF-8 of text in this.scratch (lone surrogates → U+FFFD, as tiktoken); returns the length. */
  private toUtf8(text: string): number {
    this.checkLive();
    if (typeof text !== "string") throw new TokenizerError(`encode: text must be a string, got ${typeof text}`);
    if (this.scratch.length < text.length * 3) this.scratch = new Uint8Array(Math.max(text.length * 3, this.scratch.length * 2));
    return utf8.encodeInto(text, this.scratch).written;
  }

  /** Every encode and decode passes here (toUtf8, idArray, decodeTables). */
  private checkLive(): void {
    if (this.wasDisposed) throw new TokenizerError(`${this.name}: the tokenizer was disposed (Tokenizer.dispose()); create a new one`);
  }

  private resolveSet(set: SpecialSet | undefined, what: string): Uint8Array | null {
    if (set === undefined) return null;
    if (set === "all") return this.specials.length ? this.allMask.slice() : null;
    if (typeof set === "string") throw new TokenizerError(`encode: ${what} must be 'all' or an iterable of special-token names`);
    const mask = new Uint8Array(this.specials.length);
    let any = false;
    for (const name of set) {
      const i = this.specialIndex.get(name);
      if (i === undefined) throw new TokenizerError(`encode: ${what} names ${JSON.stringify(name)}, which is not a special token of ${this.name}`);
      mask[i] = 1;
      any = true;
    }
    return any ? mask : null;
  }

  /** Throws on disallowed special text; returns the allowed mask (null = none). */
  private checkSpecials(len: number, options: EncodeOptions): Uint8Array | null {
    const allowed = this.resolveSet(options.allowedSpecial, "allowedSpecial");
    let disallowed = this.resolveSet(options.disallowedSpecial ?? "all", "disallowedSpecial");
    if (disallowed && allowed) {
      disallowed = disallowed.map((d, i) => (d && !allowed[i] ? 1 : 0));
    }
    if (disallowed && disallowed.some((d) => d === 1)) {
      const i = this.backend.findSpecial(this.scratch, len, disallowed);
      if (i >= 0) throw new DisallowedSpecialError(this.specials[i].name);
    }
    return allowed;
  }
}

/**
 * Where the unfinished UTF-8 character at the end of bytes starts (bytes.length when there is
 * none): the start of a trailing lead byte with fewer continuation bytes than it needs, all of them
 * in the ranges WHATWG accepts after that lead (E0: A0-BF, ED: 80-9F, F0: 90-BF, F4: 80-8F). A
 * streaming WHATWG decoder holds exactly those bytes back and has emitted everything before them,
 * as a non-streaming decode of the bytes before them would.
 */
export function unfinishedTailStart(bytes: Uint8Array): number {
  const n = bytes.length;
  for (let k = 1; k <= 3 && k <= n; k++) {
    const b = bytes[n - k];
    if (b >= 0x80 && b <= 0xbf) continue; // continuation byte: look further back
    const need = b >= 0xc2 && b <= 0xdf ? 1 : b >= 0xe0 && b <= 0xef ? 2 : b >= 0xf0 && b <= 0xf4 ? 3 : 0;
    if (need < k) return n; // ASCII, an invalid byte, or a complete character
    if (k >= 2) {
      const c = bytes[n - k + 1];
      const lo = b === 0xe0 ? 0xa0 : b === 0xf0 ? 0x90 : 0x80;
      const hi = b === 0xed ? 0x9f : b === 0xf4 ? 0x8f : 0xbf;
      if (c < lo || c > hi) return n; // the decoder has already replaced this lead
    }
    return n - k;
  }
  return n;
}

/** The bytes of a packed tail (streamEntry). */
function tailBytes(tail: number): Uint8Array {
  const len = tail & 0xff;
  const out = new Uint8Array(len);
  for (let i = 0; i < len; i++) out[i] = (tail >>> (8 * (i + 1))) & 0xff;
  return out;
}

function checkVocabulary(v: Vocabulary): Vocabulary {
  if (!(v && v.pool instanceof Uint8Array && v.offsets instanceof Uint32Array && v.ranks instanceof Uint32Array))
    throw new VocabularyError("Tokenizer: `ranks` must be a Vocabulary {pool, offsets, ranks}, rank-file bytes or rank-file text");
  if (v.offsets.length !== v.ranks.length + 1 || v.offsets[v.ranks.length] > v.pool.length)
    throw new VocabularyError("Tokenizer: vocabulary offsets do not match ranks/pool");
  for (let i = 0; i < v.ranks.length; i++)
    if (v.offsets[i + 1] <= v.offsets[i]) throw new VocabularyError(`Tokenizer: token ${i} of the vocabulary is empty or out of order`);
  return v;
}
