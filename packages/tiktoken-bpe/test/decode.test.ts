// Decoding: bytes, WHATWG replacement, no BOM stripping, unknown ids, streaming that never emits
// half a character; every single-byte token and (Kimi) every token that is not UTF-8 on its own.
import { describe, expect, it } from "vitest";
import { getEncoding, UnknownTokenError } from "../src/index.js";
import { hasKimi, kimi } from "./helpers.js";

const cl = getEncoding("cl100k_base");
const o2 = getEncoding("o200k_base");

describe("decode", () => {
  it("partial UTF-8: 😀 is one o200k token, two cl100k tokens", () => {
    expect(Array.from(o2.encode("😀"))).toEqual([84083]);
    expect(Array.from(cl.encode("😀"))).toEqual([76460, 222]);
    expect(Array.from(cl.decodeBytes([76460]))).toEqual([0xf0, 0x9f, 0x98]);
    expect(cl.decode([76460])).toBe("\ufffd"); // one maximal invalid subpart
    expect(cl.decode([76460, 222])).toBe("😀");
  });

  it("keeps a leading BOM and replaces per maximal subpart (WHATWG)", () => {
    expect(o2.decode(o2.encode("\ufeffa"))).toBe("\ufeffa");
    const bytes = [0xff, 0xf0, 0x9f, 0x41, 0xc0, 0xaf, 0xed, 0xa0, 0x80];
    const ids = bytes.map((b) => o2.encodeOrdinary(String.fromCharCode(b)).length === 1 ? -1 : -1);
    expect(ids.length).toBe(9);
    // Build ids of raw bytes through the single-byte tokens.
    const single = new Map<number, number>();
    for (let id = 0; id < 300 && single.size < 256; id++) {
      const b = o2.decodeBytes([id]);
      if (b.length === 1) single.set(b[0], id);
    }
    expect(single.size).toBe(256);
    const decoded = o2.decode(bytes.map((b) => single.get(b) as number));
    expect(decoded).toBe(new TextDecoder("utf-8", { ignoreBOM: true }).decode(new Uint8Array(bytes)));
    expect(decoded).toBe("\ufffd\ufffdA\ufffd\ufffd\ufffd\ufffd\ufffd");
  });

  it("specials decode to their text; unknown ids throw with the position", () => {
    expect(cl.decode([...cl.encode("a<|endoftext|>b", { allowedSpecial: "all" })])).toBe("a<|endoftext|>b");
    expect(() => cl.decode([1, 100261])).toThrow(UnknownTokenError);
    expect(() => cl.decode([1, 100261])).toThrow(/100261 at position 1/);
    expect(() => cl.decode([-1])).toThrow(/-1/);
    expect(() => cl.decode([1.5])).toThrow(UnknownTokenError);
    expect(cl.decodeBytes(new Uint32Array([]))).toEqual(new Uint8Array());
  });

  it("stream decoder never emits half a character", () => {
    const text = "a😀b中\u{20000}é\ufeff!";
    const ids = cl.encode(text);
    const d = cl.streamDecoder();
    let out = "";
    for (const id of ids) {
      const piece = d.push(id);
      expect(piece).not.toMatch(/\ufffd/);
      out += piece;
    }
    out += d.flush();
    expect(out).toBe(text);
    // An unfinished tail becomes U+FFFD on flush.
    const d2 = cl.streamDecoder();
    expect(d2.push(76460)).toBe("");
    expect(d2.flush()).toBe("\ufffd");
  });

  it("every single-byte token decodes to its byte", () => {
    for (const tok of [cl, o2]) {
      let singles = 0;
      for (let id = 0; id < 256; id++) if (tok.decodeBytes([id]).length === 1) singles++;
      expect(singles).toBe(256); // both vocabularies put the 256 bytes at ranks 0..255
    }
  });

  (hasKimi ? it : it.skip)("Kimi: the 1,172 tokens that are not UTF-8 alone, one by one and in pairs", () => {
    const tok = kimi("native" in process ? "typescript" : "typescript");
    const strict = new TextDecoder("utf-8", { fatal: true });
    const lax = new TextDecoder("utf-8", { ignoreBOM: true });
    const invalid: number[] = [];
    for (let id = 0; id < tok.nRanks; id++) {
      const b = tok.decodeBytes([id]);
      try {
        strict.decode(b);
      } catch {
        invalid.push(id);
      }
    }
    expect(invalid.length).toBe(1172);
    for (let i = 0; i < invalid.length; i++) {
      const pair = [invalid[i], invalid[(i * 7 + 1) % invalid.length]];
      expect(tok.decode([invalid[i]])).toBe(lax.decode(tok.decodeBytes([invalid[i]])));
      expect(tok.decode(pair)).toBe(lax.decode(tok.decodeBytes(pair)));
    }
  });
});
