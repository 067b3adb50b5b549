/**
 * `model.safetensors.index.json`: a strict scanner (mirrored by native/src/st_index_json.c) that
 * keeps the weight map column-wise, refuses duplicate tensor names, and checks every shard path
 * before anything is opened.
 */
import { SafetensorsError } from "./errors.js";
import { describeByte, firstInvalidUtf8, isValueStart, JsonScanner } from "./scan.js";

export const MAX_SHARDS = 10_000;
export const MAX_INDEX_BYTES = 1_000_000_000;
export const MAX_JSON_DEPTH = 128;

export interface WeightMap {
  /** Tensor names in file order. */
  names: string[];
  /** Shard id of each name (index into `shards`). */
  shardOf: Uint32Array;
  /** Distinct shard file names in order of first appearance. */
  shards: string[];
  /** The raw JSON text of "metadata" (object or null), or null when absent. */
  metadataJson: string | null;
}

/** The index scanner: the shared JSON scanning plus skipping of values the index does not use. */
class IndexScanner extends JsonScanner {
  constructor(b: Uint8Array, file: string) {
    super(b, file, "index");
  }
  number(): void {
    const b = this.b;
    let p = this.p;
    if (b[p] === 0x2d) p++;
    if (p < this.n && b[p] === 0x30) p++;
    else if (p < this.n && b[p] >= 0x31 && b[p] <= 0x39) while (p < this.n && b[p] >= 0x30 && b[p] <= 0x39) p++;
    else {
      this.p = p;
      this.expected("a digit");
    }
    if (p < this.n && b[p] === 0x2e) {
      p++;
      if (!(p < this.n && b[p] >= 0x30 && b[p] <= 0x39)) {
        this.p = p;
        this.expected("a digit");
      }
      while (p < this.n && b[p] >= 0x30 && b[p] <= 0x39) p++;
    }
    if (p < this.n && (b[p] === 0x65 || b[p] === 0x45)) {
      p++;
      if (p < this.n && (b[p] === 0x2b || b[p] === 0x2d)) p++;
      if (!(p < this.n && b[p] >= 0x30 && b[p] <= 0x39)) {
        this.p = p;
        this.expected("a digit");
      }
      while (p < this.n && b[p] >= 0x30 && b[p] <= 0x39) p++;
    }
    this.p = p;
  }
  literal(word: string): void {
    for (let k = 0; k < word.length; k++) {
      if (this.p + k >= this.n || this.b[this.p + k] !== word.charCodeAt(k)) {
        this.p += k;
        this.expected(`'${word}'`);
      }
    }
    this.p += word.length;
  }
  /** Skips any JSON value, iteratively, with bounded nesting. */
  skipValue(): void {
    const stack: number[] = []; // 0x7d or 0x5d: the closer we wait for
    for (;;) {
      const c = this.peek();
      if (c === 0x7b || c === 0x5b) {
        if (stack.length >= MAX_JSON_DEPTH) this.fail("InvalidIndex", `JSON nesting deeper than ${MAX_JSON_DEPTH}`);
        this.p++;
        this.skipWs();
        const closer = c === 0x7b ? 0x7d : 0x5d;
        if (this.peek() === closer) {
          this.p++;
        } else {
          stack.push(closer);
          if (closer === 0x7d) this.key();
          continue;
        }
      } else if (c === 0x22) this.string();
      else if (c === 0x2d || (c >= 0x30 && c <= 0x39)) this.number();
      else if (c === 0x74) this.literal("true");
      else if (c === 0x66) this.literal("false");
      else if (c === 0x6e) this.literal("null");
      else this.expected("a value");
      // after a value: close containers or move to the next element
      for (;;) {
        if (stack.length === 0) return;
        this.skipWs();
        const closer = stack[stack.length - 1];
        const d = this.peek();
        if (d === 0x2c) {
          this.p++;
          this.skipWs();
          if (closer === 0x7d) this.key();
          break;
        }
        if (d === closer) {
          this.p++;
          stack.pop();
          continue;
        }
        this.expected(closer === 0x7d ? "',' or '}'" : "',' or ']'");
      }
    }
  }
}

