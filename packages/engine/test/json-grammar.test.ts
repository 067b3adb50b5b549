// The byte-level JSON recognizer behind JSON mode (json-grammar.ts) and the schema subset
// (json-schema.ts): every prefix of valid JSON is viable, invalid texts are refused, completion
// agrees with JSON.parse on random texts, and minCompletion is exactly the shortest completion.
import { describe, expect, it } from "vitest";
import { ANY_OBJECT, initialState, isComplete, minCompletion, step, stepBytes, MAX_WS, type JsonState, type SchemaNode } from "../src/json-grammar.js";
import { compileSchema, SchemaError } from "../src/json-schema.js";
import { Pcg32 } from "../src/sampler.js";

const enc = new TextEncoder();
const bytes = (s: string | Uint8Array) => (typeof s === "string" ? enc.encode(s) : s);

/** The first byte offset refused, -1 when all are taken; and whether the value is complete. */
function run(schema: SchemaNode, text: string | Uint8Array): { refusedAt: number; complete: boolean; state: JsonState | null } {
  const b = bytes(text);
  let s: JsonState | null = initialState(schema);
  for (let i = 0; i < b.length; i++) {
    s = step(s, b[i]);
    if (!s) return { refusedAt: i, complete: false, state: null };
  }
  return { refusedAt: -1, complete: isComplete(s!), state: s };
}

const VALID = [
  "{}",
  ' { "a" : 1 } ',
  '{"a":[1,2.5,-0.25e+10,0,-0,1E3,true,false,null,"x",{"b":{}}],"c":"\\u00e9\\n\\"\\\\\\/"}',
  '{"ünï":"日本語 🎉","":""}',
  '{"deep":[[[[[{"x":[]}]]]]],"n":-12.0e-3}',
  '{\n  "pretty": [\n    1,\n    2\n  ]\n}',
].map((s) => s.trimEnd());

const INVALID = [
  '{"a":01}', '{"a":}', "{,}", '{"a" 1}', '{"a":1,}', '{"a":[1,]}', '{"a":+1}', '{"a":.5}', '{"a":1.}', '{"a":1e}',
  '{"a":tru}', '{"a":True}', "{a:1}", '{"a":"\\x"}', '{"a":"\\u12G4"}', '{"a":"tab\there"}', '{"a":1}}', '{"a":1} x', "[1]", '"s"', "1",
];

describe("JSON recognizer", () => {
  it("takes every prefix of valid JSON objects and completes exactly at their end", () => {
    for (const text of VALID) {
      const b = bytes(text);
      let s: JsonState | null = initialState(ANY_OBJECT);
      for (let i = 0; i < b.length; i++) {
        expect(isComplete(s!), `${text} complete too early at ${i}`).toBe(false);
        s = step(s!, b[i]);
        expect(s, `${text} refused at byte ${i}`).not.toBeNull();
      }
      expect(isComplete(s!), text).toBe(true);
      expect(JSON.parse(text)).toBeTypeOf("object");
    }
  });

  it("refuses invalid JSON and anything after the value", () => {
    for (const text of INVALID) {
      const r = run(ANY_OBJECT, text);
      expect(r.refusedAt >= 0 || !r.complete, text).toBe(true);
    }
  });

  it("refuses broken UTF-8 in strings: stray continuation, overlong, surrogate, > U+10FFFF, truncated", () => {
    for (const seq of [[0x80], [0xc0, 0x80], [0xc1, 0xbf], [0xe0, 0x80, 0x80], [0xed, 0xa0, 0x80], [0xf4, 0x90, 0x80, 0x80], [0xf5], [0xff], [0xc3, 0x22]]) {
      const text = Uint8Array.from([...enc.encode('{"a":"'), ...seq, ...enc.encode('"}')]);
      expect(run(ANY_OBJECT, text).refusedAt, seq.join(",")).toBeGreaterThanOrEqual(6);
    }
    expect(run(ANY_OBJECT, Uint8Array.from([...enc.encode('{"a":"'), 0xf0, 0x9f, 0x8e, 0x89, ...enc.encode('"}')])).complete).toBe(true);
  });

  it(`bounds whitespace runs at ${MAX_WS} bytes`, () => {
    expect(run(ANY_OBJECT, "{" + " ".repeat(MAX_WS) + "}").complete).toBe(true);
    expect(run(ANY_OBJECT, "{" + " ".repeat(MAX_WS + 1) + "}").refusedAt).toBe(MAX_WS + 1);
  });

  it("agrees with JSON.parse on 20,000 random texts over JSON's alphabet", () => {
    const rng = new Pcg32(7, 1);
    const alphabet = ['{', '}', '[', ']', '"', ':', ',', ' ', '0', '1', '-', '.', 'e', '+', 'a', '\\', 'n', 'u', 'l', 't', 'r', 'f', '"a":', '{"a":', '"x"', 'true', 'null', '1.5'];
    let completeCount = 0;
    for (let k = 0; k < 20000; k++) {
      let text = "{";
      const n = 1 + Math.floor(rng.nextUnit() * 12);
      for (let j = 0; j < n; j++) text += alphabet[Math.floor(rng.nextUnit() * alphabet.length)];
      if (rng.nextUnit() < 0.5) text += "}";
      text = text.trimEnd();
      let parsed: unknown;
      let ok = true;
      try {
        parsed = JSON.parse(text);
      } catch {
        ok = false;
      }
      ok = ok && parsed !== null && typeof parsed === "object" && !Array.isArray(parsed);
      const r = run(ANY_OBJECT, text);
      expect(r.refusedAt < 0 && r.complete, text).toBe(ok);
      if (ok) completeCount++;
    }
    expect(completeCount).toBeGreaterThan(50);
  });
});

