// decode/decodeBytes against tiktoken@1.0.22 (WASM) for every encoding and backend: the corpora
// (when K3_TEST_DATA has them), whole and in calls of 1-16 ids that split characters; random ids
// over the whole vocabulary (specials, lone bytes, the tokens that are not UTF-8 alone); random
// Unicode (every plane, lone surrogates) cut at random ids; and every invalid byte sequence of up
// to 4 bytes over the bytes where UTF-8 decoders differ, against WHATWG TextDecoder. The native
// decode copies with plain C (no SIMD variants), so there is no SIMD level to force here.
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { UnknownTokenError, type Tokenizer } from "../src/index.js";
import { nativeBinding } from "../src/native.js";
import { backends, dataDir, hasKimi, oracle, rng, tokenizer } from "./helpers.js";

const encodings = ["cl100k_base", "o200k_base", "kimi"] as const;
const whatwg = new TextDecoder("utf-8", { ignoreBOM: true });
const corpusDir = join(dataDir, "corpus");
const corpora = ["en.txt", "zh.txt"].filter((f) => existsSync(join(corpusDir, f)));
if (corpora.length < 2) console.warn(`[tiktoken-bpe] decode corpus tests skipped: no en.txt/zh.txt in ${corpusDir} (set K3_TEST_DATA)`);

interface WasmDecoder {
  decode(ids: Uint32Array): Uint8Array;
  encode_ordinary(text: string): Uint32Array;
}
const wasm = (enc: (typeof encodings)[number]) => oracle(enc) as unknown as WasmDecoder;

/** Random text over every plane: ASCII, 2/3/4-byte characters, BOM, U+FFFD, lone surrogates. */
function randomUnicode(next: () => number, n: number): string {
  let s = "";
  for (let i = 0; i < n; i++) {
    const u = next();
    if (u < 0.3) s += String.fromCharCode(0x20 + Math.floor(next() * 0x5f));
    else if (u < 0.45) s += String.fromCharCode(0x80 + Math.floor(next() * 0x780));
    else if (u < 0.7) s += String.fromCharCode(0x4e00 + Math.floor(next() * 0x5200));
    else if (u < 0.8) s += String.fromCodePoint(0x10000 + Math.floor(next() * 0x100000));
    else if (u < 0.85) s += ["\ufeff", "\ufffd", "\u0085", "\u2028", "\uffff", "\u0000"][Math.floor(next() * 6)];
    else if (u < 0.9) s += String.fromCharCode(0xd800 + Math.floor(next() * 0x800)); // lone surrogate
    else if (u < 0.95) s += "😀👩‍👧🇯🇵"[Math.floor(next() * 8)] ?? "x";
    else s += " \n\t"[Math.floor(next() * 3)];
  }
  return s;
}

/** Cuts ids into calls of 1..16 ids (random sizes). */
function calls(ids: Uint32Array, next: () => number): Uint32Array[] {
  const out: Uint32Array[] = [];
  for (let i = 0; i < ids.length; ) {
    const k = 1 + Math.floor(next() * 16);
    out.push(ids.subarray(i, i + k));
    i += k;
  }
  return out;
}

/** Checks one call both ways (Uint32Array and number[]) against tiktoken's bytes. */
function checkCall(tok: Tokenizer, o: WasmDecoder, ids: Uint32Array, what: string) {
  const bytes = o.decode(ids);
  const got = tok.decodeBytes(ids);
  expect(got instanceof Uint8Array && Buffer.compare(got, bytes) === 0, `${what}: decodeBytes`).toBe(true);
  const text = whatwg.decode(bytes);
  expect(tok.decode(ids), `${what}: decode`).toBe(text);
  expect(tok.decode(Array.from(ids)), `${what}: decode(number[])`).toBe(text);
}

