/**
 * The mutation fuzzer (shared by test/fuzz.test.ts and bench/fuzz.bench.ts): mutate valid files
 * (bit flips in N, digit edits in offsets/shapes, byte insertions/deletions in the JSON,
 * truncations, structural-character swaps), then require of every case:
 *   - no crash: only SafetensorsError escapes;
 *   - every accept is explained by the independent checker of helpers.ts, and every file the
 *     checker accepts is accepted;
 *   - the native and TS parsers agree exactly (tables, or error code/detail/position/tensor).
 */
import { SafetensorsError, parseSafetensors, type Checkpoint } from "../src/index.js";
import { independentCheck } from "./helpers.js";
// A dependency-free module of @k3/test-utils (which depends on this package), imported by path.
import { xorshift32 } from "../../test-utils/src/random.js";

/** Values in (0, 1) from a xorshift32 stream started at `seed`. */
export function rng(seed: number): () => number {
  const next = xorshift32(seed);
  return () => next() / 4294967296;
}

const STRUCTURAL = [..."{}[]\",:0123456789 \\u-.eE"].map((c) => c.charCodeAt(0));

/** One random mutation of a valid file. */
export function mutate(src: Uint8Array, r: () => number): { bytes: Uint8Array; kind: string } {
  // A previous mutation may have broken N: clamp the header span to the file.
  const n = Math.min(Number(new DataView(src.buffer, src.byteOffset, 8).getBigUint64(0, true)), src.length - 8);
  const hdrEnd = 8 + n;
  const pick = (lo: number, hi: number) => lo + Math.floor(r() * Math.max(1, hi - lo));
  const kind = Math.floor(r() * 8);
  const out = Uint8Array.from(src);
  switch (kind) {
    case 0: {
      // bit flip in N
      const bit = pick(0, 64);
      out[bit >> 3] ^= 1 << (bit & 7);
      return { bytes: out, kind: "flip-N" };
    }
    case 1: {
      // change a digit in the header (offsets, shapes, names)
      const digits: number[] = [];
      for (let i = 8; i < hdrEnd; i++) if (out[i] >= 0x30 && out[i] <= 0x39) digits.push(i);
      if (digits.length) out[digits[pick(0, digits.length)]] = 0x30 + pick(0, 10);
      return { bytes: out, kind: "digit" };
    }
    case 2: {
      // insert a byte (structural or random) into the JSON, keeping N consistent
      const at = pick(8, hdrEnd + 1);
      const b = r() < 0.7 ? STRUCTURAL[pick(0, STRUCTURAL.length)] : pick(0, 256);
      const res = new Uint8Array(src.length + 1);
      res.set(src.subarray(0, at));
      res[at] = b;
      res.set(src.subarray(at), at + 1);
      if (r() < 0.8) new DataView(res.buffer).setBigUint64(0, BigInt(n + 1), true);
      return { bytes: res, kind: "insert" };
    }
    case 3: {
      // delete a byte of the JSON
      if (n === 0) return { bytes: out, kind: "delete" };
      const at = pick(8, hdrEnd);
      const res = new Uint8Array(src.length - 1);
      res.set(src.subarray(0, at));
      res.set(src.subarray(at + 1), at);
      if (r() < 0.8) new DataView(res.buffer).setBigUint64(0, BigInt(n - 1), true);
      return { bytes: res, kind: "delete" };
    }
    case 4:
      // truncate anywhere
      return { bytes: src.slice(0, pick(0, src.length)), kind: "truncate" };
    case 5: {
      // replace a header byte with a structural character
      const at = pick(8, hdrEnd);
      out[at] = STRUCTURAL[pick(0, STRUCTURAL.length)];
      return { bytes: out, kind: "replace" };
    }
    case 6: {
      // random bit flip in the header
      const at = pick(8, hdrEnd);
      out[at] ^= 1 << pick(0, 8);
      return { bytes: out, kind: "flip" };
    }
    default: {
      // append or remove data bytes
      if (r() < 0.5) return { bytes: src.slice(0, Math.max(hdrEnd, src.length - pick(1, 9))), kind: "data-" };
      const res = new Uint8Array(src.length + pick(1, 9));
      res.set(src);
      return { bytes: res, kind: "data+" };
    }
  }
}

