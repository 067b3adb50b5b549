/**
 * Hand-written pre-tokenizers for the three pattern families, exactly reproducing tiktoken's
 * `find_iter` over the family's pat_str (leftmost-first alternation, greedy quantifiers with
 * backtracking, `\s+(?!\S)`). They run on UTF-8 bytes, so the TypeScript fallback and the native
 * core (native/src/pretokenize.c, same structure) share one algorithm. Each alternative of the
 * pattern is a numbered step below; the order of the steps is the order of the alternatives.
 */
import { CLS_HAN, CLS_LETTER, CLS_LOWERISH, CLS_NUMBER, CLS_SPACE, CLS_UPPERISH, codePointClass } from "./unicode-class.js";

export const enum Family {
  /** `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+` */
  Cl100k = 0,
  /** o200k_base: case-aware letter runs, `[\r\n/]*` after punctuation. */
  O200k = 1,
  /** Kimi K2/K3: o200k with a leading `[\p{Han}]+` and Han removed from the letter classes. */
  Kimi = 2,
}

const CR = 0x0d;
const LF = 0x0a;
const APOSTROPHE = 0x27;
const SPACE = 0x20;
const SLASH = 0x2f;
const LONG_S = 0x17f; // ſ: case-folds to s under (?i:)

/** A cursor over valid UTF-8 (the caller encodes with TextEncoder, so input is always valid). */
export class Utf8Text {
  constructor(readonly bytes: Uint8Array) {}

  /** Code point starting at byte i. */
  cp(i: number): number {
    const b = this.bytes;
    const b0 = b[i];
    if (b0 < 0x80) return b0;
    if (b0 < 0xe0) return ((b0 & 0x1f) << 6) | (b[i + 1] & 0x3f);
    if (b0 < 0xf0) return ((b0 & 0x0f) << 12) | ((b[i + 1] & 0x3f) << 6) | (b[i + 2] & 0x3f);
    return ((b0 & 0x07) << 18) | ((b[i + 1] & 0x3f) << 12) | ((b[i + 2] & 0x3f) << 6) | (b[i + 3] & 0x3f);
  }

  /** Byte length of the code point starting at byte i. */
  len(i: number): number {
    const b0 = this.bytes[i];
    return b0 < 0x80 ? 1 : b0 < 0xe0 ? 2 : b0 < 0xf0 ? 3 : 4;
  }
}

/** Calls onPiece(start, end) for every piece of bytes[start, end), in order. */
export function splitPieces(
  text: Utf8Text,
  start: number,
  end: number,
  family: Family,
  onPiece: (start: number, end: number) => void,
): void {
  let p = start;
  while (p < end) {
    const q = pieceEnd(text, p, end, family);
    onPiece(p, q);
    p = q;
  }
}

