/**
 * The pure-TS header parser: a strict, single-pass JSON scanner specialised for safetensors
 * headers, then the layout validation of the official reader. It is the fallback when the
 * native addon cannot load, and the definition the native parser (native/src/st_scan.c,
 * st_validate.c) must match byte for byte: same checks, same order, same messages.
 *
 * Stricter than the official reader: duplicate keys (tensor names, __metadata__, fields) are
 * errors; tensor entries may only hold dtype, shape and data_offsets; integers must be <= 2^53-1;
 * lone surrogate escapes are refused. Leading/trailing JSON whitespace is accepted (as upstream).
 */
import { DTYPES, MAX_SAFE, dtypeCode, shapeElements, tensorBytes } from "./dtypes.js";
import { SafetensorsError, type SafetensorsErrorCode } from "./errors.js";
import { classifyName } from "./classify.js";
import type { HeaderTable } from "./table.js";

/** Largest JSON header accepted (the official limit). */
export const MAX_HEADER_LENGTH = 100_000_000;

// ---------------------------------------------------------------- framing

/**
 * Checks the 8-byte prefix against the file size and returns N. `prefix` must hold the first
 * min(8, fileSize) bytes.
 */
export function headerLengthOf(prefix: Uint8Array, fileSize: number, file?: string): number {
  if (fileSize < 8 || prefix.length < 8) {
    throw new SafetensorsError("HeaderTooSmall", `the file has ${fileSize} bytes, fewer than the 8-byte header length`, { file });
  }
  const view = new DataView(prefix.buffer, prefix.byteOffset, 8);
  const lo = view.getUint32(0, true);
  const hi = view.getUint32(4, true);
  if (hi !== 0 || lo > MAX_HEADER_LENGTH) {
    const n = (BigInt(hi) << 32n) | BigInt(lo);
    throw new SafetensorsError("HeaderTooLarge", `header length ${n} exceeds ${MAX_HEADER_LENGTH} bytes`, { file });
  }
  if (8 + lo > fileSize) {
    throw new SafetensorsError("InvalidHeaderLength", `header length ${lo} runs past the end of the ${fileSize}-byte file`, { file });
  }
  return lo;
}

// ---------------------------------------------------------------- UTF-8

/** Index of the first byte of the first invalid UTF-8 sequence, or -1 (same rules as Rust's str). */
export function firstInvalidUtf8(b: Uint8Array): number {
  const n = b.length;
  let i = 0;
  while (i < n) {
    const c = b[i];
    if (c < 0x80) {
      i++;
      continue;
    }
    let need: number;
    let lo = 0x80;
    let hi = 0xbf;
    if (c >= 0xc2 && c <= 0xdf) need = 1;
    else if (c >= 0xe0 && c <= 0xef) {
      need = 2;
      if (c === 0xe0) lo = 0xa0;
      else if (c === 0xed) hi = 0x9f;
    } else if (c >= 0xf0 && c <= 0xf4) {
      need = 3;
      if (c === 0xf0) lo = 0x90;
      else if (c === 0xf4) hi = 0x8f;
    } else return i;
    if (i + need >= n) return i;
    const c1 = b[i + 1];
    if (c1 < lo || c1 > hi) return i;
    for (let k = 2; k <= need; k++) {
      const ck = b[i + k];
      if (ck < 0x80 || ck > 0xbf) return i;
    }
    i += need + 1;
  }
  return -1;
}

// ---------------------------------------------------------------- the scanner

const WS_SPACE = 0x20;
const WS_TAB = 0x09;
const WS_LF = 0x0a;
const WS_CR = 0x0d;

/** True when c can start a JSON value (for "X must be Y" rather than "expected a value" messages). */
export function isValueStart(c: number): boolean {
  return (
    c === 0x7b || c === 0x5b || c === 0x22 || c === 0x2d || (c >= 0x30 && c <= 0x39) || c === 0x74 || c === 0x66 || c === 0x6e
  );
}

/** How a byte is named in "expected X, found Y" messages. */
export function describeByte(c: number): string {
  if (c < 0) return "the end of the header";
  if (c >= 0x21 && c <= 0x7e) return `'${String.fromCharCode(c)}'`;
  return `byte 0x${c.toString(16).padStart(2, "0")}`;
}

