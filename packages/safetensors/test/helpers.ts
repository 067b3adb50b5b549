/** Test helpers: building files by hand, and an independent checker used to explain fuzz accepts. */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll } from "vitest";
import { defaultBackend, nativeUnavailableReason } from "../src/index.js";

/** Backends to run every test against: always "ts", plus "native" when the addon loads. */
export const BACKENDS: ("ts" | "native")[] = nativeUnavailableReason() === null ? ["ts", "native"] : ["ts"];
if (BACKENDS.length === 1) console.warn(`[safetensors tests] native backend skipped: ${nativeUnavailableReason()}`);
export { defaultBackend };

// Every temp directory a test file makes is removed when that file ends (each file imports this
// module afresh, so the hook belongs to the importing file). The bench imports the fuzz seeds
// outside vitest, where there is no file to hook.
const made: string[] = [];
if (process.env.VITEST)
  afterAll(() => {
    for (const dir of made.splice(0)) rmSync(dir, { recursive: true, force: true });
  });

/** A fresh directory under the temp dir, removed after the test file. */
export function tempDir(tag: string): string {
  return removedAfterFile(mkdtempSync(join(tmpdir(), `k3-st-${tag}-`)));
}

/** Removes `path` (file or directory) after the test file; returns it. */
export function removedAfterFile(path: string): string {
  made.push(path);
  return path;
}

/** 8-byte LE length + header text (or raw bytes) + `data` (bytes or a length of patterned bytes). */
export function fileOf(header: string | Uint8Array, data: number | Uint8Array = 0, lengthOverride?: bigint): Uint8Array {
  const h = typeof header === "string" ? Buffer.from(header, "utf8") : header;
  const d = typeof data === "number" ? Uint8Array.from({ length: data }, (_, i) => (i * 7 + 3) & 255) : data;
  const out = new Uint8Array(8 + h.length + d.length);
  new DataView(out.buffer).setBigUint64(0, lengthOverride ?? BigInt(h.length), true);
  out.set(h, 8);
  out.set(d, 8 + h.length);
  return out;
}

const BITS: Record<string, number> = {
  BOOL: 8, F4: 4, F6_E2M3: 6, F6_E3M2: 6, U8: 8, I8: 8, F8_E5M2: 8, F8_E4M3: 8, F8_E8M0: 8, F8_E4M3FNUZ: 8, F8_E5M2FNUZ: 8,
  I16: 16, U16: 16, F16: 16, BF16: 16, I32: 32, U32: 32, F32: 32, C64: 64, F64: 64, I64: 64, U64: 64,
};

/**
 * A deliberately simple, independent validity check: fatal TextDecoder + JSON.parse, a regex
 * walk for duplicate keys and non-integer numbers, BigInt arithmetic for sizes. It shares no
 * code with the library. Returns null when the file is valid, else a reason.
 */
export function independentCheck(bytes: Uint8Array): string | null {
  if (bytes.length < 8) return "short";
  const n = new DataView(bytes.buffer, bytes.byteOffset, 8).getBigUint64(0, true);
  if (n > 100_000_000n || 8n + n > BigInt(bytes.length)) return "length";
  let text: string;
  try {
    text = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true }).decode(bytes.subarray(8, 8 + Number(n)));
  } catch {
    return "utf8";
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    return "json";
  }
  if (!parsed || typeof parsed !== "object" || Array.isArray(parsed)) return "not object";
  // Tokens outside strings: numbers must be plain digits; keys must not repeat within an object.
  const token = /"(?:[^"\\]|\\.)*"|[{}\[\]:,]|[-+0-9.eE]+|true|false|null|\s+/gy;
  const stack: Set<string>[] = [];
  let lastString: string | null = null;
  let m: RegExpExecArray | null;
  while ((m = token.exec(text))) {
    const t = m[0];
    if (t[0] === '"') lastString = t;
    else if (t === "{") stack.push(new Set());
    else if (t === "}") stack.pop();
    else if (t === ":") {
      const keys = stack[stack.length - 1];
      const key = JSON.parse(lastString!) as string;
      if (keys.has(key)) return "duplicate";
      keys.add(key);
    } else if (/^[-+0-9.eE]+$/.test(t) && !/^[0-9]+$/.test(t)) return "non-integer";
    if (/\\u[dD][89a-fA-F]/.test(t) && !(JSON.parse(t) as unknown as { isWellFormed(): boolean }).isWellFormed()) return "lone surrogate";
  }
  const entries: [bigint, bigint, bigint][] = [];
  for (const [name, v] of Object.entries(parsed as Record<string, unknown>)) {
    if (name === "__metadata__") {
      if (v === null) continue;
      if (typeof v !== "object" || Array.isArray(v)) return "metadata";
      for (const x of Object.values(v as object)) if (typeof x !== "string") return "metadata value";
      continue;
    }
    if (!v || typeof v !== "object" || Array.isArray(v)) return "entry";
    const e = v as Record<string, unknown>;
    const keys = Object.keys(e).sort().join(",");
    if (keys !== "data_offsets,dtype,shape") return "fields";
    if (typeof e.dtype !== "string" || !(e.dtype in BITS) || !Object.prototype.hasOwnProperty.call(BITS, e.dtype)) return "dtype";
    const ints = (a: unknown) => Array.isArray(a) && a.every((x) => Number.isSafeInteger(x) && (x as number) >= 0);
    if (!ints(e.shape) || !ints(e.data_offsets) || (e.data_offsets as number[]).length !== 2) return "ints";
    let elems = 1n;
    for (const d of e.shape as number[]) elems *= BigInt(d);
    const bits = elems * BigInt(BITS[e.dtype]);
    if (bits % 8n !== 0n) return "misaligned";
    const [b, en] = (e.data_offsets as number[]).map(BigInt);
    if (en < b || en - b !== bits / 8n) return "size";
    if (elems > BigInt(Number.MAX_SAFE_INTEGER) || bits / 8n > BigInt(Number.MAX_SAFE_INTEGER)) return "overflow";
    entries.push([b, en, 0n]);
  }
  entries.sort((x, y) => (x[0] < y[0] ? -1 : x[0] > y[0] ? 1 : x[1] < y[1] ? -1 : x[1] > y[1] ? 1 : 0));
  let at = 0n;
  for (const [b, e] of entries) {
    if (b !== at) return "offsets";
    at = e;
  }
  if (8n + n + at !== BigInt(bytes.length)) return "coverage";
  return null;
}