for (const enc of encodings) {
  for (const backend of backends) {
    const run = enc === "kimi" && !hasKimi ? describe.skip : describe;
    run(`${enc} (${backend}) decode vs tiktoken`, () => {
      (corpora.length === 2 ? it : it.skip)("corpora: whole and in calls of 1-16 ids", () => {
        const tok = tokenizer(enc, backend);
        const o = wasm(enc);
        const next = rng(0xdec0de + enc.length);
        for (const f of corpora) {
          // 128 K characters of each corpus keep the test short (pnpm bench:decode runs them whole).
          const text = readFileSync(join(corpusDir, f), "utf8").slice(0, 128 * 1024);
          const ids = o.encode_ordinary(text);
          const bytes = o.decode(ids);
          expect(Buffer.compare(tok.decodeBytes(ids), bytes), f).toBe(0);
          expect(tok.decode(ids), f).toBe(text);
          expect(tok.decode(Array.from(ids)), f).toBe(text);
          let split = 0;
          for (const c of calls(ids, next)) {
            const b = o.decode(c);
            if (whatwg.decode(b).includes("\ufffd")) split++;
            checkCall(tok, o, c, f);
          }
          if (f === "zh.txt") expect(split, "some calls split a character").toBeGreaterThan(0);
        }
      });

      it("random ids over the whole vocabulary (specials, lone bytes, partial characters)", () => {
        const tok = tokenizer(enc, backend);
        const o = wasm(enc);
        const next = rng(0x1d5 + enc.length);
        const specials = [...tok.specialTokens.values()];
        for (let c = 0; c < 3000; c++) {
          const n = 1 + Math.floor(next() * 24);
          const ids = new Uint32Array(n);
          for (let i = 0; i < n; i++) {
            const u = next();
            ids[i] = u < 0.1 ? specials[Math.floor(next() * specials.length)] : u < 0.4 ? Math.floor(next() * 256) : Math.floor(next() * tok.nRanks);
          }
          checkCall(tok, o, ids, `ids ${Array.from(ids)}`);
        }
      });

      it("random Unicode (all planes, lone surrogates) cut into calls of 1-16 ids", () => {
        const tok = tokenizer(enc, backend);
        const o = wasm(enc);
        const next = rng(0xface + enc.length);
        for (let c = 0; c < 300; c++) {
          const text = randomUnicode(next, 1 + Math.floor(next() * 200));
          const ids = o.encode_ordinary(text);
          expect(tok.decode(ids)).toBe(Buffer.from(text, "utf8").toString("utf8"));
          for (const part of calls(ids, next)) checkCall(tok, o, part, JSON.stringify(text));
        }
      });

      // The byte path is the same for every vocabulary: cl100k only, each backend.
      if (enc === "cl100k_base") it("every sequence of up to 4 bytes over the decoder edge bytes matches WHATWG TextDecoder", () => {
        const tok = tokenizer(enc, backend);
        const o = wasm(enc);
        // ids of the 256 single bytes
        const byteId = new Uint32Array(256).fill(0xffffffff);
        for (let id = 0; id < 512 && id < tok.nRanks; id++) {
          const b = tok.decodeBytes([id]);
          if (b.length === 1) byteId[b[0]] = id;
        }
        expect(byteId.every((x) => x !== 0xffffffff)).toBe(true);
        const edge = [0x00, 0x41, 0x7f, 0x80, 0x8f, 0x90, 0x9f, 0xa0, 0xbf, 0xc0, 0xc1, 0xc2, 0xdf, 0xe0, 0xe1, 0xec, 0xed, 0xee, 0xef, 0xf0, 0xf1, 0xf3, 0xf4, 0xf5, 0xff];
        const all: number[] = [];
        let seqs = 0;
        const visit = (prefix: number[]) => {
          if (prefix.length > 0) {
            // Up to 3 bytes as a call of its own (the sequence ends the input); all inside one long call.
            if (prefix.length <= 3) checkCall(tok, o, new Uint32Array(prefix.map((b) => byteId[b])), `bytes ${prefix.map((b) => b.toString(16))}`);
            all.push(...prefix, 0x41); // 'A' ends any unfinished sequence
            seqs++;
          }
          if (prefix.length < 4) for (const b of edge) visit([...prefix, b]);
        };
        visit([]);
        expect(seqs).toBe(25 + 25 ** 2 + 25 ** 3 + 25 ** 4);
        const ids = new Uint32Array(all.map((b) => byteId[b]));
        expect(Buffer.compare(tok.decodeBytes(ids), Buffer.from(all))).toBe(0);
        expect(tok.decode(ids)).toBe(whatwg.decode(new Uint8Array(all)));
      });

      it("streamDecoder: every push returns what a streaming TextDecoder returns for the id's bytes", () => {
        const tok = tokenizer(enc, backend);
        const o = wasm(enc);
        const next = rng(0x57e4 + enc.length);
        const specials = [...tok.specialTokens.values()];
        const one = new Uint32Array(1);
        for (let c = 0; c < 400; c++) {
          const d = tok.streamDecoder();
          const ref = new TextDecoder("utf-8", { ignoreBOM: true });
          const n = 1 + Math.floor(next() * 40);
          for (let i = 0; i < n; i++) {
            const u = next();
            // lone bytes (many of them lead or continuation bytes), specials, any rank
            const id = u < 0.05 ? specials[Math.floor(next() * specials.length)] : u < 0.6 ? Math.floor(next() * 256) : Math.floor(next() * tok.nRanks);
            one[0] = id;
            expect(d.push(id), `case ${c} push ${i} (id ${id})`).toBe(ref.decode(o.decode(one), { stream: true }));
          }
          expect(d.flush(), `case ${c} flush`).toBe(ref.decode());
          expect(d.flush()).toBe("");
        }
        // Every sequence of up to 4 edge bytes, one byte per push, then flushed.
        const byteId = new Map<number, number>();
        for (let id = 0; id < 512 && byteId.size < 256; id++) {
          const b = tok.decodeBytes([id]);
          if (b.length === 1) byteId.set(b[0], id);
        }
        const edge = [0x41, 0x80, 0x8f, 0x90, 0x9f, 0xa0, 0xbf, 0xc0, 0xc2, 0xdf, 0xe0, 0xe1, 0xed, 0xef, 0xf0, 0xf1, 0xf4, 0xf5];
        const visit = (prefix: number[]) => {
          if (prefix.length) {
            const d = tok.streamDecoder();
            const ref = new TextDecoder("utf-8", { ignoreBOM: true });
            for (const b of prefix) expect(d.push(byteId.get(b)!), prefix.join(",")).toBe(ref.decode(new Uint8Array([b]), { stream: true }));
            expect(d.flush(), prefix.join(",")).toBe(ref.decode());
          }
          if (prefix.length < 4) for (const b of edge) visit([...prefix, b]);
        };
        visit([]);
        expect(() => tok.streamDecoder().push(tok.nVocab + 1)).toThrow(UnknownTokenError);
      });

      it("large outputs: past the reused buffer and past the 16 MB one-off size", () => {
        const tok = tokenizer(enc, backend);
        let longest = 0;
        for (let id = 0; id < tok.nRanks; id++) if (tok.decodeBytes([id]).length > tok.decodeBytes([longest]).length) longest = id;
        const one = tok.decodeBytes([longest]);
        for (const count of [1, 4096 / one.length + 1, (17 << 20) / one.length]) {
          const n = Math.ceil(count);
          const ids = new Uint32Array(n).fill(longest);
          const bytes = tok.decodeBytes(ids);
          expect(bytes.length).toBe(n * one.length);
          expect(Buffer.compare(bytes.subarray(bytes.length - one.length), one)).toBe(0);
          expect(tok.decode(ids).length).toBe(whatwg.decode(bytes).length);
        }
        // A small call after a large one still gives a fresh, exact array.
        const small = tok.decodeBytes([longest]);
        expect(small.length).toBe(one.length);
        expect(small.buffer.byteLength).toBe(one.length);
      });

      it("unknown ids throw UnknownTokenError naming the id and its position", () => {
        const tok = tokenizer(enc, backend);
        const beyond = tok.nVocab + 5;
        for (const ids of [new Uint32Array([1, 2, beyond, 3]), [1, 2, beyond, 3]]) {
          expect(() => tok.decode(ids)).toThrow(UnknownTokenError);
          expect(() => tok.decode(ids)).toThrow(`token id ${beyond} at position 2`);
          expect(() => tok.decodeBytes(ids)).toThrow(`token id ${beyond} at position 2`);
        }
        expect(() => tok.decode(new Uint32Array([0xffffffff]))).toThrow("token id 4294967295 at position 0");
        for (const bad of [-1, 1.5, NaN, 2 ** 32, Infinity]) expect(() => tok.decodeBytes([3, bad])).toThrow(`token id ${bad} at position 1`);
        expect(() => tok.decode([3, "7" as unknown as number])).toThrow(UnknownTokenError);
        // A failed call leaves nothing behind.
        expect(tok.decode([...tok.encode("ok")])).toBe("ok");
      });
    });
  }
}