export interface FuzzReport {
  cases: number;
  accepted: number;
  rejectedByCode: Record<string, number>;
  crashes: string[];
  unexplainedAccepts: string[];
  falseRejects: string[];
  mismatches: string[];
}

type Outcome = { ok: true; ck: Checkpoint } | { ok: false; err: SafetensorsError };

function parseWith(bytes: Uint8Array, backend: "ts" | "native", report: FuzzReport, label: string): Outcome | null {
  try {
    return { ok: true, ck: parseSafetensors(bytes, { backend, name: "fuzz" }) };
  } catch (e) {
    if (e instanceof SafetensorsError) return { ok: false, err: e };
    report.crashes.push(`${label} ${backend}: ${e instanceof Error ? e.stack : String(e)}`);
    return null;
  }
}

function sameTables(a: Checkpoint, b: Checkpoint): boolean {
  const x = a.headerTables[0];
  const y = b.headerTables[0];
  const keys = ["count", "headerLength", "fileSize", "dtype", "begin", "end", "shapeStart", "dims", "nameStart", "nameBytes", "layer", "expert", "kind"] as const;
  for (const k of keys) {
    const u = x[k] as unknown;
    const v = y[k] as unknown;
    if (typeof u === "number") {
      if (u !== v) return false;
    } else {
      const p = u as ArrayLike<number>;
      const q = v as ArrayLike<number>;
      if (p.length !== q.length) return false;
      for (let i = 0; i < p.length; i++) if (p[i] !== q[i]) return false;
    }
  }
  return JSON.stringify(x.metadata) === JSON.stringify(y.metadata);
}

export function runFuzz(seeds: Uint8Array[], cases: number, seed: number, backends: ("ts" | "native")[]): FuzzReport {
  const r = rng(seed);
  const report: FuzzReport = { cases: 0, accepted: 0, rejectedByCode: {}, crashes: [], unexplainedAccepts: [], falseRejects: [], mismatches: [] };
  for (let c = 0; c < cases; c++) {
    let { bytes, kind } = mutate(seeds[c % seeds.length], r);
    if (r() < 0.25) bytes = mutate(bytes.length >= 8 ? bytes : seeds[0], r).bytes; // sometimes two mutations
    const label = `case ${c} (${kind}, seed ${seed})`;
    report.cases++;
    const outcomes = backends.map((b) => parseWith(bytes, b, report, label));
    if (outcomes.some((o) => o === null)) continue;
    const [first, second] = outcomes as Outcome[];
    const truth = independentCheck(bytes);
    if (first.ok) {
      report.accepted++;
      if (truth !== null) report.unexplainedAccepts.push(`${label}: accepted but the independent checker says ${truth}: ${Buffer.from(bytes).toString("latin1").slice(0, 300)}`);
    } else {
      report.rejectedByCode[first.err.code] = (report.rejectedByCode[first.err.code] ?? 0) + 1;
      if (truth === null) report.falseRejects.push(`${label}: rejected (${first.err.message}) but the independent checker accepts it`);
    }
    if (second) {
      if (first.ok !== second.ok) report.mismatches.push(`${label}: ts ${first.ok ? "accepts" : first.err.message} / native ${second.ok ? "accepts" : second.err.message}`);
      else if (first.ok && second.ok && !sameTables(first.ck, second.ck)) report.mismatches.push(`${label}: tables differ`);
      else if (!first.ok && !second.ok) {
        const a = first.err;
        const b = second.err;
        if (a.code !== b.code || a.detail !== b.detail || a.position !== b.position || a.tensor !== b.tensor) {
          report.mismatches.push(`${label}: ts ${a.message} / native ${b.message}`);
        }
      }
    }
  }
  return report;
}
