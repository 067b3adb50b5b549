/**
 * `k3 eval` / Engine.evaluate against the PyTorch reference: the tiny models' expected.json carries
 * the reference's float64 mean NLL of [BOS] + eval.text (reference/k3ref/evaluate.py); the engine's
 * must equal it to 1e-4 relative, at several prefill chunk sizes (the text is longer than one chunk).
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { Engine } from "../src/engine.js";
import { tokenNll } from "../src/perplexity.js";
import { TINY_48B, TINY_K3, captureCli } from "./helpers.js";

const dir = mkdtempSync(join(tmpdir(), "k3-eval-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

interface EvalCase { text: string; ids: number[]; scored: number; mean_nll: number; perplexity: number }
const expected = (model: string): EvalCase => JSON.parse(readFileSync(join(model, "expected.json"), "utf8")).eval;

describe("tokenNll", () => {
  it("is -log softmax by hand, and stays finite for large logits", () => {
    const row = Float32Array.of(1, 2, 3);
    const z = Math.exp(1) + Math.exp(2) + Math.exp(3);
    expect(tokenNll(row, 0)).toBeCloseTo(Math.log(z) - 1, 14);
    expect(tokenNll(row, 2)).toBeCloseTo(Math.log(z) - 3, 14);
    expect(tokenNll(Float32Array.of(1000, 0), 1)).toBeCloseTo(1000, 9);
  });
});

describe.each([["tiny-k3", TINY_K3], ["tiny-kimi-linear", TINY_48B]])("Engine.evaluate on %s", (_name, model) => {
  const ref = expected(model);

  it("the text encodes to the reference's ids (longer than one 64-token chunk)", async () => {
    const engine = await Engine.load(model, { threads: 1 });
    try {
      expect(engine.encodeText(ref.text)).toEqual(ref.ids);
      expect(ref.ids.length).toBeGreaterThan(64);
    } finally {
      engine.close();
    }
  });

  it.each([64, 16, 7])("mean NLL equals PyTorch's to 1e-4 relative at chunk %i", async (chunkSize) => {
    const engine = await Engine.load(model, { threads: 1, chunkSize });
    try {
      const r = await engine.evaluate(ref.ids);
      expect(r.nll.length).toBe(ref.scored);
      expect(Math.abs(r.meanNll - ref.mean_nll) / ref.mean_nll).toBeLessThan(1e-4);
      expect(Math.abs(r.perplexity - ref.perplexity) / ref.perplexity).toBeLessThan(1e-3);
      expect(r.report.prompt_tokens).toBe(ref.ids.length);
      expect(r.report.generated_tokens).toBe(0);
    } finally {
      engine.close();
    }
  });
});

describe("eval at a larger chunk", () => {
  it("every position's NLL at chunk 1024 (as auto may pick) is chunk 64's, bit for bit, and the report names the chunk run", async () => {
    const model = TINY_K3;
    const ref = expected(model);
    expect(ref.ids.length).toBeGreaterThan(64); // two chunks at 64, one at 1024
    const at = async (chunkSize: number) => {
      const engine = await Engine.load(model, { threads: 1, chunkSize });
      try {
        return await engine.evaluate(ref.ids);
      } finally {
        engine.close();
      }
    };
    const [small, large] = [await at(64), await at(1024)];
    expect(Buffer.from(large.nll.buffer).equals(Buffer.from(small.nll.buffer))).toBe(true);
    expect(small.report.chunk_size).toBe(64);
    expect(large.report.chunk_size % 64).toBe(0);
    expect(large.report.chunk_size).toBeGreaterThan(64);
    expect(large.report.chunk_size).toBeLessThanOrEqual(1024);
  });
});

describe("k3 eval", () => {
  it("--text FILE prints the reference's perplexity and writes the JSON report; usage errors exit 2", async () => {
    const ref = expected(TINY_K3);
    const text = join(dir, "eval.txt");
    writeFileSync(text, ref.text);
    const json = join(dir, "eval.json");
    const r = await captureCli(["eval", "--model", TINY_K3, "--text", text, "--threads", "1", "--json", json, "--chunk", "32"]);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(new RegExp(`^eval: ${ref.scored} tokens scored \\(${ref.ids.length} run\\), mean NLL \\d+\\.\\d{6} nats`));
    expect(r.stderr).toMatch(/tokens: \d+ prompt \+ 0 generated/);
    const out = JSON.parse(readFileSync(json, "utf8"));
    expect(out.scored).toBe(ref.scored);
    expect(Math.abs(out.mean_nll - ref.mean_nll) / ref.mean_nll).toBeLessThan(1e-4);
    expect(out.report.prompt_ids).toEqual(ref.ids);

    const cut = await captureCli(["eval", "--model", TINY_K3, "--text", text, "--max-tokens", "10", "--threads", "1", "--quiet"]);
    expect(cut.code).toBe(0);
    expect(cut.stdout).toMatch(/^eval: 10 tokens scored \(11 run\)/);

    expect((await captureCli(["eval", "--model", TINY_K3])).code).toBe(2);
    expect((await captureCli(["eval", "--model", TINY_K3, "--text", join(dir, "missing.txt")])).code).toBe(2);
    expect((await captureCli(["eval", "--model", TINY_K3, "--ids", "5", "--quiet"])).code).toBe(2);
  });
});
