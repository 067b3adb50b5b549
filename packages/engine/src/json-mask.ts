/**
 * JSON mode's token mask: a token may be drawn iff its bytes keep the output a viable prefix of a
 * JSON text of the schema (json-grammar.ts), as in llama.cpp's grammar sampling.
 *
 * Cost on a 163,840-token vocabulary: the token bytes are put once in a byte trie, and each mask
 * walks the trie from the grammar state, pruning a subtree at its first refused byte; outside
 * strings few first bytes survive (whitespace, a quote, a digit...). Inside a string almost every
 * token survives, so there the tokens that cannot leave a string (no quote, backslash, control
 * byte or broken UTF-8) are allowed from a precomputed list (with the UTF-8 bytes each leaves
 * due, for the budget below) and only the others are walked (a second trie). `bench/json-mask.bench.ts` times it on the real vocabulary.
 *
 * Closing in time: with `remaining` tokens left (this one included) a token is allowed only if
 * the shortest completion after it (minCompletion, bytes) fits in remaining - 1; every single
 * byte is a token of a byte-level BPE vocabulary, so the value can always be closed. The mask
 * records when this refused a token the grammar allowed (`closedEarly`).
 */
import type { Tokenizer } from "@k3/tiktoken-bpe";
import { initialState, inPlainString, isComplete, minCompletion, step, type JsonState, type SchemaNode } from "./json-grammar.js";
import type { TokenConstraint } from "./sampler.js";

/** A byte trie over token strings: node 0 is the root; each node lists its children by sibling links. */
class ByteTrie {
  private cap = 1024;
  firstChild = new Int32Array(this.cap).fill(-1);
  sibling = new Int32Array(this.cap).fill(-1);
  byte = new Uint8Array(this.cap);
  token = new Int32Array(this.cap).fill(-1);
  nodes = 1;

  insert(bytes: Uint8Array, id: number): void {
    let node = 0;
    for (const b of bytes) {
      let c = this.firstChild[node];
      while (c >= 0 && this.byte[c] !== b) c = this.sibling[c];
      if (c < 0) {
        c = this.alloc(b);
        this.sibling[c] = this.firstChild[node];
        this.firstChild[node] = c;
      }
      node = c;
    }
    this.token[node] = id;
  }

  private alloc(b: number): number {
    if (this.nodes === this.cap) {
      const grow = <T extends Int32Array | Uint8Array>(a: T, fill: number): T => {
        const n = new (a.constructor as new (n: number) => T)(this.cap * 2);
        n.set(a);
        if (fill !== 0) n.fill(fill, this.cap);
        return n;
      };
      this.firstChild = grow(this.firstChild, -1);
      this.sibling = grow(this.sibling, -1);
      this.byte = grow(this.byte, 0);
      this.token = grow(this.token, -1);
      this.cap *= 2;
    }
    this.byte[this.nodes] = b;
    return this.nodes++;
  }
}

/** True when the bytes, read inside a string with nothing open, stay inside it (a UTF-8 sequence may stay open at the end). */
export function staysInString(bytes: Uint8Array): boolean {
  return openAfter(bytes) >= 0;
}

/** For bytes that stay inside a string: the UTF-8 continuation bytes still due after them (0..3); -1 when they leave it. */
function openAfter(bytes: Uint8Array): number {
  let need = 0;
  for (let i = 0; i < bytes.length; i++) {
    const b = bytes[i];
    if (need > 0) {
      if (b < 0x80 || b > 0xbf) return -1;
      // The first continuation's narrower range (E0, ED, F0, F4) is checked below on the lead.
      need--;
      continue;
    }
    if (b === 0x22 || b === 0x5c || b < 0x20) return -1;
    if (b < 0x80) continue;
    if (b >= 0xc2 && b <= 0xdf) need = 1;
    else if (b >= 0xe0 && b <= 0xef) need = 2;
    else if (b >= 0xf0 && b <= 0xf4) need = 3;
    else return -1;
    const next = i + 1 < bytes.length ? bytes[i + 1] : -1;
    if (next >= 0 && ((b === 0xe0 && next < 0xa0) || (b === 0xed && next > 0x9f) || (b === 0xf0 && next < 0x90) || (b === 0xf4 && next > 0x8f))) return -1;
  }
  return need;
}

/** The vocabulary as JSON mode sees it: each id's bytes (null: never allowed, e.g. special tokens), in tries. */
export class JsonVocab {
  readonly trie = new ByteTrie();
  /** The tokens that are not `stringSafe`, for walks that start inside a string. */
  readonly exitTrie = new ByteTrie();
  /** Ids whose bytes never leave a string (see staysInString), and the UTF-8 bytes each leaves due. */
  readonly stringSafe: Int32Array;
  readonly stringSafeOpen: Uint8Array;

  constructor(readonly tokens: readonly (Uint8Array | null)[]) {
    const safe: number[] = [];
    const open: number[] = [];
    tokens.forEach((bytes, id) => {
      if (!bytes || bytes.length === 0) return;
      this.trie.insert(bytes, id);
      const due = openAfter(bytes);
      if (due >= 0) {
        safe.push(id);
        open.push(due);
      } else this.exitTrie.insert(bytes, id);
    });
    this.stringSafe = Int32Array.from(safe);
    this.stringSafeOpen = Uint8Array.from(open);
  }