/** Byte index where the piece starting at p ends. */
export function pieceEnd(t: Utf8Text, p: number, end: number, family: Family): number {
  const c = t.cp(p);
  const cls = codePointClass(c);
  const q = p + t.len(p);
  const han = family === Family.Kimi ? CLS_HAN : 0;

  if (family === Family.Kimi && cls & CLS_HAN) return scan(t, q, end, CLS_HAN, 0); // [\p{Han}]+

  const prefixOk = c !== CR && c !== LF && (cls & (CLS_LETTER | CLS_NUMBER)) === 0;
  if (family === Family.Cl100k) {
    if (c === APOSTROPHE) {
      const r = contraction(t, p, end);
      if (r >= 0) return r; // (?i:'s|'t|'re|'ve|'m|'ll|'d)
    }
    // [^\r\n\p{L}\p{N}]?\p{L}+
    if (prefixOk && q < end && codePointClass(t.cp(q)) & CLS_LETTER) return scan(t, q, end, CLS_LETTER, 0);
    if (cls & CLS_LETTER) return scan(t, q, end, CLS_LETTER, 0);
  } else {
    // [^\r\n\p{L}\p{N}]?[Lu Lt Lm Lo M]*[Ll Lm Lo M]+(?i:'s|...)?  (Kimi: minus Han)
    let r = prefixOk ? lettersUpperStarLowerPlus(t, q, end, han) : -1;
    if (r < 0) r = lettersUpperStarLowerPlus(t, p, end, han);
    // [^\r\n\p{L}\p{N}]?[Lu Lt Lm Lo M]+[Ll Lm Lo M]*(?i:'s|...)?
    if (r < 0 && prefixOk) r = lettersUpperPlusLowerStar(t, q, end, han);
    if (r < 0) r = lettersUpperPlusLowerStar(t, p, end, han);
    if (r >= 0) {
      const k = r < end && t.bytes[r] === APOSTROPHE ? contraction(t, r, end) : -1;
      return k >= 0 ? k : r;
    }
  }
  // \p{N}{1,3}
  if (cls & CLS_NUMBER) {
    let e = q;
    for (let n = 1; n < 3 && e < end && codePointClass(t.cp(e)) & CLS_NUMBER; n++) e += t.len(e);
    return e;
  }
  // ' ?[^\s\p{L}\p{N}]+[\r\n]*'  (o200k: [\r\n/]*)
  const other = CLS_SPACE | CLS_LETTER | CLS_NUMBER;
  let runStart = -1;
  if ((cls & other) === 0) runStart = q;
  else if (c === SPACE && q < end && (codePointClass(t.cp(q)) & other) === 0) runStart = q + t.len(q);
  if (runStart >= 0) {
    let e = runStart;
    while (e < end && (codePointClass(t.cp(e)) & other) === 0) e += t.len(e);
    const slash = family === Family.O200k;
    while (e < end) {
      const b = t.bytes[e];
      if (b === CR || b === LF || (slash && b === SLASH)) e++;
      else break;
    }
    return e;
  }
  // Whitespace run [p, j): \s*[\r\n]+ | \s+(?!\S) | \s+
  let j = p;
  let afterLastNewline = -1;
  let lastStart = p;
  while (j < end) {
    const cj = t.cp(j);
    if ((codePointClass(cj) & CLS_SPACE) === 0) break;
    lastStart = j;
    j += t.len(j);
    if (cj === CR || cj === LF) afterLastNewline = j;
  }
  if (afterLastNewline >= 0) return afterLastNewline;
  if (j >= end) return j;
  if (lastStart > p) return lastStart; // give the last space to the next piece
  return j > p ? j : q;
}

/** The contraction alternative at byte p (which holds an apostrophe); -1 when none matches. */
function contraction(t: Utf8Text, p: number, end: number): number {
  const a = p + 1 < end ? lower(t.cp(p + 1)) : -1;
  if (a === 0x73) return p + 1 + t.len(p + 1); // 's (also ſ)
  if (a === 0x74 || a === 0x6d || a === 0x64) return p + 2; // 't 'm 'd
  if (a === 0x72 || a === 0x76 || a === 0x6c) {
    const b = p + 2 < end ? lower(t.cp(p + 2)) : -1;
    if ((a === 0x72 && b === 0x65) || (a === 0x76 && b === 0x65) || (a === 0x6c && b === 0x6c)) return p + 3;
  }
  return -1;
}

/** Simple case folding restricted to the letters of the contractions. */
function lower(cp: number): number {
  if (cp >= 0x41 && cp <= 0x5a) return cp + 32;
  if (cp === LONG_S) return 0x73;
  return cp;
}

/** Advances over code points that have any bit of `want` and none of `not`. */
function scan(t: Utf8Text, i: number, end: number, want: number, not: number): number {
  while (i < end) {
    const k = codePointClass(t.cp(i));
    if ((k & want) === 0 || (k & not) !== 0) break;
    i += t.len(i);
  }
  return i;
}

/** `[U]*[W]+` at s with backtracking; -1 when it cannot match. */
function lettersUpperStarLowerPlus(t: Utf8Text, s: number, end: number, notMask: number): number {
  let u = s;
  let lastLower = -1; // last code point of the U-run that is also in W (Lm, Lo, M)
  while (u < end) {
    const k = codePointClass(t.cp(u));
    if ((k & CLS_UPPERISH) === 0 || (k & notMask) !== 0) break;
    if (k & CLS_LOWERISH) lastLower = u;
    u += t.len(u);
  }
  if (u < end) {
    const k = codePointClass(t.cp(u));
    if (k & CLS_LOWERISH && (k & notMask) === 0) return scan(t, u + t.len(u), end, CLS_LOWERISH, notMask);
  }
  // U* gives back code points until W+ can start: at the last U-run member that is also in W.
  if (lastLower >= 0) return lastLower + t.len(lastLower);
  return -1;
}

/** `[U]+[W]*` at s; -1 when it cannot match. */
function lettersUpperPlusLowerStar(t: Utf8Text, s: number, end: number, notMask: number): number {
  const u = scan(t, s, end, CLS_UPPERISH, notMask);
  if (u === s) return -1;
  return scan(t, u, end, CLS_LOWERISH, notMask);
}
