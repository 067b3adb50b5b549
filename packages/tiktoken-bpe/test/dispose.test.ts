/**
 * Tokenizer.dispose(): the native encoder is freed at once (a synchronous loop that builds
 * tokenizers used to grow until an event-loop turn let the finalizers run), and every later call
 * throws a TokenizerError instead of touching freed memory, on both backends.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { getEncoding, Tokenizer, TokenizerError } from "../src/index.js";
import { nativeBinding } from "../src/native.js";
import { backends, fixturesDir } from "./helpers.js";

const ranks = readFileSync(join(fixturesDir, "tiny-k3", "tiktoken.model"));
const KIMI_PATTERN = getEncoding("o200k_base").pattern; // any pat_str will do

function build(backend: "native" | "typescript"): Tokenizer {
  return new Tokenizer({ name: "tiny", ranks, pattern: KIMI_PATTERN, specialTokens: { "[BOS]": 100000 }, backend });
}

describe.each(backends)("Tokenizer.dispose (%s)", (backend) => {
  it("throws a TokenizerError from every call afterwards; a second dispose does nothing", () => {
    const tok = build(backend);
    const ids = tok.encode("hello world");
    expect(tok.decode(ids)).toBe("hello world");
    const stream = tok.streamDecoder();
    expect(stream.push(ids[0])).toBe(tok.decode([ids[0]]));
    tok.dispose();
    expect(tok.disposed).toBe(true);
    const calls: Array<() => unknown> = [
      () => tok.encode("hello"),
      () => tok.encodeOrdinary("hello"),
      () => tok.encodeWithSpecialTokens("[BOS]hello"),
      () => tok.countTokens("hello"),
      () => tok.encode("hello", { mode: "kimi-hf" }),
      () => tok.decode(ids),
      () => tok.decodeBytes(Array.from(ids)),
      () => tok.tokenBytes(ids[0]),
      () => stream.push(ids[0]),
    ];
    for (const call of calls) expect(call).toThrow(TokenizerError);
    expect(call0(tok)).toMatch(/tiny: the tokenizer was disposed/);
    expect(() => tok.dispose()).not.toThrow();
  });

  it("getEncoding rebuilds a cached encoding that was disposed", () => {
    const a = getEncoding("o200k_base", { backend });
    const ids = a.encode("cached");
    a.dispose();
    const b = getEncoding("o200k_base", { backend });
    expect(b).not.toBe(a);
    expect(b.encode("cached")).toEqual(ids);
  });
});

function call0(tok: Tokenizer): string {
  try {
    tok.encode("x");
    return "";
  } catch (e) {
    return (e as Error).message;
  }
}

describe.skipIf(!nativeBinding())("native destroy()", () => {
  it("frees the encoder now: a synchronous loop of 60 loads of a 100k-rank file stays flat, and a destroyed handle throws in C", () => {
    const binding = nativeBinding()!;
    const lines: string[] = [];
    for (let i = 0; i < 256; i++) lines.push(`${Buffer.from([i]).toString("base64")} ${i}`);
    for (let i = 256; i < 100_000; i++) lines.push(`${Buffer.from("tok" + i.toString(36)).toString("base64")} ${i}`);
    const big = Buffer.from(lines.join("\n") + "\n");
    const rss0 = process.memoryUsage().rss;
    for (let i = 0; i < 60; i++) {
      const t = new Tokenizer({ name: "loop", ranks: big, pattern: KIMI_PATTERN, backend: "native" });
      t.encode("a few words");
      t.dispose();
    }
    // Measured (17:37 UTC 2026-12-02): 100 loads grew RSS by 569 MB without dispose(), 49 MB with it.
    expect(process.memoryUsage().rss - rss0).toBeLessThan(150e6);
    const bytes = Uint8Array.from({ length: 256 }, (_, i) => i);
    const offsets = Uint32Array.from({ length: 257 }, (_, i) => i);
    const handle = binding.create(bytes, offsets, Uint32Array.from(bytes), 2, new Uint8Array(0), Uint32Array.of(0), new Uint32Array(0));
    expect(binding.encode(handle, new Uint8Array([97]), 1, null, new Uint32Array(4))).toBe(1);
    binding.destroy(handle);
    binding.destroy(handle);
    expect(() => binding.encode(handle, new Uint8Array([97]), 1, null, new Uint32Array(4))).toThrow(/disposed/);
    expect(() => binding.decodeInto(handle, Uint32Array.of(0), new Uint8Array(32))).toThrow(/disposed/);
    expect(() => binding.destroy({})).toThrow(/tokenizer handle/);
  });
});