  get size(): number {
    return this.tokens.length;
  }

  /** `size` ids (the model's logits row): special and unknown ids are never allowed. */
  static fromTokenizer(tok: Tokenizer, size: number): JsonVocab {
    const tokens: (Uint8Array | null)[] = [];
    for (let id = 0; id < size; id++) {
      let bytes: Uint8Array | null = null;
      if (!tok.isSpecialId(id)) {
        try {
          bytes = tok.tokenBytes(id);
        } catch {
          bytes = null;
        }
      }
      tokens.push(bytes);
    }
    return new JsonVocab(tokens);
  }
}

const vocabCache = new WeakMap<Tokenizer, Map<number, JsonVocab>>();

/** One JsonVocab per tokenizer and row size (building it takes a fraction of a second on K3's vocabulary). */
export function jsonVocabFor(tok: Tokenizer, size: number): JsonVocab {
  let m = vocabCache.get(tok);
  if (!m) vocabCache.set(tok, (m = new Map()));
  let v = m.get(size);
  if (!v) m.set(size, (v = JsonVocab.fromTokenizer(tok, size)));
  return v;
}

/**
 * Marks in `allowed` every token of `trie` whose bytes keep `start` viable and whose shortest
 * completion fits `budget` bytes; returns how many viable tokens the budget refused.
 */
function walk(trie: ByteTrie, start: JsonState, allowed: Uint8Array, budget: number): number {
  let refused = 0;
  const nodes: number[] = [0];
  const states: JsonState[] = [start];
  const { firstChild, sibling, byte, token } = trie;
  while (nodes.length > 0) {
    const node = nodes.pop()!;
    const state = states.pop()!;
    for (let c = firstChild[node]; c >= 0; c = sibling[c]) {
      const next = step(state, byte[c]);
      if (!next) continue;
      const id = token[c];
      if (id >= 0) {
        if (minCompletion(next) <= budget) allowed[id] = 1;
        else refused++;
      }
      if (firstChild[c] >= 0) {
        nodes.push(c);
        states.push(next);
      }
    }
  }
  return refused;
}

/** The mask for one grammar state: `allowed[id]` = 1 for the tokens that may follow. */
export function allowedTokens(vocab: JsonVocab, state: JsonState, budget = Infinity, allowed: Uint8Array = new Uint8Array(vocab.size)): { allowed: Uint8Array; refused: number } {
  allowed.fill(0);
  // A token that stays in the string adds to the shortest completion only the UTF-8 bytes it leaves due.
  if (inPlainString(state)) {
    const base = minCompletion(state);
    const { stringSafe, stringSafeOpen } = vocab;
    let refused = 0;
    if (base + 3 <= budget) for (let k = 0; k < stringSafe.length; k++) allowed[stringSafe[k]] = 1;
    else {
      for (let k = 0; k < stringSafe.length; k++) {
        if (base + stringSafeOpen[k] <= budget) allowed[stringSafe[k]] = 1;
        else refused++;
      }
    }
    return { allowed, refused: refused + walk(vocab.exitTrie, state, allowed, budget) };
  }
  return { allowed, refused: walk(vocab.trie, state, allowed, budget) };
}

/** JSON mode over one generation: masks each draw, follows the drawn bytes, ends at the value's end. */
export class JsonConstraint implements TokenConstraint {
  state: JsonState;
  /** The budget refused a token the grammar allowed at least once: the value was closed to fit max_tokens. */
  closedEarly = false;
  private readonly allowed: Uint8Array;

  constructor(readonly vocab: JsonVocab, schema: SchemaNode) {
    this.state = initialState(schema);
    this.allowed = new Uint8Array(vocab.size);
  }

  get complete(): boolean {
    return isComplete(this.state);
  }

  mask(row: Float32Array, remaining: number): void {
    let { allowed, refused } = allowedTokens(this.vocab, this.state, remaining - 1, this.allowed);
    if (refused > 0) this.closedEarly = true;
    if (!allowed.includes(1)) {
      // Only when fewer tokens are left than bytes needed: carry on unconstrained by the budget (finish "length").
      ({ allowed } = allowedTokens(this.vocab, this.state, Infinity, this.allowed));
      if (!allowed.includes(1)) throw new Error("JSON mode: no token of the vocabulary continues the output (the vocabulary lacks single-byte tokens?)");
    }
    const n = Math.min(row.length, allowed.length);
    for (let i = 0; i < n; i++) if (allowed[i] === 0) row[i] = -Infinity;
    for (let i = n; i < row.length; i++) row[i] = -Infinity;
  }

  accept(id: number): boolean {
    const bytes = id < this.vocab.size ? this.vocab.tokens[id] : null;
    let s: JsonState | null = this.state;
    if (bytes) for (let i = 0; i < bytes.length && s; i++) s = step(s, bytes[i]);
    if (!bytes || !s) throw new Error(`JSON mode: token ${id} does not continue the output (a draw outside the mask)`);
    this.state = s;
    return isComplete(s);
  }
}