/** The byte that makes minCompletion drop by one, checking that none drops it by more. */
function checkMinCompletion(start: JsonState, label: string): void {
  let s = start;
  let m = minCompletion(s);
  for (let left = m; left > 0; left--) {
    let next: JsonState | null = null;
    for (let b = 0; b < 256; b++) {
      const t = step(s, b);
      if (!t) continue;
      const mt = minCompletion(t);
      expect(mt, `${label}: byte ${b} shortens the completion by more than one byte`).toBeGreaterThanOrEqual(left - 1);
      if (mt === left - 1 && !next) next = t;
    }
    expect(next, `${label}: no byte shortens the completion (${left} left)`).not.toBeNull();
    s = next!;
  }
  expect(isComplete(s), `${label}: ${m} bytes did not complete it`).toBe(true);
  m = 0;
}

const SCHEMA = compileSchema({
  type: "object",
  properties: {
    name: { type: "string", description: "who" },
    age: { type: "integer" },
    tags: { type: "array", items: { type: "string" } },
    mood: { enum: ["happy", "sad", 1, 12, null] },
    ok: { type: "boolean" },
    nested: { type: "object", properties: { x: { type: "number" }, y: { type: "null" } }, required: ["y"] },
    free: { type: "object" },
  },
  required: ["name", "age", "nested"],
  additionalProperties: false,
});

describe("shortest completion", () => {
  it("is exact (reached byte by byte, never beaten) at every prefix of valid texts, with and without a schema", () => {
    for (const text of VALID) {
      const b = bytes(text);
      for (let i = 0; i < b.length; i++) checkMinCompletion(stepBytes(initialState(ANY_OBJECT), b.subarray(0, i))!, `${text}[:${i}]`);
    }
    const doc = '{"name":"Ann","age":-7,"tags":["a","b"],"mood":12,"ok":false,"nested":{"x":1.5e3,"y":null},"free":{"q":[1]}}';
    for (let i = 0; i < doc.length; i++) checkMinCompletion(stepBytes(initialState(SCHEMA), bytes(doc.slice(0, i)))!, `schema ${doc.slice(0, i)}`);
    expect(minCompletion(initialState(SCHEMA))).toBe('{"name":"","age":0,"nested":{"y":null}}'.length);
  });
});

describe("JSON schema subset", () => {
  it("takes texts of the schema", () => {
    for (const doc of [
      '{"name":"Ann","age":3,"nested":{"y":null}}',
      '{"name":"Ann","age":-7,"tags":[],"mood":"sad","nested":{"x":-0.5,"y":null},"free":{}}',
      '{ "name" : "B", "age" : 0, "mood" : 1, "ok": true, "nested": { "y": null } }',
      '{"name":"","age":1,"mood":null,"nested":{"y":null}}',
    ]) {
      expect(run(SCHEMA, doc).complete, doc).toBe(true);
    }
  });

  it("refuses missing required members, extra or reordered keys, wrong types, non-integers and values outside the enum", () => {
    for (const doc of [
      '{"name":"Ann","nested":{"y":null}}',
      '{"age":3,"name":"Ann","nested":{"y":null}}',
      '{"name":"Ann","age":3,"extra":1,"nested":{"y":null}}',
      '{"name":1,"age":3,"nested":{"y":null}}',
      '{"name":"Ann","age":3.5,"nested":{"y":null}}',
      '{"name":"Ann","age":3,"mood":"angry","nested":{"y":null}}',
      '{"name":"Ann","age":3,"mood":123,"nested":{"y":null}}',
      '{"name":"Ann","age":3,"nested":{}}',
      '{"name":"Ann","age":3,"tags":[1],"nested":{"y":null}}',
      '{"name":"Ann","age":3,"ok":"yes","nested":{"y":null}}',
    ]) {
      const r = run(SCHEMA, doc);
      expect(r.refusedAt >= 0 || !r.complete, doc).toBe(true);
    }
  });

  it("refuses unsupported keywords by name", () => {
    const bad = (schema: unknown) => {
      try {
        compileSchema(schema);
      } catch (e) {
        expect(e).toBeInstanceOf(SchemaError);
        return (e as Error).message;
      }
      throw new Error("accepted");
    };
    expect(bad({ type: "object", properties: { a: { type: "integer", minimum: 0, maximum: 9 } } })).toMatch(/schema\.properties\.a: unsupported keywords minimum, maximum/);
    expect(bad({ type: "object", properties: { a: { anyOf: [{ type: "string" }] } } })).toMatch(/schema\.properties\.a: .*anyOf/);
    expect(bad({ type: "object", properties: { a: { type: ["string", "null"] } } })).toMatch(/schema\.properties\.a\.type/);
    expect(bad({ type: "object", additionalProperties: true })).toMatch(/additionalProperties/);
    expect(bad({ type: "object", properties: {}, required: ["x"] })).toMatch(/required: "x" is not in properties/);
    expect(bad({ type: "string" })).toMatch(/top level must be/);
    expect(bad({ $ref: "#/defs/x" })).toMatch(/\$ref/);
  });
});
