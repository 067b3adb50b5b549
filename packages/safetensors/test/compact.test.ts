/**
 * The native scanner reads the compact entry text writers emit ({"dtype":"X","shape":[..],
 * "data_offsets":[a,b]}) on a fast path and hands everything else to its general scanner.
 * These cases sit on the border of that path: one byte away from the compact form (white
 * space, escapes, signs, fractions, leading zeros, 2^53 limits, wrong counts). Every one must
 * give exactly the TS parser's result (values or error code, message, position, tensor), and be
 * accepted exactly when the independent checker accepts it.
 */
import { describe, expect, it } from "vitest";
import { SafetensorsError, parseSafetensors } from "../src/index.js";
import { BACKENDS, fileOf, independentCheck } from "./helpers.js";

type Outcome = { ok: unknown[] } | { code: string; message: string; position?: number; tensor?: string };

function outcome(bytes: Uint8Array, backend: "ts" | "native"): Outcome {
  try {
    const ck = parseSafetensors(bytes, { backend, name: "c.safetensors" });
    return { ok: [...ck.tensors].map((t) => [t.name, t.dtype, t.shape, t.dataOffsets]) };
  } catch (e) {
    if (!(e instanceof SafetensorsError)) throw e;
    return { code: e.code, message: e.message, position: e.position, tensor: e.tensor };
  }
}

const ENTRY = `{"dtype":"U8","shape":[2,3],"data_offsets":[0,6]}`;
const wrap = (entry: string, data = 6) => fileOf(`{"a":${entry},"b":{"dtype":"U8","shape":[0],"data_offsets":[6,6]}}`, data);

function variants(): [string, Uint8Array][] {
  const out: [string, Uint8Array][] = [["compact", wrap(ENTRY)]];
  for (let i = 0; i <= ENTRY.length; i++) {
    out.push([`space at ${i}`, wrap(ENTRY.slice(0, i) + " " + ENTRY.slice(i))]);
    if (i < ENTRY.length) out.push([`byte ${i} dropped`, wrap(ENTRY.slice(0, i) + ENTRY.slice(i + 1))]);
  }
  for (let i = 0; i < ENTRY.length; i++) {
    const c = ENTRY[i];
    if (/[a-zA-Z0-9_]/.test(c) && ENTRY.lastIndexOf('"', i) > ENTRY.lastIndexOf(":", i)) {
      // inside a key or the dtype string: the same text with one \u escape
      const esc = `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`;
      out.push([`escape at ${i}`, wrap(ENTRY.slice(0, i) + esc + ENTRY.slice(i + 1))]);
    }
  }
  const e = (shape: string, offsets: string, dtype = "U8", data = 6) => wrap(`{"dtype":"${dtype}","shape":${shape},"data_offsets":${offsets}}`, data);
  const numbers: [string, Uint8Array][] = [
    ["shape []", e("[]", "[0,1]", "U8", 1)],
    ["shape [0]", e("[0]", "[0,0]", "U8", 0)],
    ["leading zero dim", e("[02,3]", "[0,6]")],
    ["zero zero", e("[00]", "[0,0]")],
    ["negative zero", e("[-0]", "[0,0]")],
    ["negative dim", e("[-2,3]", "[0,6]")],
    ["fraction dim", e("[2.0,3]", "[0,6]")],
    ["exponent dim", e("[2e0,3]", "[0,6]")],
    ["Exponent offset", e("[2,3]", "[0,6E0]")],
    ["1 offset", e("[2,3]", "[0]")],
    ["3 offsets", e("[2,3]", "[0,6,6]")],
    ["empty offsets", e("[2,3]", "[]")],
    ["trailing comma", e("[2,3,]", "[0,6]")],
    ["2^53-1 offsets", e("[0]", "[9007199254740991,9007199254740991]", "U8", 0)],
    ["2^53 offset", e("[0]", "[9007199254740992,9007199254740992]", "U8", 0)],
    ["16-digit above 2^53", e("[0]", "[9999999999999999,9999999999999999]", "U8", 0)],
    ["17 digits", e("[0]", "[10000000000000000,10000000000000000]", "U8", 0)],
    ["15 digits", e("[0]", "[0,0]", "U8", 0)],
    ["2^53-1 dim", e("[9007199254740991,0]", "[0,0]", "U8", 0)],
    ["2^53 dim", e("[9007199254740992,0]", "[0,0]", "U8", 0)],
    ["long dtype", e("[2,3]", "[0,6]", "F8_E4M3FNUZ_AND_MORE")],
    ["longest dtype", e("[2,3]", "[0,6]", "F8_E4M3FNUZ")],
    ["unknown dtype", e("[2,3]", "[0,6]", "U9")],
    ["dtype with control byte", e("[2,3]", "[0,6]", "U\u00018")],
    ["dtype with quote escape", e("[2,3]", "[0,6]", 'U\\"8')],
    ["dtype as non-ASCII", e("[2,3]", "[0,6]", "Ü8")],
    ["size mismatch", e("[2,3]", "[0,5]", "U8", 5)],
    ["many dims", e(`[${Array(40).fill(1).join(",")}]`, "[0,1]", "U8", 1)],
  ];
  out.push(...numbers);
  // Cut the compact entry short at every byte (end of the header inside the fast path).
  const head = `{"a":${ENTRY}`;
  for (let i = 1; i < head.length; i++) out.push([`truncated at ${i}`, fileOf(head.slice(0, i))]);
  return out;
}

const CASES = variants();

describe("compact-entry fast path", () => {
  it(`agrees with the TS parser and the independent checker on ${CASES.length} near-compact headers`, () => {
    expect(CASES.length).toBeGreaterThan(200);
    let accepted = 0;
    for (const [label, bytes] of CASES) {
      const results = BACKENDS.map((b) => outcome(bytes, b));
      for (const r of results.slice(1)) expect(r, label).toEqual(results[0]);
      const independent = independentCheck(bytes);
      expect("ok" in results[0], `${label}: ${independent}`).toBe(independent === null);
      if ("ok" in results[0]) accepted++;
    }
    // Both sides of the border are exercised.
    expect(accepted).toBeGreaterThan(20);
    expect(accepted).toBeLessThan(CASES.length - 100);
  });

  it("reads the compact form's values", () => {
    for (const backend of BACKENDS) {
      const ck = parseSafetensors(wrap(ENTRY), { backend });
      expect(ck.get("a")).toMatchObject({ dtype: "U8", shape: [2, 3], dataOffsets: [0, 6] });
      expect(ck.get("b")).toMatchObject({ dtype: "U8", shape: [0], dataOffsets: [6, 6] });
    }
  });
});