(nativeBinding() ? describe : describe.skip)("native decode arguments", () => {
  const b = nativeBinding()!;
  it("names the argument that is wrong", () => {
    const tok = tokenizer("cl100k_base", "native");
    const handle = (tok as unknown as { backend: { handle: object } }).backend.handle;
    const out = new Uint8Array(64);
    expect(() => b.decodeInto({}, new Uint32Array(1), out)).toThrow(/decodeInto: argument 'handle'/);
    expect(() => b.decodeInto(handle, [1] as unknown as Uint32Array, out)).toThrow(/decodeInto: argument 'ids' must be a Uint32Array/);
    expect(() => b.decodeString(handle, new Int32Array(1) as unknown as Uint32Array, out)).toThrow(/decodeString: argument 'ids'/);
    expect(() => b.decodeInto(handle, new Uint32Array(1), new Uint16Array(8) as unknown as Uint8Array)).toThrow(/argument 'out' must be a Uint8Array/);
    expect(() => b.decodeInto(handle, new Uint32Array(1), new Uint8Array(15))).toThrow(/decodeInto: out must hold at least 16 bytes/);
    // Too small an out: the bytes needed come back instead (the string is not made).
    const small = new Uint8Array(20).fill(0xaa);
    const hello = tok.encode("Hello, world! Hello, world!");
    expect(b.decodeInto(handle, hello, small)).toBe(27);
    expect(b.decodeString(handle, hello, small)).toBe(27);
    expect(b.decodeInto(handle, new Uint32Array([1, 100261]), out)).toBe(-2);
  });
});