/** Parses index.json bytes. */
export function parseIndexJson(bytes: Uint8Array, file: string): WeightMap {
  if (bytes.length > MAX_INDEX_BYTES) throw new SafetensorsError("InvalidIndex", `the index is larger than ${MAX_INDEX_BYTES} bytes`, { file });
  const bad = firstInvalidUtf8(bytes);
  if (bad >= 0) throw new SafetensorsError("InvalidUtf8", "the index is not valid UTF-8", { file, position: bad });
  const s = new IndexScanner(bytes, file);
  const names: string[] = [];
  const shardIds: number[] = [];
  const shards: string[] = [];
  const shardId = new Map<string, number>();
  const namePositions: number[] = [];
  let metadataJson: string | null = null;
  let haveMap = false;
  let haveMeta = false;
  s.skipWs();
  const c = s.peek();
  if (c !== 0x7b) {
    if (c === 0xef) s.fail("InvalidJson", "a UTF-8 byte order mark precedes the index JSON");
    if (isValueStart(c)) s.fail("InvalidIndex", "the index must be a JSON object");
    s.expected("'{'");
  }
  s.p++;
  s.skipWs();
  if (s.peek() === 0x7d) s.p++;
  else
    for (;;) {
      const keyAt = s.p;
      const key = s.key();
      if (key === "weight_map") {
        if (haveMap) s.fail("DuplicateKey", "duplicate weight_map", keyAt);
        haveMap = true;
        const v = s.peek();
        if (v !== 0x7b) {
          if (isValueStart(v)) s.fail("InvalidIndex", "weight_map must be an object of tensor name -> shard file");
          s.expected("a value");
        }
        s.p++;
        s.skipWs();
        if (s.peek() === 0x7d) s.p++;
        else
          for (;;) {
            const nameAt = s.p;
            const name = s.key();
            const w = s.peek();
            if (w !== 0x22) {
              if (isValueStart(w)) s.fail("InvalidIndex", "weight_map values must be shard file names (strings)", s.p, name);
              s.expected("a value");
            }
            const shard = s.string();
            let id = shardId.get(shard);
            if (id === undefined) {
              id = shards.length;
              if (id >= MAX_SHARDS) s.fail("InvalidIndex", `more than ${MAX_SHARDS} shard files`, nameAt, name);
              shards.push(shard);
              shardId.set(shard, id);
            }
            names.push(name);
            namePositions.push(nameAt);
            shardIds.push(id);
            if (s.nextOrClose(0x7d)) continue;
            break;
          }
      } else if (key === "metadata") {
        if (haveMeta) s.fail("DuplicateKey", "duplicate metadata", keyAt);
        haveMeta = true;
        const v = s.peek();
        if (v !== 0x7b && v !== 0x6e) {
          if (isValueStart(v)) s.fail("InvalidIndex", "metadata must be an object");
          s.expected("a value");
        }
        const at = s.p;
        s.skipValue();
        metadataJson = s.buf.toString("utf8", at, s.p);
      } else s.skipValue();
      if (s.nextOrClose(0x7d)) continue;
      break;
    }
  s.skipWs();
  if (s.p !== s.n) s.fail("InvalidJson", `trailing ${describeByte(s.b[s.p])} after the index object`);
  if (!haveMap) s.fail("InvalidIndex", "missing weight_map", 0);
  // Duplicates are checked once the whole index parsed (the native scanner batches this step).
  const seenNames = new Set<string>();
  for (let k = 0; k < names.length; k++) {
    if (seenNames.has(names[k])) s.fail("DuplicateKey", "tensor listed twice in weight_map", namePositions[k], names[k]);
    seenNames.add(names[k]);
  }
  return { names, shardOf: Uint32Array.from(shardIds), shards, metadataJson };
}
