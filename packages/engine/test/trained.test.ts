/**
 * The trained tiny K3, the embedded default (fixtures/models/trained-k3, from reference/train_tiny.py;
 * CI never retrains): the engine must give the float64 PyTorch reference's perplexity on a text the
 * model never saw (eval.txt, written for the fixture) and its greedy raw continuation of the default
 * prompt (expected.json, reference/trained_fixture.py). With the corpus present (K3_TEST_DATA), also
 * the perplexity train_tiny.py measured on the corpus's held-out end (training.json).
 */
import { existsSync, readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { EMBEDDED_DEFAULT_PROMPT, embeddedModelDir } from "../src/embedded.js";
import { Engine } from "../src/engine.js";
import { REPO, TRAINED_K3 } from "./helpers.js";

const expected = JSON.parse(readFileSync(join(TRAINED_K3, "expected.json"), "utf8"));
const training = JSON.parse(readFileSync(join(TRAINED_K3, "training.json"), "utf8"));

describe("trained tiny K3", () => {
  it("is the embedded default: the package's assets hold its checkpoint byte for byte", () => {
    const assets = embeddedModelDir();
    const shipped = readdirSync(assets).sort();
    expect(shipped).toContain("config.json");
    for (const f of shipped) expect(readFileSync(join(assets, f)).equals(readFileSync(join(TRAINED_K3, f)))).toBe(true);
    expect(expected.greedy.prompt).toBe(EMBEDDED_DEFAULT_PROMPT);
  });

  it.each([64, 16])("perplexity of eval.txt equals the reference's to 1e-4 relative (chunk %i)", async (chunkSize) => {
    const engine = await Engine.load(TRAINED_K3, { threads: 1, chunkSize });
    try {
      const text = readFileSync(join(TRAINED_K3, expected.eval.text_file), "utf8");
      const ids = engine.encodeText(text); // [BOS] + the text
      expect(ids).toEqual(expected.eval.ids);
      const r = await engine.evaluate(ids);
      expect(r.nll.length).toBe(expected.eval.scored);
      expect(Math.abs(r.meanNll - expected.eval.mean_nll) / expected.eval.mean_nll).toBeLessThan(1e-4);
      // A trained model: well below the uniform guess ln(vocab) = 8.32 (the random tiny-k3 scores 8.96).
      expect(r.meanNll).toBeLessThan(0.75 * Math.log(engine.config.vocabSize));
    } finally {
      engine.close();
    }
  });

  it("greedy raw continuation of the default prompt gives the reference's ids", async () => {
    const engine = await Engine.load(TRAINED_K3, { threads: 1 });
    try {
      const prompt = engine.encodeText(expected.greedy.prompt);
      expect(prompt).toEqual(expected.greedy.prompt_ids);
      const r = await engine.complete(prompt, { maxTokens: expected.greedy.ids.length, stopIds: [], temperature: 0 });
      expect(r.ids).toEqual(expected.greedy.ids);
      expect(r.text).toBe(expected.greedy.text);
    } finally {
      engine.close();
    }
  });

  const corpus = join(process.env.K3_TEST_DATA ?? join(REPO, "..", "shared", "data"), "corpus", "en.txt");
  const present = existsSync(corpus);
  if (!present) console.log(`skipping the held-out corpus perplexity check: ${corpus} is absent (set K3_TEST_DATA)`);
  it.skipIf(!present)("perplexity on the corpus's held-out end equals train_tiny.py's reference figure", async () => {
    // The held-out slice as train_tiny.py's split_corpus cuts it (code-point indices).
    const chars = Array.from(readFileSync(corpus, "utf8"));
    const cut = chars.lastIndexOf("\n", Math.floor(chars.length * (1 - training.heldout_fraction)) - 1) + 1;
    const held = chars.slice(cut).join("");
    const engine = await Engine.load(TRAINED_K3, { threads: 1 });
    try {
      const ids = engine.encodeText(held).slice(0, training.heldout.tokens_scored + 1);
      const r = await engine.evaluate(ids);
      const ref = training.heldout.mxfp4_experts;
      expect(r.nll.length).toBe(ref.scored);
      expect(Math.abs(r.meanNll - ref.mean_nll) / ref.mean_nll).toBeLessThan(1e-4);
    } finally {
      engine.close();
    }
  });
});
