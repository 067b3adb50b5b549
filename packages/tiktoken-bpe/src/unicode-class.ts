/**
 * Code-point classes for the pre-tokenizers, from the committed Unicode 16.0.0 table
 * (scripts/gen-unicode-tables.mjs). The same table is compiled into the native core, so the
 * TypeScript fallback and the addon classify every code point identically, independent of the
 * ICU version of the running Node.
 */
import { STAGE1_BASE64, STAGE2_BASE64 } from "./unicode-tables.js";

/** \p{L} */
export const CLS_LETTER = 1;
/** \p{N} */
export const CLS_NUMBER = 2;
/** [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] */
export const CLS_UPPERISH = 4;
/** [\p{Ll}\p{Lm}\p{Lo}\p{M}] */
export const CLS_LOWERISH = 8;
/** Script=Han (tiktoken's `\p{Han}`; not Script_Extensions) */
export const CLS_HAN = 16;
/** Unicode White_Space (regex `\s`: includes U+0085, excludes U+FEFF) */
export const CLS_SPACE = 32;

const stage1Bytes = Buffer.from(STAGE1_BASE64, "base64");
const stage1 = new Uint16Array(stage1Bytes.buffer.slice(stage1Bytes.byteOffset, stage1Bytes.byteOffset + stage1Bytes.byteLength));
const stage2 = new Uint8Array(Buffer.from(STAGE2_BASE64, "base64"));

/** Class bits of a code point (0 for anything outside U+0000..U+10FFFF). */
export function codePointClass(cp: number): number {
  if (cp < 0 || cp > 0x10ffff) return 0;
  return stage2[(stage1[cp >> 7] << 7) | (cp & 127)];
}
