/**
 * Kimi's HF wrapper (`TikTokenTokenizer.encode` in tokenization_kimi.py), as vLLM/sglang run it:
 * 1. cut the text into 400,000-code-point chunks at fixed positions;
 * 2. inside each chunk, cut wherever a run of Python-`str.isspace()` or non-space code points
 *    would exceed 25,000 (the workaround for openai/tiktoken#195);
 * 3. encode each part with `disallowed_special=()`: special-token text is ordinary text.
 * Positions count code points (a surrogate pair is one, a lone surrogate is one), as Python does.
 */
import type { Tokenizer } from "./tokenizer.js";

export const KIMI_MAX_ENCODE_CHARS = 400_000;
export const KIMI_MAX_RUN_CHARS = 25_000;

/** Python `str.isspace()` (differs from regex `\s`: has U+001C..U+001F). */
export function pythonIsSpace(cp: number): boolean {
  return (
    (cp >= 0x09 && cp <= 0x0d) ||
    (cp >= 0x1c && cp <= 0x20) ||
    cp === 0x85 ||
    cp === 0xa0 ||
    cp === 0x1680 ||
    (cp >= 0x2000 && cp <= 0x200a) ||
    cp === 0x2028 ||
    cp === 0x2029 ||
    cp === 0x202f ||
    cp === 0x205f ||
    cp === 0x3000
  );
}

/** The parts (UTF-16 index ranges) the HF wrapper encodes separately. */
export function kimiHfParts(text: string): Array<[number, number]> {
  const parts: Array<[number, number]> = [];
  if (text.length === 0) return [[0, 0]];
  let i = 0;
  while (i < text.length) {
    // One 400k-code-point chunk starting at i.
    let chunkEnd = i;
    for (let n = 0; n < KIMI_MAX_ENCODE_CHARS && chunkEnd < text.length; n++) chunkEnd += cpUnits(text, chunkEnd);
    splitRuns(text, i, chunkEnd, parts);
    i = chunkEnd;
  }
  return parts;
}

/** `_split_whitespaces_or_nonwhitespaces(chunk, 25000)`. */
function splitRuns(text: string, start: number, end: number, parts: Array<[number, number]>): void {
  let sliceStart = start;
  let runLen = 0;
  let runIsSpace = pythonIsSpace(text.codePointAt(start) as number);
  for (let i = start; i < end; ) {
    const cp = text.codePointAt(i) as number;
    const isSpace = pythonIsSpace(cp);
    if (runIsSpace !== isSpace) {
      runLen = 1;
      runIsSpace = isSpace;
    } else {
      runLen++;
      if (runLen > KIMI_MAX_RUN_CHARS) {
        parts.push([sliceStart, i]);
        sliceStart = i;
        runLen = 1;
      }
    }
    i += cpUnits(text, i);
  }
  parts.push([sliceStart, end]);
}

/** UTF-16 units of the code point at i (2 for a valid pair, else 1). */
function cpUnits(text: string, i: number): number {
  const c = text.charCodeAt(i);
  if (c >= 0xd800 && c <= 0xdbff && i + 1 < text.length) {
    const d = text.charCodeAt(i + 1);
    if (d >= 0xdc00 && d <= 0xdfff) return 2;
  }
  return 1;
}

export function encodeKimiHf(tok: Tokenizer, text: string): Uint32Array {
  // No cut can happen in a text shorter than one run limit (code points <= UTF-16 units).
  if (text.length <= KIMI_MAX_RUN_CHARS) return tok.encodeOrdinary(text);
  const parts = kimiHfParts(text).map(([a, b]) => tok.encodeOrdinary(text.slice(a, b)));
  const out = new Uint32Array(parts.reduce((s, p) => s + p.length, 0));
  let w = 0;
  for (const p of parts) {
    out.set(p, w);
    w += p.length;
  }
  return out;
}