/** Prints an unknown dtype only when it is short printable ASCII (identical in C). */
export function describeDtype(s: string): string {
  if (s.length <= 32 && /^[\x20-\x7e]*$/.test(s) && !/["\\]/.test(s)) return `unknown dtype "${s}"`;
  return "unknown dtype (not a safetensors dtype name)";
}

/** "[2, 3]"; at most 16 dims are printed (the C side has a fixed-size message buffer). */
export function formatShape(dims: ArrayLike<number>): string {
  const shown = Array.from(dims).slice(0, 16).join(", ");
  return `[${shown}${dims.length > 16 ? ", ..." : ""}]`;
}

/**
 * The JSON scanning both strict parsers share (this file's header scanner and index-json.ts'
 * index scanner): position, white space, strings with escapes, and the "expected X, found Y"
 * messages, which name the document ("header" or "index") exactly as the C scanners do.
 */
export class JsonScanner {
  p = 0;
  readonly n: number;
  readonly buf: Buffer;
  constructor(
    readonly b: Uint8Array,
    readonly file: string | undefined,
    /** The document named in end-of-input messages: "header" or "index". */
    readonly doc: "header" | "index",
  ) {
    this.n = b.length;
    this.buf = Buffer.from(b.buffer, b.byteOffset, b.byteLength);
  }

  fail(code: SafetensorsErrorCode, detail: string, position = this.p, tensor?: string): never {
    throw new SafetensorsError(code, detail, { file: this.file, position, tensor });
  }

  peek(): number {
    return this.p < this.n ? this.b[this.p] : -1;
  }

  skipWs(): void {
    const b = this.b;
    let p = this.p;
    while (p < this.n) {
      const c = b[p];
      if (c !== WS_SPACE && c !== WS_LF && c !== WS_CR && c !== WS_TAB) break;
      p++;
    }
    this.p = p;
  }

  /** Fails with InvalidJson "expected <what>, found <byte>". */
  expected(what: string): never {
    const c = this.peek();
    if (c < 0) this.fail("InvalidJson", `unexpected end of the ${this.doc} JSON (expected ${what})`);
    this.fail("InvalidJson", `expected ${what}, found ${describeByte(c)}`);
  }

  expect(c: number, what: string): void {
    if (this.peek() !== c) this.expected(what);
    this.p++;
  }

  /** An object key at p and the ':' after it; leaves p on the value, white space skipped. */
  key(): string {
    if (this.peek() !== 0x22) this.expected("a string key");
    const key = this.string();
    this.skipWs();
    this.expect(0x3a, "':'");
    this.skipWs();
    return key;
  }

  /**
   * After an element or member: skips white space; on ',' consumes it and the white space after
   * and returns true (another follows); on `closer` ('}' or ']') consumes it and returns false;
   * else fails "expected ',' or '}'" (or ']').
   */
  nextOrClose(closer: 0x7d | 0x5d): boolean {
    this.skipWs();
    const e = this.peek();
    if (e === 0x2c) {
      this.p++;
      this.skipWs();
      return true;
    }
    if (e === closer) {
      this.p++;
      return false;
    }
    this.expected(closer === 0x7d ? "',' or '}'" : "',' or ']'");
  }

  /** A JSON string at p (p at the opening quote); returns the decoded text. */
  string(): string {
    const b = this.b;
    const n = this.n;
    let p = this.p + 1;
    const start = p;
    let high = 0;
    while (p < n) {
      const c = b[p];
      if (c === 0x22 || c === 0x5c || c < 0x20) break;
      high |= c;
      p++;
    }
    if (p < n && b[p] === 0x22) {
      this.p = p + 1;
      return high < 0x80 ? this.buf.toString("latin1", start, p) : this.buf.toString("utf8", start, p);
    }
    // Slow path: escapes (or an error).
    let out = high < 0x80 ? this.buf.toString("latin1", start, p) : this.buf.toString("utf8", start, p);
    let runStart = p;
    for (;;) {
      if (p >= n) {
        this.p = p;
        this.fail("InvalidJson", `unexpected end of the ${this.doc} JSON inside a string`);
      }
      const c = b[p];
      if (c === 0x22) {
        out += this.buf.toString("utf8", runStart, p);
        this.p = p + 1;
        return out;
      }
      if (c < 0x20) this.fail("InvalidJson", `control character ${describeByte(c)} inside a string`, p);
      if (c !== 0x5c) {
        p++;
        continue;
      }
      out += this.buf.toString("utf8", runStart, p);
      const escAt = p;
      if (p + 1 >= n) {
        this.p = p + 1;
        this.fail("InvalidJson", `unexpected end of the ${this.doc} JSON inside a string`);
      }
      const e = b[p + 1];
      p += 2;
      switch (e) {
        case 0x22: out += '"'; break;
        case 0x5c: out += "\\"; break;
        case 0x2f: out += "/"; break;
        case 0x62: out += "\b"; break;
        case 0x66: out += "\f"; break;
        case 0x6e: out += "\n"; break;
        case 0x72: out += "\r"; break;
        case 0x74: out += "\t"; break;
        case 0x75: {
          const u = this.hex4(p, escAt);
          p += 4;
          if (u >= 0xdc00 && u <= 0xdfff) this.fail("InvalidJson", "lone low surrogate in a \\u escape", escAt);
          if (u >= 0xd800 && u <= 0xdbff) {
            if (p + 1 < n && b[p] === 0x5c && b[p + 1] === 0x75) {
              const lo = this.hex4(p + 2, p);
              if (lo < 0xdc00 || lo > 0xdfff) this.fail("InvalidJson", "lone high surrogate in a \\u escape", escAt);
              p += 6;
              out += String.fromCharCode(u, lo);
            } else this.fail("InvalidJson", "lone high surrogate in a \\u escape", escAt);
          } else out += String.fromCharCode(u);
          break;
        }
        default:
          this.fail("InvalidJson", `invalid escape ${describeByte(e)} in a string`, escAt);
      }
      runStart = p;
    }
  }

  hex4(at: number, escAt: number): number {
    if (at + 4 > this.n) this.fail("InvalidJson", "invalid \\u escape: needs 4 hex digits", escAt);
    let v = 0;
    for (let k = 0; k < 4; k++) {
      const c = this.b[at + k];
      let d: number;
      if (c >= 0x30 && c <= 0x39) d = c - 0x30;
      else if (c >= 0x61 && c <= 0x66) d = c - 0x57;
      else if (c >= 0x41 && c <= 0x46) d = c - 0x37;
      else this.fail("InvalidJson", "invalid \\u escape: needs 4 hex digits", escAt);
      v = v * 16 + d;
    }
    return v;
  }
}

class Scanner extends JsonScanner {
  constructor(b: Uint8Array, file: string | undefined) {
    super(b, file, "header");
  }

  /**
   * A JSON number at p that must be a non-negative integer <= 2^53-1. `what` names the field
   * for messages.
   */
  uint(what: string, tensor: string): number {
    const b = this.b;
    const n = this.n;
    const start = this.p;
    let p = start;
    const negative = b[p] === 0x2d;
    if (negative) p++;
    let value = 0;
    let overflow = false;
    if (p < n && b[p] === 0x30) p++;
    else if (p < n && b[p] >= 0x31 && b[p] <= 0x39) {
      while (p < n && b[p] >= 0x30 && b[p] <= 0x39) {
        if (!overflow) {
          value = value * 10 + (b[p] - 0x30);
          if (value > MAX_SAFE) overflow = true;
        }
        p++;
      }
    } else {
      this.p = p;
      this.fail("InvalidJson", p < n ? `invalid number, found ${describeByte(b[p])}` : "unexpected end of the header JSON inside a number");
    }
    let fraction = false;
    if (p < n && b[p] === 0x2e) {
      fraction = true;
      p++;
      if (!(p < n && b[p] >= 0x30 && b[p] <= 0x39)) {
        this.p = p;
        this.fail("InvalidJson", "invalid number: no digit after '.'");
      }
      while (p < n && b[p] >= 0x30 && b[p] <= 0x39) p++;
    }
    if (p < n && (b[p] === 0x65 || b[p] === 0x45)) {
      fraction = true;
      p++;
      if (p < n && (b[p] === 0x2b || b[p] === 0x2d)) p++;
      if (!(p < n && b[p] >= 0x30 && b[p] <= 0x39)) {
        this.p = p;
        this.fail("InvalidJson", "invalid number: no digit in the exponent");
      }
      while (p < n && b[p] >= 0x30 && b[p] <= 0x39) p++;
    }
    this.p = p;
    if (negative || fraction) this.fail("InvalidTensorEntry", `${what} must hold non-negative integers`, start, tensor);
    if (overflow) this.fail("ValidationOverflow", `${what} holds an integer above 2^53-1`, start, tensor);
    return value;
  }

  /** `[uint, ...]` into `out`; returns the element count. */
  uintArray(what: string, tensor: string, out: number[] | null, max: number): number {
    const c = this.peek();
    if (c !== 0x5b) {
      if (isValueStart(c)) this.fail("InvalidTensorEntry", `${what} must be an array of non-negative integers`, this.p, tensor);
      this.expected("a value");
    }
    this.p++;
    this.skipWs();
    let count = 0;
    if (this.peek() === 0x5d) {
      this.p++;
      return 0;
    }
    for (;;) {
      const d = this.peek();
      if (d !== 0x2d && !(d >= 0x30 && d <= 0x39)) {
        if (isValueStart(d)) this.fail("InvalidTensorEntry", `${what} must hold non-negative integers`, this.p, tensor);
        this.expected("a value");
      }
      const v = this.uint(what, tensor);
      if (out && count < max) out.push(v);
      count++;
      if (this.nextOrClose(0x5d)) continue;
      return count;
    }
  }
}

// ---------------------------------------------------------------- the header

interface Collected {
  names: string[];
  dtype: number[];
  begin: number[];
  end: number[];
  shapeStart: number[];
  dims: number[];
  metadata: [string, string][] | null;
}

function scanEntry(s: Scanner, name: string, out: Collected): void {
  const c = s.peek();
  if (c !== 0x7b) {
    if (isValueStart(c)) s.fail("InvalidTensorEntry", "a tensor entry must be an object with dtype, shape and data_offsets", s.p, name);
    s.expected("a value");
  }
  const entryAt = s.p;
  s.p++;
  s.skipWs();
  let dtype = -1;
  let haveShape = false;
  let offsets: number[] | null = null;
  const dimsStart = out.dims.length;
  if (s.peek() === 0x7d) s.p++;
  else {
    for (;;) {
      const keyAt = s.p;
      const key = s.key();
      if (key === "dtype") {
        if (dtype >= 0) s.fail("DuplicateKey", "duplicate field dtype in a tensor entry", keyAt, name);
        const v = s.peek();
        if (v !== 0x22) {
          if (isValueStart(v)) s.fail("InvalidTensorEntry", "dtype must be a string", s.p, name);
          s.expected("a value");
        }
        const at = s.p;
        const text = s.string();
        dtype = dtypeCode(text);
        if (dtype < 0) s.fail("UnknownDtype", describeDtype(text), at, name);
      } else if (key === "shape") {
        if (haveShape) s.fail("DuplicateKey", "duplicate field shape in a tensor entry", keyAt, name);
        s.uintArray("shape", name, out.dims, Infinity);
        haveShape = true;
      } else if (key === "data_offsets") {
        if (offsets) s.fail("DuplicateKey", "duplicate field data_offsets in a tensor entry", keyAt, name);
        const at = s.p;
        const got: number[] = [];
        const count = s.uintArray("data_offsets", name, got, 2);
        if (count !== 2) s.fail("InvalidTensorEntry", `data_offsets must hold exactly 2 integers, found ${count}`, at, name);
        offsets = got;
      } else {
        s.fail("InvalidTensorEntry", "unknown field in a tensor entry (allowed: dtype, shape, data_offsets)", keyAt, name);
      }
      if (s.nextOrClose(0x7d)) continue;
      break;
    }
  }
  if (dtype < 0) s.fail("InvalidTensorEntry", "missing field dtype", entryAt, name);
  if (!haveShape) s.fail("InvalidTensorEntry", "missing field shape", entryAt, name);
  if (!offsets) s.fail("InvalidTensorEntry", "missing field data_offsets", entryAt, name);
  out.names.push(name);
  out.dtype.push(dtype);
  out.begin.push(offsets[0]);
  out.end.push(offsets[1]);
  out.shapeStart.push(dimsStart);
}

function scanMetadata(s: Scanner): [string, string][] | null {
  const c = s.peek();
  if (c === 0x6e) {
    if (s.p + 4 <= s.n && s.b[s.p + 1] === 0x75 && s.b[s.p + 2] === 0x6c && s.b[s.p + 3] === 0x6c) {
      s.p += 4;
      return null;
    }
    s.fail("InvalidJson", "invalid literal (expected null)");
  }
  if (c !== 0x7b) {
    if (isValueStart(c)) s.fail("InvalidMetadata", "__metadata__ must be an object of strings (or null)", s.p, "__metadata__");
    s.expected("a value");
  }
  s.p++;
  s.skipWs();
  const pairs: [string, string][] = [];
  const seen = new Set<string>();
  if (s.peek() === 0x7d) {
    s.p++;
    return pairs;
  }
  for (;;) {
    if (s.peek() !== 0x22) s.expected("a string key");
    const keyAt = s.p;
    const key = s.string();
    if (seen.has(key)) s.fail("DuplicateKey", "duplicate key in __metadata__", keyAt, "__metadata__");
    seen.add(key);
    s.skipWs();
    s.expect(0x3a, "':'");
    s.skipWs();
    const v = s.peek();
    if (v !== 0x22) {
      if (isValueStart(v)) s.fail("InvalidMetadata", "__metadata__ values must be strings", s.p, "__metadata__");
      s.expected("a value");
    }
    pairs.push([key, s.string()]);
    if (s.nextOrClose(0x7d)) continue;
    return pairs;
  }
}

function scanObject(s: Scanner): Collected {
  const out: Collected = { names: [], dtype: [], begin: [], end: [], shapeStart: [], dims: [], metadata: null };
  const seen = new Map<string, number>();
  let seenMetadata = false;
  s.skipWs();
  const c = s.peek();
  if (c !== 0x7b) {
    if (c === 0xef && s.b[s.p + 1] === 0xbb && s.b[s.p + 2] === 0xbf) s.fail("InvalidJson", "a UTF-8 byte order mark precedes the header JSON");
    if (isValueStart(c)) s.fail("InvalidHeader", "the header must be a JSON object");
    s.expected("'{'");
  }
  s.p++;
  s.skipWs();
  if (s.peek() === 0x7d) s.p++;
  else {
    for (;;) {
      const keyAt = s.p;
      const key = s.key();
      if (key === "__metadata__") {
        if (seenMetadata) s.fail("DuplicateKey", "duplicate __metadata__", keyAt, key);
        seenMetadata = true;
        out.metadata = scanMetadata(s);
      } else {
        if (seen.has(key)) s.fail("DuplicateKey", "duplicate tensor name", keyAt, key);
        seen.set(key, out.names.length);
        scanEntry(s, key, out);
      }
      if (s.nextOrClose(0x7d)) continue;
      break;
    }
  }
  s.skipWs();
  if (s.p !== s.n) s.fail("InvalidJson", `trailing ${describeByte(s.b[s.p])} after the header object`);
  return out;
}

// ---------------------------------------------------------------- layout validation

/**
 * The official layout rules: sorted by (begin, end) (ties by header order), the tensors must
 * tile the data from 0 with no gap or overlap, and each must be exactly shape x dtype bytes.
 */
function validateLayout(t: Collected, dimsEnd: number[], dataLength: number, file: string | undefined): void {
  const count = t.names.length;
  const order = new Uint32Array(count);
  let sorted = true;
  for (let i = 0; i < count; i++) {
    order[i] = i;
    if (i > 0 && (t.begin[i] < t.begin[i - 1] || (t.begin[i] === t.begin[i - 1] && t.end[i] < t.end[i - 1]))) sorted = false;
  }
  if (!sorted) {
    const idx = Array.from(order);
    idx.sort((a, b) => t.begin[a] - t.begin[b] || t.end[a] - t.end[b] || a - b);
    order.set(idx);
  }
  let start = 0;
  for (let k = 0; k < count; k++) {
    const i = order[k];
    const name = t.names[i];
    const begin = t.begin[i];
    const end = t.end[i];
    if (begin !== start || end < begin) {
      throw new SafetensorsError("InvalidOffset", `data_offsets [${begin}, ${end}] do not continue the data at byte ${start}`, { file, tensor: name });
    }
    const dims = t.dims.slice(t.shapeStart[i], dimsEnd[i]);
    const elements = shapeElements(dims);
    if (elements < 0) throw new SafetensorsError("ValidationOverflow", `shape ${formatShape(dims)} has more than 2^53-1 elements`, { file, tensor: name });
    const bytes = tensorBytes(t.dtype[i], elements);
    if (bytes === "overflow") throw new SafetensorsError("ValidationOverflow", `shape ${formatShape(dims)} of ${DTYPES[t.dtype[i]]} needs more than 2^53-1 bytes`, { file, tensor: name });
    if (bytes === "misaligned") throw new SafetensorsError("MisalignedSlice", `shape ${formatShape(dims)} of ${DTYPES[t.dtype[i]]} does not fill a whole number of bytes`, { file, tensor: name });
    if (end - begin !== bytes) {
      throw new SafetensorsError("TensorInvalidInfo", `shape ${formatShape(dims)} of ${DTYPES[t.dtype[i]]} needs ${bytes} bytes but data_offsets [${begin}, ${end}] hold ${end - begin}`, { file, tensor: name });
    }
    start = end;
  }
  if (start !== dataLength) {
    throw new SafetensorsError("MetadataIncompleteBuffer", `the tensors cover ${start} data bytes but the file holds ${dataLength} after the header`, { file });
  }
}

// ---------------------------------------------------------------- entry point

/**
 * Parses and validates header bytes (the N bytes after the length) of a file of `fileSize`
 * bytes. Throws SafetensorsError; returns the column table.
 */
export function parseHeaderTs(header: Uint8Array, fileSize: number, file?: string): HeaderTable {
  const bad = firstInvalidUtf8(header);
  if (bad >= 0) throw new SafetensorsError("InvalidUtf8", "the header is not valid UTF-8", { file, position: bad });
  const s = new Scanner(header, file);
  const t = scanObject(s);
  const count = t.names.length;
  const dimsEnd: number[] = new Array(count);
  for (let i = 0; i < count; i++) dimsEnd[i] = i + 1 < count ? t.shapeStart[i + 1] : t.dims.length;
  const dataLength = fileSize - 8 - header.length;
  validateLayout(t, dimsEnd, dataLength, file);

  const nameBuffers = t.names.map((n) => Buffer.from(n, "utf8"));
  const nameStart = new Uint32Array(count + 1);
  let total = 0;
  for (let i = 0; i < count; i++) {
    nameStart[i] = total;
    total += nameBuffers[i].length;
  }
  nameStart[count] = total;
  const nameBytes = new Uint8Array(total);
  for (let i = 0; i < count; i++) nameBytes.set(nameBuffers[i], nameStart[i]);
  const shapeStart = new Uint32Array(count + 1);
  for (let i = 0; i < count; i++) shapeStart[i] = t.shapeStart[i];
  shapeStart[count] = t.dims.length;
  const layer = new Int32Array(count);
  const expert = new Int32Array(count);
  const kind = new Uint8Array(count);
  for (let i = 0; i < count; i++) {
    const c = classifyName(t.names[i]);
    layer[i] = c.layer;
    expert[i] = c.expert;
    kind[i] = c.kind;
  }
  return {
    count,
    headerLength: header.length,
    fileSize,
    dtype: Uint8Array.from(t.dtype),
    begin: Float64Array.from(t.begin),
    end: Float64Array.from(t.end),
    shapeStart,
    dims: Float64Array.from(t.dims),
    nameStart,
    nameBytes,
    layer,
    expert,
    kind,
    metadata: t.metadata,
  };
}

/** Parses a whole in-memory file (length prefix + header + data). */
export function parseFileTs(bytes: Uint8Array, file?: string): HeaderTable {
  const n = headerLengthOf(bytes.subarray(0, 8), bytes.length, file);
  return parseHeaderTs(bytes.subarray(8, 8 + n), bytes.length, file);
}
